"""`orch base`: a base image made locally, without any registry.

`debootstrap` installs a pinned Debian suite (optionally from a snapshot of the Debian archive, for a
reproducible date) with Python, venv and pip into a folder; `docker import` turns that folder into an
image whose labels say what it is made of. This is what an air-gapped site uses instead of pulling,
and what orch's own tests and demo build on, since no registry is reachable there.

Idempotent: a tag that already exists with the same recipe label is reused; the same tag with another
recipe is refused unless `force` is given.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from orchestrator.engine import Engine, RootfsImport
from orchestrator.errors import BadInput, EnvironmentFailure, ToolMissing
from orchestrator.redact import redact
from orchestrator.timestamps import rfc3339_now
from orchestrator.vendor import base_images

REPOSITORY = "orch/debian-python"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SNAPSHOT_MIRROR = "http://snapshot.debian.org/archive/debian/{snapshot}"
DEFAULT_PACKAGES = ("ca-certificates", "python3", "python3-pip", "python3-venv")
LABEL = "io.orch.base"


def _suites() -> dict[str, str]:
    """The suites orch can make a base of, with their Python: the `orch/debian-python:SUITE` rows of
    data/base_images.json (the table every base-image decision reads), so the two cannot drift apart."""
    prefix = f"{REPOSITORY}:"
    return {
        image.ref.removeprefix(prefix): image.python_versions[0]
        for image in base_images()
        if image.ref.startswith(prefix)
    }


#: Suite → the Python its apt provides, e.g. {"bookworm": "3.11", "trixie": "3.13"}.
SUITES = _suites()


@dataclass(frozen=True)
class BaseRecipe:
    suite: str = "bookworm"
    mirror: str = DEFAULT_MIRROR
    snapshot: str | None = None  # e.g. 20250520T000000Z
    packages: tuple[str, ...] = DEFAULT_PACKAGES
    variant: str = "minbase"
    arch: str = "amd64"
    extra_packages: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.suite not in SUITES:
            raise BadInput(f"suite {self.suite!r} is not supported; choose one of: {', '.join(SUITES)}")
        if self.snapshot is not None and not _is_snapshot(self.snapshot):
            raise BadInput(f"--snapshot {self.snapshot!r} must look like 20250520T000000Z (UTC, Debian snapshot)")

    @property
    def effective_mirror(self) -> str:
        return SNAPSHOT_MIRROR.format(snapshot=self.snapshot) if self.snapshot else self.mirror

    @property
    def all_packages(self) -> tuple[str, ...]:
        return tuple(sorted({*self.packages, *self.extra_packages}))

    @property
    def python(self) -> str:
        return SUITES[self.suite]

    @property
    def tag(self) -> str:
        return self.suite

    @property
    def ref(self) -> str:
        return f"{REPOSITORY}:{self.tag}"

    def fingerprint(self) -> str:
        """A hash of what defines the image's content (not when it was made)."""
        recipe = asdict(self) | {"packages": self.all_packages, "extra_packages": ()}
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()

    def debootstrap_command(self, target: Path) -> list[str]:
        return [
            "debootstrap",
            f"--variant={self.variant}",
            f"--arch={self.arch}",
            f"--include={','.join(self.all_packages)}",
            self.suite,
            str(target),
            self.effective_mirror,
        ]


def _is_snapshot(value: str) -> bool:
    try:
        datetime.strptime(value, "%Y%m%dT%H%M%SZ")
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class BaseOutcome:
    ref: str
    image_id: str
    reused: bool
    log_path: Path | None


