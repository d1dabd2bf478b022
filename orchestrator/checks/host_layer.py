"""The host layer's checks, written once: used by the probe's host stage, host mode and `orch doctor`.

`checks/cuda_verdict.py` (NVIDIA) and `checks/rocm_verdict.py` (ROCm) hold the verdicts (can this driver run that
CUDA/ROCm, in words); this module turns a host's facts and an image's needs into that verdict and into the host
stage's checks. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.checks.amd_access import amd_access_findings
from orchestrator.checks.arch_coverage import cuda_arch_coverage, rocm_arch_coverage
from orchestrator.checks.cuda_verdict import needed_cuda, nvidia_host, nvidia_verdict
from orchestrator.checks.rocm_verdict import rocm_verdict
from orchestrator.dossier.load import LoadedDossier
from orchestrator.model.checks import Check
from orchestrator.model.host import CompatVerdict, HostFacts
from orchestrator.model.inventory import Inventory
from orchestrator.model.platform import Platform
from orchestrator.plan.run import GpuMapping

#: Where orch looks for an NVIDIA driver, said in a failed check.
NVIDIA_SOURCES = "NVML, nvidia-smi, /sys/module/nvidia/version, /proc/driver/nvidia/version"


def driver_fits(verdict: CompatVerdict) -> bool:
    """The one rule for "this host's driver can run the image": fully supported, or through minor-version compat."""
    return verdict.status in ("supported", "minor-version-compat")


def cpu_variant_of(loaded: LoadedDossier) -> str | None:
    """The first variant the dossier declares for the CPU platform: the only CPU fallback orch may suggest."""
    for variant in loaded.reference_model.variants:
        if variant.system is not None and variant.system.platform == "cpu":
            return variant.name
    return None


@dataclass(frozen=True)
class ImageNeeds:
    """What the image asks of the host's driver: its CUDA (toolkit or torch build), NVIDIA_REQUIRE_CUDA, its ROCm."""

    cuda: str | None = None
    require_cuda: str | None = None
    rocm: str | None = None
    cuda_compat_libs: bool = False
    #: The image's whole environment (Config.Env): the container toolkit reads every NVIDIA_REQUIRE_* from it.
    env: Mapping[str, str] | None = None
    #: torch's compiled GPU targets (the inventory's sm_XX / compute_XX / gfxNNN), empty when unknown.
    arch_list: tuple[str, ...] = ()


def image_needs(env: Mapping[str, str], inventory: Inventory | None) -> ImageNeeds:
    """From the image's environment and its inventory (when the image stage read one)."""
    backend = inventory.backend if inventory else None
    hip_release = backend.torch_hip.split("-")[0] if backend and backend.torch_hip else None
    return ImageNeeds(
        cuda=env.get("CUDA_VERSION") or (backend.torch_cuda if backend else None),
        require_cuda=env.get("NVIDIA_REQUIRE_CUDA"),
        rocm=(backend.rocm if backend else None) or hip_release,
        cuda_compat_libs=bool(backend and backend.cuda_compat_libs),
        env=dict(env),
        arch_list=tuple(backend.torch_arch_list) if backend else (),
    )


def compat_verdict(platform: Platform, host: HostFacts, needs: ImageNeeds, *, cpu_variant: str | None) -> CompatVerdict:
    """The host driver against the image's needs, for any platform."""
    if platform == "cpu":
        return CompatVerdict(status="not-applicable", explanation="CPU platform: no GPU driver is needed.")
    if platform == "cuda":
        return _cuda_compat(host, needs, cpu_variant)
    return rocm_verdict(needs.rocm, host.amd, host.kfd_present, cpu_variant=cpu_variant)


def _cuda_compat(host: HostFacts, needs: ImageNeeds, cpu_variant: str | None) -> CompatVerdict:
    """The NVIDIA verdict in the order failures happen (checks/cuda_verdict.py): Jetson, no driver (offering the
    dossier's CPU variant), the container toolkit's own NVIDIA_REQUIRE_CUDA check, the driver's reported CUDA,
    NVIDIA's table, forward compatibility."""
    toolkit = nvidia_verdict(
        nvidia_host(host, host.l4t_release),
        needs.cuda,
        require_cuda=needs.require_cuda,
        image_has_compat_libs=needs.cuda_compat_libs,
        image_env=needs.env if needs.env else None,
        cpu_variant=cpu_variant,
    )
    need = needed_cuda(needs.cuda, needs.require_cuda)
    return CompatVerdict(
        status=toolkit.status,
        explanation=toolkit.explanation,
        image_requirement=f"cuda>={need}" if need is not None else None,
        host_driver=host.nvidia.driver_version if host.nvidia else None,
    )


