"""Wheelhouse mode: the host collects exactly the locked wheels for the *target* image, hashes checked.

Wheels live in a content-addressed cache (`<cache>/wheels/sha256/<hash>/<file name>`), so a second
build downloads nothing and a file is trusted only by its hash. pip runs on the host with the target's
Python version, ABI and every manylinux tag its glibc accepts (derived, never a hand-picked few), so the
host's own interpreter or platform never decides what lands in the image. Credentials for private
indexes are read from the environment variables the dossier names and handed to pip through its
environment, never on a command line, in a file of the build context, or in a log (output is redacted).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from packaging.markers import Marker
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from orchestrator.credentials import credential, user_and_token
from orchestrator.dossier.load import file_sha256
from orchestrator.dossier.lock import Lock, LockedRequirement
from orchestrator.dossier.models import IndexSpec
from orchestrator.engine.build_log import first_error, missing_pin, pin_not_found
from orchestrator.errors import BadInput, WheelhouseError
from orchestrator.redact import redact

# pip's legacy manylinux names and the glibc minor they stand for (PEP 600, "legacy manylinux tags").
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class TargetPlatform:
    python_version: str  # "3.11"
    glibc: str  # "2.36"
    machine: str = "x86_64"

    @property
    def abi(self) -> str:
        return "cp" + self.python_version.replace(".", "")

    def platform_tags(self) -> list[str]:
        """Every manylinux tag a glibc of this version accepts, newest first (PEP 600 + legacy aliases)."""
        major, minor = (int(part) for part in self.glibc.split("."))
        if major != 2:
            raise BadInput(f"glibc {self.glibc}: only glibc 2.x targets are supported")
        tags = [f"manylinux_2_{m}_{self.machine}" for m in range(minor, 4, -1)]
        tags += [f"{name}_{self.machine}" for m, name in _LEGACY_MANYLINUX.items() if m <= minor]
        return tags

    def marker_environment(self) -> dict[str, str]:
        return {
            "python_version": self.python_version,
            "python_full_version": f"{self.python_version}.0",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "os_name": "posix",
            "platform_machine": self.machine,
        }


@dataclass(frozen=True)
class Wheel:
    requirement: str
    file_name: str
    sha256: str


def default_cache_dir() -> Path:
    explicit = os.environ.get("ORCH_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "orch"


def applies_to(requirement: LockedRequirement, target: TargetPlatform) -> bool:
    if requirement.marker is None:
        return True
    return Marker(requirement.marker).evaluate(target.marker_environment())


def _verified(path: Path, digest: str) -> bool:
    """True when `path` hashes to `digest`. The result is remembered next to the file, keyed by size and
    mtime, so a 200 MB wheel is hashed once, not at every build; a changed file is hashed again."""
    stat = path.stat()
    stamp = path.with_name(path.name + ".verified")
    key = f"{digest} {stat.st_size} {stat.st_mtime_ns}"
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == key:
        return True
    if file_sha256(path) != digest:
        return False
    stamp.write_text(key, encoding="utf-8")
    return True


def _cached(cache: Path, requirement: LockedRequirement) -> tuple[Path, str] | None:
    """The cached wheel for one of the requirement's hashes, checked so a corrupted cache is not trusted."""
    for digest in requirement.hashes:
        folder = cache / "wheels" / "sha256" / digest
        if folder.is_dir():
            files = [path for path in folder.iterdir() if path.suffix == ".whl"]
            if files and _verified(files[0], digest):
                return files[0], digest
    return None


def _with_credentials(index: IndexSpec, environ: Mapping[str, str]) -> str:
    if index.access is None:
        return index.url
    secret = credential(index.access, environ, needed_by=f"index {index.url}", form="'user:token'")
    user, password = user_and_token(secret)
    parts = urlsplit(index.url)
    userinfo = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{parts.netloc}"))


def pip_download_command(
    target: TargetPlatform, requirements_file: Path, dest: Path, *, find_links: Sequence[str]
) -> list[str]:
    """The pip command line; indexes travel in the environment (see `pip_index_environment`)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--require-hashes",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        # An unreachable index (air-gapped host, offline mirror) should cost seconds, not minutes of
        # back-off per package; ORCH_PIP_RETRIES raises it on flaky networks.
        "--retries",
        os.environ.get("ORCH_PIP_RETRIES", "1"),
        "--python-version",
        target.python_version,
        "--implementation",
        "cp",
        "--abi",
        target.abi,
        "--abi",
        "abi3",
        "--abi",
        "none",
        "--dest",
        str(dest),
        "-r",
        str(requirements_file),
    ]
    for tag in target.platform_tags():
        command += ["--platform", tag]
    for link in find_links:
        command += ["--find-links", link]
    return command


def pip_index_environment(indexes: Sequence[IndexSpec], use_pypi: bool, environ: Mapping[str, str]) -> dict[str, str]:
    """PIP_INDEX_URL / PIP_EXTRA_INDEX_URL for the dossier's indexes, credentials filled in from `environ`."""
    urls = [_with_credentials(index, environ) for index in indexes]
    env: dict[str, str] = {}
    if use_pypi:
        if urls:
            env["PIP_EXTRA_INDEX_URL"] = " ".join(urls)
    elif urls:
        env["PIP_INDEX_URL"] = urls[0]
        if urls[1:]:
            env["PIP_EXTRA_INDEX_URL"] = " ".join(urls[1:])
    else:
        env["PIP_NO_INDEX"] = "1"
    return env


