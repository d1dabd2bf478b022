"""The build context on disk: Dockerfile, lock, application code, wheelhouse, CA bundle.

`orch render --out DIR` writes everything `docker build DIR` needs, so the rendered folder is also
the baseline a plain `docker build` can be compared with. The folder is assembled beside its
destination and renamed into place: an interrupted render never leaves a half-written folder behind,
and a folder that holds anything but an earlier orch render is never overwritten.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.dossier.load import LoadedDossier, iter_tree
from orchestrator.errors import BadInput, ToolMissing
from orchestrator.plan import BuildPlan
from orchestrator.redact import redact
from orchestrator.render import render_dockerfile
from orchestrator.wheelhouse import TargetPlatform, Wheel, collect_wheels

MARKER = ".orch-render.json"


@dataclass(frozen=True)
class RenderedContext:
    directory: Path
    dockerfile: str
    wheels: tuple[Wheel, ...]


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    if shutil.which("git") is None:
        raise ToolMissing(
            "git is not installed, and the dossier's code comes from a git URL", hint="apt-get install git"
        )
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False, timeout=900)


def export_git(url: str, revision: str, dest: Path) -> None:
    """The tree of exactly `revision` (never a work tree), extracted into `dest`."""
    with tempfile.TemporaryDirectory(prefix="orch-git-") as scratch:
        repo = Path(scratch)
        for args in (("init", "--quiet"), ("fetch", "--quiet", "--depth", "1", url, revision)):
            result = _git(*args, cwd=repo)
            if result.returncode != 0:
                stderr = result.stderr.decode(errors="replace").strip()
                message = redact(stderr.splitlines()[-1] if stderr else f"git {args[0]} failed")
                raise BadInput(
                    f"cannot fetch revision {revision} from {redact(url)}: {message}",
                    hint="Check code.source and code.revision (a full commit id reachable from the URL).",
                )
        archive = _git("archive", "--format=tar", "FETCH_HEAD", cwd=repo)
        if archive.returncode != 0:
            raise BadInput(f"git archive of {revision} failed: {archive.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(dest, filter="data")


def copy_code(loaded: LoadedDossier, dest: Path) -> None:
    code = loaded.model.code
    dest.mkdir(parents=True)
    if code.is_git_url:
        assert code.revision is not None  # the schema requires it for git URLs
        export_git(code.source, code.revision, dest)
    else:
        root = loaded.code_dir
        for path in iter_tree(root):
            target = dest / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    if not (dest / code.entrypoint).is_file():
        raise BadInput(f"code.entrypoint {code.entrypoint!r} is not a file in the code source {code.source!r}")


def _replace_folder(staging: Path, out: Path) -> None:
    if out.exists():
        if not out.is_dir():
            raise BadInput(f"--out {out} exists and is not a folder")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise BadInput(
                f"--out {out} is not empty and was not written by orch render; refusing to overwrite it",
                hint="Give a new or empty folder.",
            )
        old = out.with_name(f".{out.name}.orch-old-{os.getpid()}")
        out.rename(old)
        staging.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(out)


def write_context(
    loaded: LoadedDossier,
    plan: BuildPlan,
    out: Path,
    *,
    ca_bundle: Path | None = None,
    cache: Path | None = None,
) -> RenderedContext:
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.orch-tmp-", dir=out.parent))
    try:
        dockerfile = render_dockerfile(plan)
        (staging / "Dockerfile").write_text(dockerfile, encoding="utf-8")
        shutil.copyfile(loaded.resolve(loaded.model.python.requirements), staging / "requirements.lock")
        copy_code(loaded, staging / "app")
        wheels: list[Wheel] = []
        if plan.install_mode == "wheelhouse":
            glibc = loaded.base_image.glibc
            if glibc is None:
                raise BadInput(
                    f"base image {plan.base.ref} is not in orch's table: state its glibc with "
                    "system.base_image.glibc so the wheelhouse can be collected for it"
                )
            wheels = collect_wheels(
                loaded.lock,
                TargetPlatform(python_version=plan.python_version, glibc=glibc),
                staging / "wheels",
                indexes=loaded.model.python.indexes,
                use_pypi=loaded.model.python.use_pypi,
                find_links=loaded.model.python.find_links,
                cache=cache,
            )
        if plan.ca_bundle:
            if ca_bundle is None or not ca_bundle.is_file():
                raise BadInput(f"--ca-bundle {ca_bundle} is not a file")
            (staging / "orch").mkdir()
            shutil.copyfile(ca_bundle, staging / "orch" / "ca-bundle.pem")
        marker = {
            "dossier": loaded.model.name,
            "identity": loaded.identity,
            "variant": loaded.variant,
            "wheels": [{"file": w.file_name, "sha256": w.sha256} for w in wheels],
        }
        (staging / MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        _replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return RenderedContext(directory=out, dockerfile=dockerfile, wheels=tuple(wheels))
