"""The engine interface: every side effect on a container engine goes through it.

Only the Docker adapter (`orchestrator.engine.docker_*`) imports the Docker SDK. Pure stages never see an
engine; commands receive one from `connect()`, which is also the place where "no engine answers" becomes a
clear `EngineUnavailable` (exit 3). The engine owns Docker calls only: each member executes a typed request
(requests.py; containers in plan/specs.py, their hardening and limits included), and every rule of *when*
(pull only by digest, untag only a name the image keeps another of) is its caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import IO, Protocol

from orchestrator.engine.requests import (
    BuildRequest,
    CopyOut,
    EngineSettings,
    PullRequest,
    RegistryAuth,
    RemoveContainers,
    RemoveImage,
    RootfsImport,
)
from orchestrator.errors import ImageNotBuilt
from orchestrator.plan.specs import (
    HARDENED,
    Builder,
    BuildNetwork,
    EngineKind,
    Hardening,
    Mount,
    Network,
    RunSpec,
    ServiceSpec,
)
from orchestrator.untrusted import exited

__all__ = [
    "HARDENED",
    "IMAGE_REMOVED_HINT",
    "MANAGED_LABEL",
    "BuildNetwork",
    "BuildOutcome",
    "BuildRequest",
    "Builder",
    "Connection",
    "CopyOut",
    "Engine",
    "EngineInfo",
    "EngineKind",
    "EngineSettings",
    "Hardening",
    "ImageInfo",
    "LayerEntry",
    "Mount",
    "Network",
    "PullRequest",
    "RegistryAuth",
    "RemoveContainers",
    "RemoveImage",
    "RootfsImport",
    "RunOutcome",
    "RunSpec",
    "Served",
    "ServiceSpec",
    "connect",
    "describe_exit",
    "image_layers",
    "memory_words",
]

#: Every container and temporary image orch creates carries this label, so cleanup can find them.
MANAGED_LABEL = "io.orch.managed"
#: Said when an image orch built or was given is gone from the engine while in use.
IMAGE_REMOVED_HINT = (
    "The image was removed by another user or process (docker rmi or a prune on the shared engine) while orch "
    "was using it; run the command again."
)


@dataclass(frozen=True)
class EngineInfo:
    endpoint: str
    server_version: str
    api_version: str
    os: str
    runtimes: tuple[str, ...]
    cdi_spec_dirs: tuple[str, ...]
    #: The builders this engine offers, preferred first (plan/build.py `choose_builder` reads it).
    builders: tuple[Builder, ...] = ("classic",)
    kind: EngineKind = "docker"
    #: Podman run rootless (its `info` says so): no memory or pids limit on a cgroup v1 host, ports and
    #: bind mounts owned by the user's sub-ids. Always False on Docker.
    rootless: bool = False
    #: The host's cgroup version as the engine reports it ("1", "2"; "" when it does not say).
    cgroup_version: str = ""


@dataclass(frozen=True)
class Served:
    """A running service (`engine.serve`): its container id, and its base URL on the engine's bridge
    (`http://<address>:<port>/`) when its spec asked for network `bridge`."""

    id: str
    url: str | None = None


@dataclass(frozen=True)
class LayerEntry:
    """One entry of an image's history (`docker history`): the instruction the engine recorded, its size.

    `created_by` is the engine's raw text: the classic builder prefixes a RUN with its build args and their
    values (`|1 KEY=value /bin/sh -c …`), so it is never written anywhere unredacted (stages/image_layers.py).
    """

    created_by: str
    size: int


@dataclass(frozen=True)
class ImageInfo:
    id: str
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    env: Mapping[str, str]
    repo_digests: tuple[str, ...]
    size: int
    #: The image's history, oldest first: filled only when asked (`engine.image(ref, layers=True)`).
    layers: tuple[LayerEntry, ...] = ()


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
    """Twelve primitives, each executing a typed request as it says (the rules of when live with the callers)."""

    #: The connection's labels and tag namespace (`ORCH_LABELS`, `ORCH_TAG_NAMESPACE`), read before connecting.
    @property
    def settings(self) -> EngineSettings: ...

    def info(self) -> EngineInfo: ...

    #: The image `ref` names, None when the engine has none; with `layers`, its history too (oldest first).
    def image(self, ref: str, *, layers: bool = False) -> ImageInfo | None: ...

    def build(self, request: BuildRequest) -> BuildOutcome: ...

    #: Start the service (the wheel feed, BuildKit's context server) with `files` (a tar) put in at `/`, yield it
    #: once ready (its id for `BuildRequest(network="wheel-feed", feed=...)`, its URL for `remote=`), remove it
    #: on the way out, whatever happened.
    def serve(self, spec: ServiceSpec, files: IO[bytes]) -> AbstractContextManager[Served]: ...

    #: create → start → wait → logs → remove; with `copy`, the container's folder copied out after a clean exit.
    def run(self, spec: RunSpec, copy: CopyOut | None = None) -> RunOutcome: ...

    def pull(self, request: PullRequest) -> ImageInfo: ...

    #: Push `repository:tag` (the image must carry that tag here); returns the registry's manifest
    #: digest (`sha256:…`). Raises RegistryError when the registry refuses or does not answer.
    def push(self, repository: str, tag: str, auth: RegistryAuth | None = None) -> str: ...

    #: Bring images in: a `docker save` tar (a file, or chunks as they come), or a root filesystem to import.
    #: Returns what the engine loaded (tags or ids; the imported image's id).
    def load(self, source: IO[bytes] | Iterable[bytes] | RootfsImport) -> list[str]: ...

    #: `docker save REF` streamed into `dest` (saved by tag, so `docker load` restores the tag too).
    def save(self, ref: str, dest: IO[bytes]) -> None: ...

    #: Tag an image by id. Never forced: the caller has checked the tag is new or already this image's.
    def tag(self, image_id: str, repository: str, tag: str) -> None: ...

    #: Remove an image, one name of it, or every container with a label; the ids of removed containers.
    def remove(self, target: RemoveImage | RemoveContainers) -> list[str]: ...


class Connection:
    """What `connect()` returns: `with connect() as engine:` releases the client on the way out (also on an
    error or Ctrl-C); a holder that outlives one block keeps the connection and calls `close()`."""

    def __init__(self, engine: Engine, close: Callable[[], None]) -> None:
        self.engine = engine
        self._close = close

    def close(self) -> None:
        self._close()

    def __enter__(self) -> Engine:
        return self.engine

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def image_layers(engine: Engine, ref: str) -> list[LayerEntry]:
    """The history of an image orch built or was given (oldest first); ImageNotBuilt when it is gone."""
    image = engine.image(ref, layers=True)
    if image is None:
        raise ImageNotBuilt(f"image {ref} is not in the engine", hint=IMAGE_REMOVED_HINT)
    return list(image.layers)


def connect(
    base_url: str | None = None, tls_files: tuple[str, str, str] | None = None, context: str | None = None
) -> Connection:
    """The Docker engine named by `base_url`, `DOCKER_HOST` or the Docker context; raises EngineUnavailable.

    `tls_files`: (CA, client certificate, client key) for a `tcp://` `base_url` with TLS; `context`: a
    Docker context by name instead of `base_url`.
    Use it as a context manager (`with connect() as engine:`), or keep it and call `close()`.
    """
    from orchestrator.engine.docker_engine import DockerEngine

    engine = DockerEngine.connect(base_url, tls_files, context)
    return Connection(engine, engine.close)
