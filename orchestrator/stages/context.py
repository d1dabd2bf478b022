"""The build context on disk: Dockerfile, lock, application code, wheelhouse, toolchain debs, CA bundle.

`orch render --out DIR` writes everything `docker build DIR` needs, so the rendered folder is also
the baseline a plain `docker build` can be compared with. The folder is assembled beside its
destination and renamed into place: an interrupted render never leaves a half-written folder behind,
and a folder that holds anything but an earlier orch render is never overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from orchestrator.dossier.load import LoadedDossier
from orchestrator.dossier.lock import Lock, LockedRequirement
from orchestrator.engine import Engine
from orchestrator.errors import BadInput
from orchestrator.plan.build import EXT_OUT, FEED_FETCH, BuildPlan
from orchestrator.plan.builder import INSTALL_HELPERS, INSTALL_SCRIPT
from orchestrator.render.dockerfile import feed_fetch_source, render_dockerfile
from orchestrator.resources import probe_source
from orchestrator.stages.code_source import CodeState, copy_code, inspect_code
from orchestrator.stages.debhouse import DEBS_DIR, Deb, collect_debs
from orchestrator.stages.wheelhouse import TargetPlatform, Wheel, collect_wheels, default_cache_dir
from orchestrator.vendor import InstallerWheel

MARKER = ".orch-render.json"


def installer_lock(wheel: InstallerWheel) -> Lock:
    """A one-line lock for the installer's pinned wheel, so the wheelhouse collects and checks it like the rest."""
    text = f"{wheel.name}=={wheel.version}"
    requirement = LockedRequirement(
        name=wheel.name, version=Version(wheel.version), text=text, hashes=(wheel.sha256,), marker=None, line=1
    )
    return Lock(requirements=(requirement,))


@dataclass(frozen=True)
class RenderedContext:
    directory: Path
    dockerfile: str
    wheels: tuple[Wheel, ...]
    code: CodeState
    #: The toolchain's .deb files in `toolchain-debs/` (wheelhouse builds with extensions), sorted by name.
    debs: tuple[Deb, ...] = ()


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
    code: CodeState | None = None,
    engine: Engine | None = None,
    base_id: str | None = None,
) -> RenderedContext:
    """`engine` and `base_id` (the base image's id) are needed only when the plan collects toolchain debs."""
    code = code or inspect_code(loaded)
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.orch-tmp-", dir=out.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary output folder
    try:
        dockerfile = render_dockerfile(plan)
        (staging / "Dockerfile").write_text(dockerfile, encoding="utf-8")
        shutil.copyfile(loaded.resolve(loaded.model.python.requirements), staging / "requirements.lock")
        copy_code(loaded, code, staging / "app", scratch=staging / ".git-scratch")
        shutil.rmtree(staging / ".git-scratch", ignore_errors=True)
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
                find_links=loaded.find_links(),
                cache=cache,
                lock_file=loaded.model.python.requirements,
            )
            if plan.uv is not None:
                wheels += collect_wheels(
                    installer_lock(plan.uv),
                    TargetPlatform(python_version=plan.python_version, glibc=glibc),
                    staging / "wheels",
                    # uv is on PyPI whatever the dossier's own indexes; its hash pins the file, not the source.
                    indexes=loaded.model.python.indexes,
                    use_pypi=True,
                    find_links=loaded.find_links(),
                    cache=cache,
                    lock_file="orchestrator/data/installers.json",
                )
        toolchain = loaded.model.build.toolchain.requirements if loaded.model.build is not None else None
        if plan.extensions is not None and plan.extensions.cuda_toolchain_wheels and toolchain is not None:
            # The CUDA toolchain's own lock and wheels, apart from the venv's: a toolchain change leaves the
            # venv's layers cached, and none of these reach the final image.
            shutil.copyfile(loaded.resolve(toolchain), staging / "toolchain.lock")
            if plan.install_mode == "wheelhouse" and loaded.toolchain_lock is not None:
                wheels += collect_wheels(
                    loaded.toolchain_lock,
                    TargetPlatform(python_version=plan.python_version, glibc=loaded.base_image.glibc or ""),
                    staging / "toolchain-wheels",
                    indexes=loaded.model.python.indexes,
                    use_pypi=loaded.model.python.use_pypi,
                    find_links=loaded.find_links(),
                    cache=cache,
                    lock_file=toolchain,
                )
        debs: list[Deb] = []
        if plan.toolchain_debs and plan.extensions is not None:
            if engine is None or base_id is None:
                raise BadInput("the toolchain's Debian packages are collected through the engine: none was given")
            debs = collect_debs(
                engine,
                base_id,
                plan.extensions.toolchain_apt_packages,
                staging / DEBS_DIR,
                cache=cache or default_cache_dir(),
            )
        if plan.ca_bundle:
            if ca_bundle is None or not ca_bundle.is_file():
                raise BadInput(f"--ca-bundle {ca_bundle} is not a file")
            (staging / "orch").mkdir(exist_ok=True)
            shutil.copyfile(ca_bundle, staging / "orch" / "ca-bundle.pem")
        if plan.wheel_feed:
            # Served by the feed with the lock and the wheels; the install step checks its sha256 first.
            (staging / FEED_FETCH).write_bytes(feed_fetch_source())
        if plan.mounted_wheels:
            # What BuildKit's install step runs, mounted for that step only (in the context: a reader sees them).
            (staging / "orch").mkdir(exist_ok=True)
            for script in (INSTALL_SCRIPT, *INSTALL_HELPERS):
                (staging / "orch" / script).write_text(probe_source(script), encoding="utf-8")
        if plan.extensions is not None:
            # What the builder's extension step runs: the spec from the dossier and orch's build script.
            (staging / "orch").mkdir(exist_ok=True)
            (staging / "orch" / "extensions.json").write_text(plan.extensions.spec_json, encoding="utf-8")
            (staging / "orch" / "orch-extensions.pth").write_text(EXT_OUT + "\n", encoding="utf-8")
            (staging / "orch" / "build_extensions.py").write_text(probe_source("build_extensions.py"), encoding="utf-8")
        marker = {
            "dossier": loaded.model.name,
            "identity": loaded.identity,
            "variant": loaded.variant,
            "code": {"kind": code.kind, "revision": code.revision, "dirty_diff_sha256": code.diff_sha256},
            # Symlinks inside the dossier's folder that were followed: the context holds their content.
            "links": dict(sorted(loaded.links.items())),
            "wheels": [{"file": w.file_name, "sha256": w.sha256} for w in wheels],
            "debs": [{"file": d.file_name, "sha256": d.sha256} for d in debs],
        }
        (staging / MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        _replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return RenderedContext(directory=out, dockerfile=dockerfile, wheels=tuple(wheels), code=code, debs=tuple(debs))
