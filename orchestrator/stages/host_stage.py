"""The host stage: the GPU driver and the daemon's GPU support, and — before any GPU container starts —
whether the host driver can run the image's CUDA/ROCm, explained in words."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.checks.host import cuda_verdict, gpu_datacenter, parse_require_cuda, rocm_verdict
from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import ImageInfo
from orchestrator.model.checks import Check
from orchestrator.model.host import CompatVerdict, HostFacts
from orchestrator.model.inventory import Inventory
from orchestrator.model.report import StageResult
from orchestrator.plan.run import GpuMapping, plan_gpu_mapping
from orchestrator.stages.results import check, stage_result


def image_backend(image: ImageInfo, inventory: Inventory | None) -> tuple[str | None, str | None, str | None]:
    """(CUDA the image needs, NVIDIA_REQUIRE_CUDA, ROCm the image carries), from its env and inventory."""
    cuda = image.env.get("CUDA_VERSION") or (inventory.backend.torch_cuda if inventory else None)
    rocm = (inventory.backend.rocm if inventory else None) or (
        inventory.backend.torch_hip.split("-")[0] if inventory and inventory.backend.torch_hip else None
    )
    return cuda, image.env.get("NVIDIA_REQUIRE_CUDA"), rocm


def cpu_variant_of(loaded: LoadedDossier) -> str | None:
    """The first variant the dossier declares for the CPU platform: the only CPU fallback orch may suggest."""
    for variant in loaded.reference_model.variants:
        if variant.system is not None and variant.system.platform == "cpu":
            return variant.name
    return None


def host_stage(
    loaded: LoadedDossier, host: HostFacts, image: ImageInfo, inventory: Inventory | None
) -> tuple[StageResult, CompatVerdict, GpuMapping]:
    started = time.monotonic()
    platform = loaded.model.system.platform
    cuda, require, rocm = image_backend(image, inventory)
    mapping = plan_gpu_mapping(platform, host)
    facts: dict[str, Any] = {
        "kernel": host.kernel,
        "nvidia": host.nvidia.model_dump() if host.nvidia else None,
        "amd": host.amd.model_dump() if host.amd else None,
        "docker": host.docker.model_dump() if host.docker else None,
        "kfd_present": host.kfd_present,
        "cpu": host.cpu.model_dump() if host.cpu else None,
        "gpu_mapping": mapping.description,
        "notes": host.notes,
    }
    checks: list[Check] = []
    if platform == "cpu":
        verdict = CompatVerdict(status="not-applicable", explanation="CPU platform: no GPU driver is needed.")
        checks.append(check("no accelerator needed", "CPU platform", "CPU platform", True))
    elif platform == "cuda":
        gpus = host.nvidia.gpus if host.nvidia else []
        datacenter = any(gpu_datacenter(gpu.name) for gpu in gpus)
        verdict = cuda_verdict(
            cuda,
            parse_require_cuda(require) if require else None,
            host.nvidia,
            datacenter_gpu=datacenter,
            image_has_compat_libs=bool(inventory and inventory.backend.cuda_compat_libs),
            cpu_variant=cpu_variant_of(loaded),
        )
        looked = "NVML, nvidia-smi, /sys/module/nvidia/version, /proc/driver/nvidia/version"
        checks.append(
            check(
                "NVIDIA driver present",
                "an NVIDIA kernel driver",
                f"{host.nvidia.driver_version} ({host.nvidia.source}), {len(gpus)} GPU(s)"
                if host.nvidia
                else "no NVIDIA driver found",
                host.nvidia is not None,
                None if host.nvidia else f"looked at {looked}",
            )
        )
        checks.append(
            check(
                "driver supports the image's CUDA",
                f"CUDA {cuda}" if cuda else "the image's CUDA",
                verdict.status,
                verdict.status in ("supported", "minor-version-compat"),
                verdict.explanation,
            )
        )
        checks.append(
            check(
                "daemon can map NVIDIA GPUs",
                "nvidia runtime or NVIDIA CDI devices",
                mapping.description,
                mapping.nvidia_gpus or bool(mapping.cdi_devices),
            )
        )
    else:
        verdict = rocm_verdict(rocm, host.amd, host.kfd_present, cpu_variant=cpu_variant_of(loaded))
        checks.append(
            check(
                "AMD GPU driver present",
                "amdgpu with KFD (/dev/kfd) and a GPU node",
                f"{len(host.amd.gpus)} GPU(s): {', '.join(g.gfx_target for g in host.amd.gpus)}"
                if host.amd
                else "no AMD GPU driver found",
                host.amd is not None and host.kfd_present,
            )
        )
        checks.append(
            check(
                "driver supports the image's ROCm",
                f"ROCm {rocm}" if rocm else "the image's ROCm",
                verdict.status,
                verdict.status in ("supported", "minor-version-compat"),
                verdict.explanation,
            )
        )
    facts["compatibility"] = verdict.model_dump()
    return stage_result("host", started, checks, facts), verdict, mapping
