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
from orchestrator.plan.run import GpuMapping, plan_gpu_mapping
from orchestrator.stages.results import stage_result


def host_stage(
    loaded: LoadedDossier, host: HostFacts, image: ImageInfo, inventory: Inventory | None
) -> tuple[StageResult, CompatVerdict, GpuMapping]:
    started = time.monotonic()
    platform = loaded.model.system.platform
    needs = image_needs(image.env, inventory)
    mapping = plan_gpu_mapping(platform, host)
    verdict = compat_verdict(platform, host, needs, cpu_variant=cpu_variant_of(loaded))
    facts: dict[str, Any] = {
        "kernel": host.kernel,
        "nvidia": host.nvidia.model_dump() if host.nvidia else None,
        "amd": host.amd.model_dump() if host.amd else None,
        "docker": host.docker.model_dump() if host.docker else None,
        "kfd_present": host.kfd_present,
        "cpu": host.cpu.model_dump() if host.cpu else None,
        "gpu_mapping": mapping.description,
        "notes": host.notes,
        "compatibility": verdict.model_dump(),
    }
    checks = host_checks(platform, host, needs, verdict, mapping)
    return stage_result("host", started, checks, facts), verdict, mapping
