"""Which host GPUs a container gets: `--gpus all|N|device=0,2|GPU-UUID|MIG-UUID`, or a scheduler's allocation.

On a shared server or inside a Slurm allocation orch must map only the GPUs it was given. With no `--gpus`,
the allocation in the environment decides (SLURM_JOB_GPUS first, then NVIDIA: CUDA_VISIBLE_DEVICES; AMD:
ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES); without one, all GPUs.
SLURM_JOB_GPUS comes first because the Docker daemon maps *host* indices: Slurm documents it as "the global
GPU IDs, not relative to any device cgroup" (sbatch(1)), while under `ConstrainDevices=yes` it renumbers
CUDA_VISIBLE_DEVICES from 0 inside the job, which would map the wrong host GPU.
An explicit `--gpus` must stay inside the allocation. Indices are host indices, as `docker run --gpus
device=N` and the NVIDIA runtime read them. AMD GPUs are mapped as their render nodes plus /dev/kfd;
the i-th KFD GPU node is taken to be the i-th render node (the order amdgpu registers them; a host whose
order differs should select by render node, which a later version may accept). Pure: facts in, a plan out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

# Re-exported until orchestrator/cli and stages/probe.py import it from orchestrator.errors (issue 22 merge).
from orchestrator.errors import GpuSelectionError
from orchestrator.model.host import HostFacts

Vendor = Literal["nvidia", "amd"]

NVIDIA_ENV: tuple[str, ...] = ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")
AMD_ENV: tuple[str, ...] = ("SLURM_JOB_GPUS", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")

_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/-]+$")


@dataclass(frozen=True)
class GpuSelection:
    vendor: Vendor
    #: True when every GPU of the host is mapped (docker `--gpus all`).
    all: bool
    #: Host indices mapped (empty for all, and for MIG devices that have no index of their own).
    indices: tuple[int, ...] = ()
    #: What the NVIDIA runtime gets as device ids ("1", "GPU-…", "MIG-…"); empty for all.
    device_ids: tuple[str, ...] = ()
    #: AMD: the device nodes to map (/dev/kfd first, then the selected render nodes).
    devices: tuple[str, ...] = ()
    #: Why these GPUs, for the report ("--gpus device=1", "CUDA_VISIBLE_DEVICES=2,3 (scheduler allocation)").
    reason: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


def select_gpus(spec: str | None, host: HostFacts, env: Mapping[str, str], vendor: Vendor = "nvidia") -> GpuSelection:
    count = _gpu_count(host, vendor)
    allocation, source = _allocation(env, vendor)
    if spec is None or spec.strip() == "":
        if allocation is None:
            return _finish(vendor, host, None, "all GPUs (no --gpus, no scheduler allocation in the environment)")
        return _finish(vendor, host, allocation, f"{source}={env[source]} (scheduler allocation)")
    spec = spec.strip()
    allowed = allocation if allocation is not None else [str(i) for i in range(count)]
    if spec == "all":
        if allocation is not None:
            return _finish(vendor, host, allocation, f"--gpus all within {source}={env[source]}")
        return _finish(vendor, host, None, "--gpus all")
    if spec.isdigit():
        wanted = int(spec)
        if wanted < 1 or wanted > len(allowed):
            raise GpuSelectionError(
                f"--gpus {spec}: this host offers {len(allowed)} GPU(s)"
                + (f" in {source}={env[source]}" if allocation is not None else "")
                + "; ask for fewer, or name them with --gpus device=0,2"
            )
        return _finish(vendor, host, allowed[:wanted], f"--gpus {spec} (the first {wanted} of {len(allowed)})")
    ids = _device_list(spec)
    for gpu in ids:
        if gpu.isdigit() and int(gpu) >= count:
            raise GpuSelectionError(f"--gpus {spec}: this host has GPUs 0..{count - 1}; GPU {gpu} does not exist")
        if allocation is not None and gpu not in allocation:
            raise GpuSelectionError(
                f"--gpus {spec}: GPU {gpu} is outside this job's allocation {source}={env[source]}; "
                "choose among the allocated GPUs"
            )
    return _finish(vendor, host, ids, f"--gpus {spec}")


def _device_list(spec: str) -> list[str]:
    body = spec.removeprefix("device=").strip().strip('"')
    ids = [part.strip() for part in body.split(",") if part.strip()]
    if not ids:
        raise GpuSelectionError(f"--gpus {spec}: no device named; use all, a count, device=0,2, or a GPU-/MIG- UUID")
    for gpu in ids:
        if not (gpu.isdigit() or _UUID.match(gpu)):
            raise GpuSelectionError(f"--gpus {spec}: {gpu!r} is neither a GPU index nor a GPU-/MIG- UUID")
    return ids


def _allocation(env: Mapping[str, str], vendor: Vendor) -> tuple[list[str] | None, str]:
    for name in NVIDIA_ENV if vendor == "nvidia" else AMD_ENV:
        value = env.get(name)
        if value is None:
            continue
        value = value.strip()
        if value in ("", "-1", "NoDevFiles", "none"):
            return [], name  # an allocation with no GPU: nothing may be mapped
        return [part.strip() for part in value.split(",") if part.strip()], name
    return None, ""


def _gpu_count(host: HostFacts, vendor: Vendor) -> int:
    if vendor == "nvidia":
        return len(host.nvidia.gpus) if host.nvidia is not None else 0
    return len(host.amd.gpus) if host.amd is not None else 0


def _finish(vendor: Vendor, host: HostFacts, ids: list[str] | None, reason: str) -> GpuSelection:
    if ids is None:
        devices = ("/dev/kfd", *host.dri_render_nodes) if vendor == "amd" else ()
        return GpuSelection(vendor=vendor, all=True, devices=devices, reason=reason)
    indices = tuple(_index(host, vendor, gpu) for gpu in ids)
    known = tuple(index for index in indices if index is not None)
    notes: list[str] = []
    if vendor == "nvidia":
        device_ids = tuple(str(index) if index is not None else gpu for gpu, index in zip(ids, indices, strict=True))
        return GpuSelection(vendor, False, known, device_ids, (), reason, tuple(notes))
    nodes = host.dri_render_nodes
    chosen = tuple(nodes[i] for i in known if i < len(nodes))
    if len(chosen) < len(known):
        notes.append("fewer render nodes than selected AMD GPUs: some selected GPUs have no /dev/dri node to map")
    return GpuSelection(vendor, False, known, tuple(ids), ("/dev/kfd", *chosen), reason, tuple(notes))


def _index(host: HostFacts, vendor: Vendor, gpu: str) -> int | None:
    if gpu.isdigit():
        return int(gpu)
    if vendor == "nvidia" and host.nvidia is not None:
        for nvidia_gpu in host.nvidia.gpus:
            if nvidia_gpu.uuid is not None and nvidia_gpu.uuid.lower() == gpu.lower():
                return nvidia_gpu.index
    if vendor == "amd" and host.amd is not None:
        for position, candidate in enumerate(host.amd.gpus):
            if candidate.unique_id is not None and gpu.lower() in (
                candidate.unique_id.lower(),
                f"gpu-{candidate.unique_id}".lower(),
            ):
                return position
    return None  # a MIG device, or a UUID this host did not report: passed through as given