def _first_error(output: str) -> str:
    found = first_error(output.splitlines())
    if found is not None:
        return found
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "pip gave no output"


def _check_pinned_version(req: LockedRequirement, file_name: str, lock_file: str | None) -> None:
    """The file a lock line's hash names must be of the pinned name and version.

    A lock edited by hand (version changed, hashes kept) would otherwise be served the old version from
    the cache, and the build would fail later, far from the lock line that is wrong.
    """
    try:
        name, version, _, _ = parse_wheel_filename(file_name)
    except InvalidWheelFilename:
        return
    if canonicalize_name(name) != req.name or version != req.version:
        raise BadInput(
            f"{lock_file or 'the lock'}:{req.line}: {req.text} carries the hash of {file_name}, another "
            "version: a lock line's hashes must be those of the pinned version's files",
            hint="Lock again (e.g. uv pip compile --generate-hashes) rather than editing a version by hand.",
        )


def collect_wheels(
    lock: Lock,
    target: TargetPlatform,
    dest: Path,
    *,
    indexes: Sequence[IndexSpec] = (),
    use_pypi: bool = True,
    find_links: Sequence[str] = (),
    cache: Path | None = None,
    environ: Mapping[str, str] | None = None,
    run: Runner | None = None,
    lock_file: str | None = None,
) -> list[Wheel]:
    """Put one verified wheel per applicable lock line into `dest`, downloading only what the cache lacks.

    `run` runs `pip download` (default: `subprocess.run`, looked up at call time, so that the unit tests'
    tripwire on it holds); `lock_file` (as the dossier names it) is only used to say where a wrong pin is.
    """
    run = run or subprocess.run
    if not lock.fully_hashed:
        raise BadInput("wheelhouse mode needs a lock with --hash on every line")
    cache = cache or default_cache_dir()
    environ = os.environ if environ is None else environ
    wanted = [req for req in lock.requirements if applies_to(req, target)]
    missing = [req for req in wanted if _cached(cache, req) is None]
    if missing:
        with tempfile.TemporaryDirectory(prefix="orch-wheels-") as scratch:
            scratch_dir = Path(scratch)
            requirements = scratch_dir / "requirements.txt"
            requirements.write_text(
                "".join(f"{req.text} " + " ".join(f"--hash=sha256:{h}" for h in req.hashes) + "\n" for req in missing),
                encoding="utf-8",
            )
            download_dir = scratch_dir / "download"
            command = pip_download_command(target, requirements, download_dir, find_links=find_links)
            env = {**environ, **pip_index_environment(indexes, use_pypi, environ)}
            try:
                result = run(command, env=env, capture_output=True, text=True, check=False, timeout=3600)
            except subprocess.TimeoutExpired:
                raise WheelhouseError("pip download ran for more than an hour and was stopped") from None
            if result.returncode != 0:
                not_found = missing_pin(result.stdout + "\n" + result.stderr)
                if not_found is not None:
                    where = f"the dossier's indexes for Python {target.python_version}, {target.machine}"
                    raise pin_not_found(lock, lock_file, not_found, where)
                raise WheelhouseError(
                    "downloading the locked wheels for the target image failed: "
                    + redact(_first_error(result.stdout + "\n" + result.stderr)),
                    hint=f"Target: Python {target.python_version}, glibc {target.glibc}, {target.machine}. "
                    "Check that every pin has a wheel for that platform on the dossier's indexes.",
                )
            for path in sorted(download_dir.glob("*.whl")):
                digest = file_sha256(path)
                folder = cache / "wheels" / "sha256" / digest
                folder.mkdir(parents=True, exist_ok=True)
                final = folder / path.name
                if not final.exists():
                    partial = folder / (path.name + ".partial")
                    shutil.move(str(path), partial)
                    os.replace(partial, final)
    dest.mkdir(parents=True, exist_ok=True)
    wheels: list[Wheel] = []
    for req in wanted:
        found = _cached(cache, req)
        if found is None:
            raise WheelhouseError(
                f"no wheel matching the locked hashes of {req.text} was downloaded",
                hint="The index served a file whose hash is not in the lock, or no wheel exists for the target.",
            )
        source, digest = found
        _check_pinned_version(req, source.name, lock_file)
        target_path = dest / source.name
        try:
            os.link(source, target_path)
        except OSError:
            shutil.copy2(source, target_path)
        wheels.append(Wheel(requirement=req.text, file_name=source.name, sha256=digest))
    return wheels