def image_changes(recipe: BaseRecipe, created: str, debootstrap_version: str) -> list[str]:
    """`docker import --change` lines: environment and the labels that say what the image is made of."""
    labels = {
        f"{LABEL}.recipe": recipe.fingerprint(),
        f"{LABEL}.suite": recipe.suite,
        f"{LABEL}.mirror": redact(recipe.effective_mirror),
        f"{LABEL}.snapshot": recipe.snapshot or "none",
        f"{LABEL}.packages": " ".join(recipe.all_packages),
        f"{LABEL}.python": recipe.python,
        f"{LABEL}.debootstrap": debootstrap_version,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.title": recipe.ref,
        "org.opencontainers.image.description": f"Debian {recipe.suite} ({recipe.variant}) with Python "
        f"{recipe.python}, made by orch base with debootstrap",
    }
    label_args = " ".join(f"{key}={json.dumps(value)}" for key, value in sorted(labels.items()))
    return [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8",
        'CMD ["/bin/bash"]',
        f"LABEL {label_args}",
    ]


def _clean_rootfs(root: Path) -> None:
    """Drop what only served the install: apt lists and caches, logs (they hold dates, not content)."""
    for relative in ("var/lib/apt/lists", "var/cache/apt/archives", "var/log"):
        folder = root / relative
        if folder.is_dir():
            for child in folder.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                elif child.name != "lock":
                    child.unlink(missing_ok=True)


def ensure_base_image(
    engine: Engine,
    recipe: BaseRecipe,
    *,
    force: bool = False,
    workdir: Path | None = None,
    log_dir: Path | None = None,
    on_line: Callable[[str], None] | None = None,
) -> BaseOutcome:
    existing = engine.image(recipe.ref)
    if existing is not None and not force:
        if existing.labels.get(f"{LABEL}.recipe") == recipe.fingerprint():
            return BaseOutcome(ref=recipe.ref, image_id=existing.id, reused=True, log_path=None)
        raise BadInput(
            f"{recipe.ref} already exists but was made from another recipe (suite/mirror/snapshot/packages differ)",
            hint="Pass --force to rebuild it, or choose another suite.",
        )
    if platform.system() != "Linux" or os.geteuid() != 0:
        raise EnvironmentFailure(
            "orch base must run as root on Linux: debootstrap creates device files and chroots",
            hint="Run it with sudo, or as root in CI.",
        )
    if shutil.which("debootstrap") is None:
        raise ToolMissing("debootstrap is not installed", hint="apt-get install debootstrap")
    version = subprocess.run(["debootstrap", "--version"], capture_output=True, text=True, check=False).stdout.strip()

    log_dir = log_dir or Path(tempfile.gettempdir())
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"orch-base-{recipe.suite}.log"
    with tempfile.TemporaryDirectory(prefix="orch-base-", dir=workdir) as scratch:
        root = Path(scratch) / "rootfs"
        command = recipe.debootstrap_command(root)
        with log_path.open("w", encoding="utf-8") as log:
            log.write("$ " + " ".join(command) + "\n")
            log.flush()
            last_error = ""
            with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
                assert process.stdout is not None
                for line in process.stdout:
                    log.write(redact(line))
                    if line.startswith("E:"):
                        last_error = last_error or line.strip()
                    if on_line is not None:
                        on_line(redact(line.rstrip()))
                code = process.wait()
        if code != 0:
            raise EnvironmentFailure(
                f"debootstrap of {recipe.suite} from {redact(recipe.effective_mirror)} failed "
                f"(exit {code}): {last_error or 'see the log'}",
                hint=f"Full log: {log_path}. Check that the mirror is reachable from this host.",
            )
        _clean_rootfs(root)
        tar_path = Path(scratch) / "rootfs.tar"
        tar = subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(tar_path), "."],
            capture_output=True,
            text=True,
            check=False,
        )
        if tar.returncode != 0:
            raise EnvironmentFailure(f"packing the root file system failed: {tar.stderr.strip()}")
        created = rfc3339_now()
        image_id = engine.load(RootfsImport(tar_path, REPOSITORY, recipe.tag, image_changes(recipe, created, version)))[
            0
        ]
    return BaseOutcome(ref=recipe.ref, image_id=image_id, reused=False, log_path=log_path)
