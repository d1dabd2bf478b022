"""The engine interface: every side effect on a container engine goes through it.

Only `orchestrator.engine.docker_engine` imports the Docker SDK. Pure stages never see an engine;
commands receive one from `connect()`, which is also the place where "no engine answers" becomes a
clear `EngineUnavailable` (exit 3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol, Self

from orchestrator.plan.specs import BuildNetwork, FeedSpec, Mount, Network, RunSpec
from orchestrator.untrusted import exited

__all__ = [
    "MANAGED_LABEL",
    "BuildNetwork",
    "BuildOutcome",
    "Engine",
    "EngineInfo",
    "FeedSpec",
    "ImageInfo",
    "LayerEntry",
    "Mount",
    "Network",
    "RegistryAuth",
    "RunOutcome",
    "RunSpec",
    "connect",
    "describe_exit",
    "memory_words",
]

#: Every container and temporary image orch creates carries this label, so cleanup can find them.
MANAGED_LABEL = "io.orch.managed"


@dataclass(frozen=True)
class EngineInfo:
    endpoint: str
    server_version: str
    api_version: str
    os: str
    runtimes: tuple[str, ...]
    cdi_spec_dirs: tuple[str, ...]


@dataclass(frozen=True)
class ImageInfo:
    id: str
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    env: Mapping[str, str]
    repo_digests: tuple[str, ...]
    size: int


@dataclass(frozen=True)
class RegistryAuth:
    """Credentials for one registry, read from environment variables at the moment of use, never stored.

    `repr` hides the password, so a traceback or a debug print of a value holding it shows nothing secret.
    """

    username: str
    password: str = field(repr=False)

    def __repr__(self) -> str:
        return f"RegistryAuth(username={self.username!r}, password='****')"


@dataclass(frozen=True)
class LayerEntry:
    """One entry of an image's history (`docker history`): the instruction the engine recorded, its size.

    `created_by` is the engine's raw text: the classic builder prefixes a RUN with its build args and their
    values (`|1 KEY=value /bin/sh -c …`), so it is never written anywhere unredacted (stages/image_layers.py).
    """

    created_by: str
    size: int


@dataclass(frozen=True)
class BuildOutcome:
    """What the engine said of a build: the image, its whole log, and its own error. Why it failed (step,
    pip's or apt's words) is read from the log by engine/build_log.py, not by the engine adapter."""

    image_id: str | None  # None when the build failed
    log: str
    #: The engine's own error message (redacted), as the log's last line `ERROR: …` also shows it.
    error: str | None = None


@dataclass(frozen=True)
class RunOutcome:
    exit_code: int | None  # None when stopped at the timeout
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    #: The kernel killed the container at its memory limit (the engine's OOMKilled state).
    oom_killed: bool = False
    #: Bytes of stdout/stderr cut to keep them within RunSpec.max_log_bytes.
    stdout_cut: int = 0
    stderr_cut: int = 0


def memory_words(limit: str) -> str:
    """Docker's "4g" / "512m" as a reader says it."""
    units = {"k": "KiB", "m": "MiB", "g": "GiB"}
    number, unit = limit[:-1], limit[-1:].lower()
    return f"{number} {units[unit]}" if unit in units and number.isdigit() else limit


def describe_exit(outcome: RunOutcome, spec: RunSpec, raise_hint: str) -> str:
    """Why a container stopped, in one line: killed at its memory limit (and how to raise it), or its last words."""
    if outcome.oom_killed:
        return (
            f"the container was killed at its memory limit of {memory_words(spec.mem_limit)} "
            f"(exit {outcome.exit_code}, out of memory); {raise_hint}"
        )
    return exited(outcome.exit_code, outcome.stderr)


class Engine(Protocol):
    #: Labels put on every container and built layer (`ORCH_LABELS`, see engine/labels.py).
    @property
    def labels(self) -> Mapping[str, str]: ...

    #: The repository prefix of orch's default tags (`ORCH_TAG_NAMESPACE`, default `orch`).
    @property
    def tag_namespace(self) -> str: ...

    def info(self) -> EngineInfo: ...

    def image(self, ref: str) -> ImageInfo | None: ...

    def import_rootfs(self, tar_path: Path, repository: str, tag: str, changes: Sequence[str]) -> str: ...

    def pull(self, ref: str) -> ImageInfo: ...

    def build(
        self,
        context_tar: IO[bytes],
        tag: str,
        *,
        network: BuildNetwork,
        labels: Mapping[str, str] | None = None,
        no_cache: bool = False,
        on_line: Callable[[str], None] | None = None,
        feed: str | None = None,
    ) -> BuildOutcome: ...

    #: Start the wheel feed (`spec`) with `files` (a tar, its entries under `feed/`) in it, yield its container
    #: id for `build(network="wheel-feed", feed=...)`, and remove it on the way out, whatever happened.
    def wheel_feed(self, spec: FeedSpec, files: IO[bytes]) -> AbstractContextManager[str]: ...

    def run(self, spec: RunSpec) -> RunOutcome: ...

    #: `run`, then, when the container exited 0, the engine's tar of its folder `path` written to `dest`
    #: (at most `max_bytes` + 1 bytes: the reader refuses a larger one). No host mount: the container's
    #: files reach the host only as that tar, which the caller reads as untrusted.
    def run_and_copy(self, spec: RunSpec, path: str, dest: IO[bytes], max_bytes: int) -> RunOutcome: ...

    def remove_image(self, ref: str) -> None: ...

    #: Push `repository:tag` (the image must carry that tag here); returns the registry's manifest
    #: digest (`sha256:…`). Raises RegistryError when the registry refuses or does not answer.
    def push(self, repository: str, tag: str, auth: RegistryAuth | None = None) -> str: ...

    #: Pull `name@sha256:…` (never a tag: a tag can move); creates no tag. Raises RegistryError.
    def pull_by_digest(self, reference: str, auth: RegistryAuth | None = None) -> ImageInfo: ...

    #: Remove the tag `ref` only, never an image: does nothing unless the image keeps another name.
    def untag(self, ref: str) -> None: ...

    def history(self, ref: str) -> list[str]: ...

    #: The image's history entries, oldest first (the base's first, then each later instruction).
    def image_layers(self, ref: str) -> list[LayerEntry]: ...

    def save(self, ref: str, dest: IO[bytes]) -> None: ...

    def load(self, source: IO[bytes] | Iterable[bytes]) -> list[str]: ...

    def tag(self, image_id: str, repository: str, tag: str) -> None: ...

    def containers(self, label: str) -> list[str]: ...

    #: Force-remove every container with this label (`key=value`), running or not; their ids.
    def remove_containers(self, label: str) -> list[str]: ...

    def close(self) -> None: ...

    #: An engine is a context manager: `with connect() as engine:` releases its client on the way out,
    #: also on an error or Ctrl-C.
    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...


def connect(
    base_url: str | None = None, tls_files: tuple[str, str, str] | None = None, context: str | None = None
) -> Engine:
    """The Docker engine named by `base_url`, `DOCKER_HOST` or the Docker context; raises EngineUnavailable.

    `tls_files`: (CA, client certificate, client key) for a `tcp://` `base_url` with TLS; `context`: a
    Docker context by name instead of `base_url`.
    Use it as a context manager (`with connect() as engine:`), or call `close()`.
    """
    from orchestrator.engine.docker_engine import DockerEngine

    return DockerEngine.connect(base_url, tls_files, context)
