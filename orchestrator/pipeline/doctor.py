"""`orch doctor`: can this machine run this dossier's image on its GPU? Host facts only, no sample."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from orchestrator.checks.host import cuda_verdict, gpu_datacenter, parse_require_cuda, rocm_verdict
from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine, EngineInfo
from orchestrator.host.collect import collect_host_facts
from orchestrator.model.host import CompatVerdict, HostFacts
from orchestrator.plan.build import default_tag
from orchestrator.plan.run import plan_gpu_mapping
from orchestrator.stages.host_stage import cpu_variant_of


class Diagnosis(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: HostFacts
    dossier: str | None = None
    platform: str | None = None
    image: str | None = None
    compatibility: CompatVerdict | None = None
    gpu_mapping: str | None = None
    can_run: bool | None = None
    reason: str | None = None


def _dossier_cuda(loaded: LoadedDossier) -> str | None:
    """The CUDA the dossier's image will need when it is not built yet: the system version it declares."""
    return loaded.model.system.version if loaded.model.system.platform == "cuda" else None


def diagnose(
    engine: Engine,
    loaded: LoadedDossier | None,
    *,
    host_facts: Callable[[EngineInfo], HostFacts] | None = None,
) -> Diagnosis:
    """`host_facts` reads this machine (default: `collect_host_facts`, looked up at call time)."""
    host = (host_facts or collect_host_facts)(engine.info())
    if loaded is None:
        return Diagnosis(host=host)
    platform = loaded.model.system.platform
    tag = default_tag(loaded)
    image = engine.image(tag)
    mapping = plan_gpu_mapping(platform, host)
    if platform == "cpu":
        return Diagnosis(
            host=host,
            dossier=loaded.model.name,
            platform=platform,
            image=tag if image else None,
            gpu_mapping=mapping.description,
            can_run=True,
            reason="CPU platform: no GPU needed",
        )
    if platform == "cuda":
        cuda = (image.env.get("CUDA_VERSION") if image else None) or _dossier_cuda(loaded)
        require = image.env.get("NVIDIA_REQUIRE_CUDA") if image else None
        datacenter = any(gpu_datacenter(gpu.name) for gpu in (host.nvidia.gpus if host.nvidia else []))
        verdict = cuda_verdict(
            cuda,
            parse_require_cuda(require) if require else None,
            host.nvidia,
            datacenter_gpu=datacenter,
            cpu_variant=cpu_variant_of(loaded),
        )
        mapped = mapping.nvidia_gpus or bool(mapping.cdi_devices)
    else:
        verdict = rocm_verdict(
            loaded.model.system.version, host.amd, host.kfd_present, cpu_variant=cpu_variant_of(loaded)
        )
        mapped = bool(mapping.devices)
    ok = verdict.status in ("supported", "minor-version-compat") and mapped
    reason = (
        verdict.explanation
        if verdict.status not in ("supported", "minor-version-compat")
        else (None if mapped else f"the driver fits, but the daemon cannot map the GPU: {mapping.description}")
    )
    return Diagnosis(
        host=host,
        dossier=loaded.model.name,
        platform=platform,
        image=tag if image else None,
        compatibility=verdict,
        gpu_mapping=mapping.description,
        can_run=ok,
        reason=reason,
    )
