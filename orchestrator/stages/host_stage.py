"""The host stage: the GPU driver and the daemon's GPU support, and — before any GPU container starts —
whether the host driver can run the image's CUDA/ROCm, explained in words (checks/host_layer.py)."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.checks.host_layer import compat_verdict, cpu_variant_of, host_checks, image_needs
from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import ImageInfo
from orchestrator.model.host import CompatVerdict, HostFacts
from orchestrator.model.inventory import Inventory
from orchestrator.model.report import StageResult
from orchestrator.plan.gpu_select import GpuSelection
from orchestrator.plan.run import GpuMapping, plan_gpu_mapping
from orchestrator.stages.results import stage_result


def host_stage(
    loaded: LoadedDossier,
    host: HostFacts,
    image: ImageInfo,
    inventory: Inventory | None,
    selection: GpuSelection | None = None,
) -> tuple[StageResult, CompatVerdict, GpuMapping]:
    """`selection`: the GPUs this run maps (`--gpus` or the scheduler's allocation); None maps all of them."""
    started = time.monotonic()
    platform = loaded.model.system.platform
    needs = image_needs(image.env, inventory)
    mapping = plan_gpu_mapping(platform, host, selection)
    verdict = compat_verdict(platform, host, needs, cpu_variant=cpu_variant_of(loaded))
    facts: dict[str, Any] = {
        "kernel": host.kernel,
        "nvidia": host.nvidia.model_dump() if host.nvidia else None,
        "amd": host.amd.model_dump() if host.amd else None,
        "docker": host.docker.model_dump() if host.docker else None,
        "kfd_present": host.kfd_present,
        "cpu": host.cpu.model_dump() if host.cpu else None,
        "gpu_mapping": mapping.description,
        "gpu_selection": _selection_facts(selection),
        "l4t_release": host.l4t_release,
        "notes": host.notes,
        "compatibility": verdict.model_dump(),
    }
    checks = host_checks(platform, host, needs, verdict, mapping)
    return stage_result("host", started, checks, facts), verdict, mapping


def _selection_facts(selection: GpuSelection | None) -> dict[str, Any] | None:
    """Which GPUs were mapped and why, for the report."""
    if selection is None:
        return None
    return {
        "all": selection.all,
        "indices": list(selection.indices),
        "device_ids": list(selection.device_ids),
        "devices": list(selection.devices),
        "reason": selection.reason,
        "notes": list(selection.notes),
    }
