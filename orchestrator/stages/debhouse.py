"""The debhouse: the toolchain's Debian packages, collected once on the host so the build runs offline.

The apt analogue of the wheelhouse (stages/wheelhouse.py). The builder stage's toolchain (gcc-N, g++-N,
the interpreter's headers) used to come from `apt-get install` inside the build, which needs the
distribution's archive and so the engine's default network. Instead, one short-lived container of the
*base image itself* (by its id) runs `apt-get install --download-only`: apt resolves exactly the packages
that base lacks, against the base's own sources and snapshot, and leaves their .deb files in a folder.
The host copies that folder out with the engine's archive API (no host mount), keeps only regular
`*.deb` files within stated limits (the archive is untrusted: a base image can be anything), hashes
them and caches them under `<cache>/debs/<key>/`, the key being the base id and the sorted package list.
The build context then carries them as `toolchain-debs/`, `dpkg -i` installs them, and the build needs
no network. A cache hit starts no container.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO
from urllib.parse import unquote

from orchestrator.dossier.paths import file_sha256
from orchestrator.engine import CopyOut, Engine, RunSpec, describe_exit
from orchestrator.errors import BadInput, EnvironmentFailure
from orchestrator.plan.run import PROBE_LABEL
from orchestrator.redact import redact
from orchestrator.untrusted import exited

#: The folder of the build context (and the cache's manifest name) the packages travel in.
DEBS_DIR = "toolchain-debs"
MANIFEST = "manifest.json"
#: Where apt leaves the files inside the collection container (not /var/cache/apt: a base may clean it).
ARCHIVES = "/tmp/orch-debs"
#: What the copied archive may hold: a gcc + headers closure is ~70 MB in ~40 files on Debian bookworm.
MAX_ARCHIVE_BYTES = 2 << 30
MAX_FILES = 2000
COLLECT_TIMEOUT_S = 900
STEP = "collecting the toolchain's Debian packages (apt-get install --download-only in the base image)"
_DEB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+~%_-]*\.deb$")
_NOT_FOUND = re.compile(r"(?:Unable to locate package\s+|Package ')([A-Za-z0-9.+-]+)")


@dataclass(frozen=True)
class Deb:
    file_name: str
    sha256: str
    size: int
    package: str
    version: str
    architecture: str


def parse_deb_name(file_name: str) -> tuple[str, str, str]:
    """`name_version_arch.deb` (apt's archive names, the epoch's `:` written `%3a`) → (name, version, arch)."""
    if not file_name.endswith(".deb"):
        raise ValueError(f"{file_name!r} is not a .deb file name")
    parts = unquote(file_name[: -len(".deb")]).split("_")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"{file_name!r} is not of the form name_version_architecture.deb")
    name, version, architecture = parts
    return name, version, architecture


def cache_key(base_id: str, packages: Sequence[str]) -> str:
    """The cache folder's name: the same base image and the same package set give the same files."""
    text = json.dumps({"base_id": base_id, "packages": sorted(set(packages))}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def collect_command(packages: Sequence[str]) -> list[str]:
    """apt in the base: download (not install) what these packages need that the base lacks.

    The sandbox user is root because the container runs with every capability dropped (engine rule), and
    apt's switch to `_apt` needs CAP_SETUID; the container only downloads, into its own /tmp.
    """
    apt = f"apt-get -q -o APT::Sandbox::User=root -o Dir::Cache::archives={ARCHIVES}"
    script = (
        f"set -e; mkdir -p {ARCHIVES}/partial; {apt} update; "
        f"{apt} install --download-only -y --no-install-recommends {' '.join(sorted(set(packages)))}"
    )
    return ["sh", "-c", script]


def collect_spec(base_id: str, packages: Sequence[str]) -> RunSpec:
    return RunSpec(
        image=base_id,
        command=collect_command(packages),
        network=True,
        user="0",
        timeout_s=COLLECT_TIMEOUT_S,
        mem_limit="2g",
        labels={PROBE_LABEL: "toolchain-debs"},
        max_log_bytes=1 << 20,
    )


def collect_error(exit_code: int | None, output: str, packages: Sequence[str]) -> Exception:
    """apt's failure as one error: a package the base's archive does not have is the dossier's (exit 2)."""
    for line in output.splitlines():
        if line.startswith("E:"):
            match = _NOT_FOUND.search(line)
            if match is not None and match.group(1) in packages:
                return BadInput(
                    f"{STEP}: the base image's archive has no package {match.group(1)} ({line[2:].strip()})",
                    hint="The toolchain's packages follow build.toolchain.gcc and python.version: choose a gcc "
                    "version the base image's distribution ships (Debian bookworm: 12).",
                )
            return EnvironmentFailure(f"{STEP} failed: {redact(line[2:].strip())}")
    return EnvironmentFailure(f"{STEP} failed: {redact(exited(exit_code, output))}")


def extract_debs(archive: IO[bytes], dest: Path, *, max_bytes: int = MAX_ARCHIVE_BYTES) -> list[str]:
    """The `*.deb` files of the engine's tar of the archives folder, into `dest`; their names, sorted.

    The tar comes from a container: only regular files with a plain package file name, directly inside
    the copied folder, are taken (apt's `lock` and `partial/` are skipped); a link, a device, a path
    that climbs out, a file over the size budget or more files than the limit are refused.
    """
    names: list[str] = []
    total = 0
    try:
        with tarfile.open(fileobj=archive, mode="r|") as tar:
            for member in tar:
                path = PurePosixPath(member.name)
                if path.is_absolute() or ".." in path.parts:
                    raise EnvironmentFailure(f"{STEP}: the archive holds {member.name!r}, a path outside its folder")
                inner = path.parts[1:]  # the archive's first component is the copied folder itself
                if member.isdir() or not inner or inner[0] == "partial" or inner == ("lock",):
                    continue
                if not member.isfile():
                    raise EnvironmentFailure(
                        f"{STEP}: {member.name!r} is not a regular file; orch takes only .deb files"
                    )
                if len(inner) != 1 or not _DEB_NAME.match(inner[0]):
                    raise EnvironmentFailure(f"{STEP}: {member.name!r} is not a Debian package file name")
                total += member.size
                if total > max_bytes or len(names) >= MAX_FILES:
                    raise EnvironmentFailure(
                        f"{STEP}: the packages exceed {max_bytes} bytes or {MAX_FILES} files; refusing the archive"
                    )
                source = tar.extractfile(member)
                if source is None:
                    raise EnvironmentFailure(f"{STEP}: {member.name!r} could not be read")
                with source, (dest / inner[0]).open("xb") as target:
                    shutil.copyfileobj(source, target)
                names.append(inner[0])
    except tarfile.TarError as exc:
        raise EnvironmentFailure(f"{STEP}: the engine's archive could not be read: {exc}") from None
    except FileExistsError as exc:
        raise EnvironmentFailure(f"{STEP}: {Path(str(exc.filename)).name!r} appears twice in the archive") from None
    return sorted(names)


def describe_debs(folder: Path, names: Sequence[str]) -> list[Deb]:
    debs: list[Deb] = []
    for name in names:
        try:
            package, version, architecture = parse_deb_name(name)
        except ValueError as exc:
            raise EnvironmentFailure(f"{STEP}: {exc}") from None
        path = folder / name
        debs.append(
            Deb(
                file_name=name,
                sha256=file_sha256(path),
                size=path.stat().st_size,
                package=package,
                version=version,
                architecture=architecture,
            )
        )
    return debs


def manifest_json(base_id: str, packages: Sequence[str], debs: Sequence[Deb]) -> str:
    document = {
        "base_id": base_id,
        "packages": sorted(set(packages)),
        "debs": [
            {
                "file": deb.file_name,
                "sha256": deb.sha256,
                "size": deb.size,
                "package": deb.package,
                "version": deb.version,
                "architecture": deb.architecture,
            }
            for deb in debs
        ],
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def read_cached(folder: Path) -> list[Deb] | None:
    """The cached set when its manifest is there and every file still has its size (the hash is checked
    when the file is linked into a context)."""
    try:
        document = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        debs = [
            Deb(
                file_name=item["file"],
                sha256=item["sha256"],
                size=item["size"],
                package=item["package"],
                version=item["version"],
                architecture=item["architecture"],
            )
            for item in document["debs"]
        ]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for deb in debs:
        path = folder / deb.file_name
        if not path.is_file() or path.stat().st_size != deb.size:
            return None
    return debs


def _download(engine: Engine, base_id: str, packages: Sequence[str], folder: Path) -> list[Deb]:
    with tempfile.TemporaryFile() as archive:
        outcome = engine.run(collect_spec(base_id, packages), CopyOut(ARCHIVES, archive, MAX_ARCHIVE_BYTES))
        output = outcome.stdout + "\n" + outcome.stderr
        if outcome.timed_out:
            raise EnvironmentFailure(f"{STEP}: stopped after {COLLECT_TIMEOUT_S} s")
        if outcome.exit_code != 0:
            if outcome.oom_killed:
                raise EnvironmentFailure(f"{STEP}: {describe_exit(outcome, collect_spec(base_id, packages), '')}")
            raise collect_error(outcome.exit_code, output, packages)
        archive.seek(0)
        names = extract_debs(archive, folder)
    if not names:
        raise EnvironmentFailure(
            f"{STEP}: apt downloaded no package for {' '.join(sorted(packages))}",
            hint="The base image may already hold them all; then the dossier's build section is not needed as is.",
        )
    return describe_debs(folder, names)


def collect_debs(engine: Engine, base_id: str, packages: Sequence[str], dest: Path, *, cache: Path) -> list[Deb]:
    """Put the packages' .deb closure for `base_id` into `dest`, from the cache or one container."""
    folder = cache / "debs" / cache_key(base_id, packages)
    debs = read_cached(folder)
    if debs is None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            debs = _download(engine, base_id, packages, staging)
            (staging / MANIFEST).write_text(manifest_json(base_id, packages, debs), encoding="utf-8")
            if folder.exists():  # a damaged earlier entry, or another orch won the race: replace it
                shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):  # another process put a complete entry there first
                os.replace(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        debs = read_cached(folder)
        if debs is None:
            raise EnvironmentFailure(f"{STEP}: the cache entry {folder} could not be written whole")
    dest.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        source = folder / deb.file_name
        if file_sha256(source) != deb.sha256:
            shutil.rmtree(folder, ignore_errors=True)
            raise EnvironmentFailure(
                f"{STEP}: the cached {deb.file_name} no longer has its recorded sha256; the cache entry was removed",
                hint="Run the command again to collect the packages anew.",
            )
        try:
            os.link(source, dest / deb.file_name)
        except OSError:
            shutil.copy2(source, dest / deb.file_name)
    return debs