def gpu_mapped(platform: Platform, mapping: GpuMapping) -> bool:
    """Whether the daemon can hand the platform's GPU to a container."""
    if platform == "rocm":
        return bool(mapping.devices or mapping.cdi_devices)
    return mapping.maps_nvidia if platform == "cuda" else True


def host_checks(
    platform: Platform, host: HostFacts, needs: ImageNeeds, verdict: CompatVerdict | None, mapping: GpuMapping | None
) -> list[Check]:
    """The host stage's checks. `verdict` None: no version to compare the driver with (host mode without
    --version); `mapping` None: no container will start (host mode), so no mapping check."""
    if platform == "cpu":
        return [Check(name="no accelerator needed", expected="CPU platform", observed="CPU platform", passed=True)]
    checks: list[Check] = []
    if platform == "cuda":
        nvidia = host.nvidia
        checks.append(
            Check(
                name="NVIDIA driver present",
                expected="an NVIDIA kernel driver",
                observed=f"{nvidia.driver_version} ({nvidia.source}), {len(nvidia.gpus)} GPU(s)"
                if nvidia
                else "no NVIDIA driver found",
                passed=nvidia is not None,
                detail=None if nvidia else f"looked at {NVIDIA_SOURCES}",
            )
        )
        need, field = needs.cuda, "CUDA"
    else:
        amd = host.amd
        checks.append(
            Check(
                name="AMD GPU driver present",
                expected="amdgpu with KFD (/dev/kfd) and a GPU node",
                observed=f"{len(amd.gpus)} GPU(s): {', '.join(g.gfx_target for g in amd.gpus)}"
                if amd
                else "no AMD GPU driver found",
                passed=amd is not None and host.kfd_present,
            )
        )
        need, field = needs.rocm, "ROCm"
    if verdict is not None:
        checks.append(
            Check(
                name=f"driver supports the image's {field}",
                expected=f"{field} {need}" if need else f"the image's {field}",
                observed=verdict.status,
                passed=driver_fits(verdict),
                detail=verdict.explanation,
            )
        )
    if platform == "rocm" and mapping is not None:
        checks.append(amd_access_check(host, needs.env or {}))
    coverage = arch_coverage_check(platform, host, needs.arch_list)
    if coverage is not None:
        checks.append(coverage)
    if platform == "cuda" and mapping is not None:
        checks.append(
            Check(
                name="daemon can map NVIDIA GPUs",
                expected="a CDI device for each selected GPU, or the nvidia runtime",
                observed=mapping.description,
                passed=mapping.maps_nvidia,
                detail=f"Generate the CDI spec on the host: `{mapping.cdi_hint}`, then check it with "
                "`nvidia-ctk cdi list`."
                if mapping.cdi_hint
                else None,
            )
        )
    return checks


def arch_coverage_check(platform: Platform, host: HostFacts, arch_list: tuple[str, ...]) -> Check | None:
    """Before any container starts: does the image's torch carry kernels for each host GPU (checks/arch_coverage.py)?
    PTX that the driver can JIT passes, said in the detail; None when the arch list or the GPUs are unknown."""
    if not arch_list:
        return None
    if platform == "cuda" and host.nvidia is not None:
        findings = [
            cuda_arch_coverage(arch_list, gpu.name, gpu.compute_capability)
            for gpu in host.nvidia.gpus
            if gpu.compute_capability
        ]
    elif platform == "rocm" and host.amd is not None:
        findings = [rocm_arch_coverage(arch_list, gpu.gfx_target) for gpu in host.amd.gpus]
    else:
        return None
    if not findings:
        return None
    return Check(
        name="image has kernels for the host's GPUs",
        expected="SASS or JIT-able PTX (CUDA), or a code object (ROCm), for every GPU",
        observed=", ".join(f"{finding.gpu}: {finding.coverage}" for finding in findings),
        passed=all(finding.coverage != "none" for finding in findings),
        detail=" ".join(finding.sentence for finding in findings),
    )


def amd_access_check(host: HostFacts, env: Mapping[str, str]) -> Check:
    """Can a container reach the AMD GPUs: /dev/kfd, render nodes, video/render gids; HSA_OVERRIDE_GFX_VERSION in
    the image's environment recorded and flagged (checks/amd_access.py). Errors fail it; warnings are its detail."""
    findings = amd_access_findings(host, env)
    errors = [f.sentence for f in findings if f.severity == "error"]
    return Check(
        name="container can reach the AMD GPUs",
        expected="/dev/kfd, a render node per GPU, the video and render gids",
        observed="; ".join(errors) if errors else "yes",
        passed=not errors,
        detail=" ".join(f.sentence for f in findings) or None,
    )
