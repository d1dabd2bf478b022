"""What one engine call will do, as a value: the container (`RunSpec`, `Mount`, `ServiceSpec`, their
`Hardening` and limits) and the build's network.

These are the plan's vocabulary: `plan/` decides them without an engine, the engine executes them, and
`--dry-run` prints them. The engine re-exports them (`orchestrator.engine.RunSpec`) for its callers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.model.platform import LABEL_PREFIX as _LABEL_PREFIX
from orchestrator.resources import probe_source

#: The unprivileged user the sample runs as inside every image.
RUNTIME_UID = 10001
#: Every label orch sets itself starts with this (defined in model/, where `orch compare` reads it too).
LABEL_PREFIX = _LABEL_PREFIX

#: `none`: no network at all (wheelhouse builds, probes); `default`: the engine's bridge; `host`: the host's
#: network namespace (reaches indexes on the host's loopback).
Network = Literal["none", "default", "host"]
#: A build's network: one of the above, or `wheel-feed`: the build's steps share the network namespace of
#: orch's wheel feed container (engine.serve), which has loopback only, so the install reads the locked
#: wheels from the feed and nothing else is reachable.
BuildNetwork = Literal["none", "default", "host", "wheel-feed"]
#: What builds the image: BuildKit (the engine's `POST /build?version=2`, context fetched from orch's context
#: server, wheels bind-mounted into the one install step) or the classic builder (docker-py's build, the
#: context tar uploaded, wheels from the wheel feed). plan/build.py `choose_builder` picks one.
#: Which engine answers the Docker API: Docker's own daemon, or Podman's API service (`podman system service`),
#: told apart by the components its `/version` lists (engine/docker_engine.py `engine_kind`).
EngineKind = Literal["docker", "podman"]
Builder = Literal["buildkit", "classic"]
#: A service's network: `none` (loopback only; the classic build joins its namespace) or `bridge` (the engine's
#: default bridge: the engine itself fetches from it, as BuildKit fetches a remote context).
ServiceNetwork = Literal["none", "bridge"]


@dataclass(frozen=True)
class Hardening:
    """How every container orch starts is confined; the adapter applies it in one place (engine/docker_containers.py).

    The plan decides it with the rest of the container, so `--dry-run` prints what the engine is asked for.
    """

    cap_drop: tuple[str, ...] = ("ALL",)
    no_new_privileges: bool = True
    privileged: bool = False
    read_only_root: bool = False
    #: Memory + swap = the memory limit: no swap at all (Docker's default gives as much swap again).
    no_swap: bool = True

    def words(self) -> str:
        """`cap-drop ALL, no-new-privileges, not privileged`, as `--dry-run` and the hand-over say it."""
        parts = [f"cap-drop {' '.join(self.cap_drop)}" if self.cap_drop else "all capabilities kept"]
        parts.append("no-new-privileges" if self.no_new_privileges else "new privileges allowed")
        parts.append("privileged" if self.privileged else "not privileged")
        if self.read_only_root:
            parts.append("read-only root")
        return ", ".join(parts)


#: What every container of orch gets unless a spec says otherwise.
HARDENED = Hardening()


@dataclass(frozen=True)
class ServiceSpec:
    """A container that serves something while other engine calls run (engine.serve): the wheel feed.

    The feed runs the base image's own Python (`http.server`, standard library), as an unprivileged user, with no
    network but its loopback; the build's RUN steps share that namespace (`--network container:<feed>`), so
    they reach the feed and nothing else: the build stays offline. Its files go in through the archive API, not
    a bind mount (the engine may be on another machine), and that API refuses a read-only root: the root stays
    writable. It is ready once its output shows `ready_line`, within `start_timeout_s`.

    Its command is `served_command`: `http.server` for as long as orch holds the container's stdin (the engine
    adapter attaches to it and keeps it open), so a killed orch leaves no server running (probes/serve_files.py).
    """

    image: str
    command: tuple[str, ...]
    ready_line: str = "Serving HTTP on"
    user: str = "65534:65534"
    environment: Mapping[str, str] = field(default_factory=lambda: {"PYTHONUNBUFFERED": "1"})
    labels: Mapping[str, str] = field(default_factory=lambda: {f"{_LABEL_PREFIX}.role": "wheel-feed"})
    mem_limit: str = "1g"
    pids_limit: int = 64
    start_timeout_s: float = 30.0
    hardening: Hardening = HARDENED
    network: ServiceNetwork = "none"
    #: The port it listens on (`bridge`: the engine reaches it at the container's bridge address).
    port: int | None = None


def served_command(python: str, port: int, bind: str, directory: str) -> tuple[str, ...]:
    """A file server's command: probes/serve_files.py (http.server with a lifeline on stdin), `directory` last."""
    return (python, "-c", probe_source("serve_files.py"), str(port), "--bind", bind, "--directory", directory)


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class RunSpec:
    image: str
    command: Sequence[str]
    mounts: Sequence[Mount] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    network: bool = False
    timeout_s: float = 600
    user: str | None = None
    working_dir: str | None = None
    mem_limit: str = "4g"
    pids_limit: int = 1024
    labels: Mapping[str, str] = field(default_factory=dict)
    #: NVIDIA GPUs through a device request: "all" (--gpus all), or CDI device names (nvidia.com/gpu=all).
    nvidia_gpus: bool = False
    #: Selected NVIDIA GPUs (`--gpus device=1`, a scheduler's allocation): host indices or GPU-/MIG- UUIDs for
    #: the nvidia runtime's device request; empty with `nvidia_gpus` for all of them.
    nvidia_device_ids: Sequence[str] = ()
    cdi_devices: Sequence[str] = ()
    #: Device nodes to pass through (AMD: /dev/kfd, /dev/dri) and numeric host group ids to add.
    devices: Sequence[str] = ()
    group_add: Sequence[str] = ()
    shm_size: str | None = None
    #: Bytes of stdout (and of stderr) kept; the rest is cut from the middle, counted (untrusted.CappedStream).
    max_log_bytes: int = 16 << 20
    hardening: Hardening = HARDENED
