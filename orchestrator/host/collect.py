"""All host facts in one call: drivers (NVIDIA, AMD), the daemon's GPU support, and what AMD containers need
mapped in (/dev/kfd, render nodes, the numeric `video`/`render` gids).

One assembly, two sources: a live machine and a host capture (`orch doctor --from`, host/capture.py) both
describe themselves as a `RawHost` (a file tree, the tools that answer, the daemon's GPU settings) and
`host_facts` turns either into `HostFacts`, so a diagnosis read from a capture is the live path's diagnosis.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.engine import EngineInfo, EngineKind
from orchestrator.host.amd import collect_amd
from orchestrator.host.docker_gpu import collect_docker_gpu
from orchestrator.host.nvidia import collect_nvidia, read_l4t_release
from orchestrator.host.tools import Runner, subprocess_runner
from orchestrator.model.host import CpuFacts, DockerGpuFacts, HostFacts, NvidiaDriverFacts


@dataclass(frozen=True)
class DaemonGpuSettings:
    """What the Docker daemon says about GPUs: its runtimes and the folders it reads CDI specs from."""

    runtimes: Sequence[str]
    cdi_spec_dirs: Sequence[str]
    engine_kind: EngineKind = "docker"
    rootless: bool = False
    cgroup_version: str = ""


@dataclass(frozen=True)
class RawHost:
    """A host before it is read: its files under `root`, its tools through `run`, the daemon's GPU settings.

    A live machine is `/`, `subprocess.run` and the engine's info (`live_host`); a capture is its copied tree,
    its recorded command outputs and its recorded `docker info` (`Capture.raw_host`).
    """

    root: Path
    run: Runner
    kernel: str
    #: None when the daemon's GPU support is not known; `docker_unknown` then says why.
    daemon: DaemonGpuSettings | None
    docker_unknown: str
    #: Ask NVML (the live driver) first; a capture has only the tools' recorded answers.
    use_nvml: bool = True
    #: Read AMD GPUs from rocminfo when KFD's topology lists none (a capture assembled by hand).
    rocminfo_fallback: bool = False
    #: Said first (where the facts come from).
    origin_notes: tuple[str, ...] = ()
    #: A last source of NVIDIA GPUs when the standard queries found none (the capture's own query outputs).
    nvidia_fallback: Callable[[NvidiaDriverFacts | None, list[str]], NvidiaDriverFacts | None] | None = None


def host_facts(raw: RawHost) -> HostFacts:
    """The one assembly of `HostFacts`, from a live host or a capture alike."""
    root, run = raw.root, raw.run
    notes: list[str] = list(raw.origin_notes)
    nvidia, nvidia_notes = collect_nvidia(root, run, use_nvml=raw.use_nvml)
    amd, amd_notes = collect_amd(root, run, rocminfo_fallback=raw.rocminfo_fallback)
    notes += nvidia_notes + amd_notes
    docker: DockerGpuFacts | None = None
    if raw.daemon is None:
        notes.append(raw.docker_unknown)
    else:
        docker, docker_notes = collect_docker_gpu(
            raw.daemon.runtimes, raw.daemon.cdi_spec_dirs, root, raw.daemon.engine_kind
        )
        docker = docker.model_copy(update={"rootless": raw.daemon.rootless})
        if raw.daemon.rootless and raw.daemon.cgroup_version == "1":
            # Rootless containers cannot be given cgroup limits on cgroup v1 (Podman ignores them with a warning).
            notes.append("rootless engine on a cgroup v1 host: the containers' memory and pids limits are not enforced")
        notes += docker_notes
    gids, group_note = read_group_gids(root, ("video", "render"))
    if group_note:
        notes.append(group_note)
    cpu = read_cpu(root)
    if cpu is None:
        notes.append("/proc/cpuinfo: not readable, the CPU model and its ISA flags are unknown")
    if raw.nvidia_fallback is not None:
        nvidia = raw.nvidia_fallback(nvidia, notes)
    return HostFacts(
        kernel=raw.kernel,
        nvidia=nvidia,
        amd=amd,
        docker=docker,
        kfd_present=(root / "dev/kfd").exists(),
        dri_render_nodes=render_nodes(root),
        video_gid=gids.get("video"),
        render_gid=gids.get("render"),
        cpu=cpu,
        l4t_release=read_l4t_release(root),
        notes=notes,
    )


def live_host(engine_info: EngineInfo | None, root: Path = Path("/"), run: Runner = subprocess_runner) -> RawHost:
    """This machine as a `RawHost`; the CDI specs are read locally, so `engine_info` should describe the local
    daemon."""
    return RawHost(
        root=root,
        run=run,
        kernel=platform.release(),
        daemon=None
        if engine_info is None
        else DaemonGpuSettings(
            engine_info.runtimes,
            engine_info.cdi_spec_dirs,
            engine_info.kind,
            engine_info.rootless,
            engine_info.cgroup_version,
        ),
        docker_unknown="Docker: no engine information, the daemon's GPU support is not known",
    )


def collect_host_facts(
    engine_info: EngineInfo | None, root: Path = Path("/"), run: Runner = subprocess_runner
) -> HostFacts:
    """The machine as a GPU container will see it. Reads files under `root` and runs tools through `run`."""
    return host_facts(live_host(engine_info, root, run))


def render_nodes(root: Path) -> list[str]:
    """`/dev/dri/renderD*` as host paths (what `--device` takes), in minor-number order."""
    found = [p for p in (root / "dev/dri").glob("renderD*") if p.name.removeprefix("renderD").isdigit()]
    found.sort(key=lambda p: int(p.name.removeprefix("renderD")))
    return [f"/dev/dri/{p.name}" for p in found]


def parse_group_gids(text: str, names: tuple[str, ...]) -> dict[str, int]:
    """The numeric gids of `names` in an /etc/group text (`name:password:gid:members`)."""
    gids: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) < 3 or fields[0] not in names or fields[0] in gids:
            continue  # comments, NIS "+" lines, malformed lines; the first entry of a name wins, as in getgrnam
        try:
            gids[fields[0]] = int(fields[2])
        except ValueError:
            continue
    return gids


def read_group_gids(root: Path, names: tuple[str, ...]) -> tuple[dict[str, int], str | None]:
    # Numeric host gids, not names: the `render` gid inside an image (e.g. 109 in ROCm's Dockerfiles) often
    # differs from the host's, and --group-add by name would resolve inside the container (gpu-domain §3.4).
    try:
        text = (root / "etc/group").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}, "/etc/group: not readable, the video/render gids are unknown"
    return parse_group_gids(text, names), None


# The x86-64 flags that decide which vector kernels torch (ATen's CPU capability) and oneDNN dispatch to, in
# the order of the ISA levels; other flags (virtualisation, security mitigations) say nothing about floats.
ISA_FLAGS = (
    "sse4_1",
    "sse4_2",
    "avx",
    "fma",
    "f16c",
    "avx2",
    "avx_vnni",
    "avx512f",
    "avx512dq",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
    # aarch64 (Features line): NEON and SVE widths decide torch's kernels there.
    "asimd",
    "sve",
    "sve2",
)


def parse_cpuinfo(text: str) -> CpuFacts | None:
    """Model, vendor, count and ISA flags from /proc/cpuinfo; the first processor's answers stand for all."""
    fields: dict[str, str] = {}
    count = 0
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "processor":
            count += 1
        fields.setdefault(key, value.strip())
    if count == 0:
        return None
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return CpuFacts(
        model=fields.get("model name") or fields.get("Model") or None,
        vendor=fields.get("vendor_id") or fields.get("CPU implementer") or None,
        logical_cpus=count,
        isa_flags=[flag for flag in ISA_FLAGS if flag in flags],
    )


def read_cpu(root: Path) -> CpuFacts | None:
    try:
        text = (root / "proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return parse_cpuinfo(text)
