"""The ROCm host verdict (can this host's amdgpu driver run this image's ROCm user space?), and the advice both
vendors give a host without the GPU. A verdict in words, before any container starts; pure.

The NVIDIA verdict, with the container toolkit's NVIDIA_REQUIRE_CUDA evaluation, lives in `checks/cuda_verdict.py`
and `checks/require_cuda.py`; both read the vendor tables in `orchestrator/data/`.
"""

from __future__ import annotations

from packaging.version import Version

from orchestrator.model.host import AmdDriverFacts, CompatStatus, CompatVerdict
from orchestrator.vendor import rocm_kmd_support
from orchestrator.versions import parse_version


def without_gpu_advice(cpu_variant: str | None) -> str:
    """What to do on a host without the GPU: the dossier's own CPU variant, only when it declares one."""
    if cpu_variant is not None:
        return f"or run the dossier's declared CPU variant on purpose (--variant {cpu_variant})"
    return (
        "or, to run without this GPU, declare a CPU variant in the dossier (this dossier declares no CPU "
        "variant; see `variants` in docs/dossier.md)"
    )


# ------------------------------------------------------------------------------------------- ROCm verdict


def rocm_verdict(
    image_rocm: str | None, host: AmdDriverFacts | None, kfd_present: bool, cpu_variant: str | None = None
) -> CompatVerdict:
    """Compare the host's amdgpu driver with a ROCm image's user space, through AMD's user/kernel-space matrix.

    The matrix is indexed by the ROCm release the kernel driver shipped with. orch reads that release from the
    host's ROCm install (/opt/rocm/.info/version or amd-smi), assuming the DKMS driver came with it.
    """
    image = _rocm_release(image_rocm)
    requirement = f"ROCm {image}" if image is not None else None
    host_text = _amd_host_text(host)
    if not kfd_present or host is None or not host.gpus:
        return _verdict("no-driver", _no_amd_gpu(kfd_present, host, image, cpu_variant), requirement, host_text)
    if image is None:
        explanation = (
            "The image states no ROCm version orch can read (rocm/dev images keep it in a build ARG; "
            "/opt/rocm/.info/version inside the image has it), so the host driver cannot be checked against it."
        )
        return _verdict("unknown", explanation, requirement, host_text)
    if host.driver_version is None and host.source == "rocminfo":
        explanation = (
            f"The image needs ROCm {image}; the amdgpu driver's version is unknown: this host is known only from "
            "rocminfo's output, which does not state it, so it cannot be checked against AMD's user/kernel-space "
            "support matrix (`cat /sys/module/amdgpu/version` or `amd-smi version` on the host says it); the device "
            "probe will show whether the GPU works."
        )
        return _verdict("unknown", explanation, requirement, host_text)
    if host.driver_version is None:
        explanation = (
            f"The image needs ROCm {image}; this host runs the kernel's in-tree amdgpu driver, which AMD's "
            "user/kernel-space support matrix does not cover, so orch cannot vouch for it; the device probe "
            "will show whether the GPU works."
        )
        return _verdict("unknown", explanation, requirement, host_text)
    return _rocm_against_table(image, host, requirement, host_text)


def _rocm_against_table(
    image: Version, host: AmdDriverFacts, requirement: str | None, host_text: str | None
) -> CompatVerdict:
    kmd = _rocm_release(host.rocm_version)
    if kmd is None:
        explanation = (
            f"The image needs ROCm {image}; this host's amdgpu driver is {host.driver_version}, but orch found no "
            "host ROCm release to place it in AMD's support matrix; the device probe will show whether the GPU works."
        )
        return _verdict("unknown", explanation, requirement, host_text)
    tested = rocm_kmd_support().get(f"{kmd.major}.{kmd.minor}")
    if tested is None:
        explanation = (
            f"The image needs ROCm {image}; this host's amdgpu driver comes with ROCm {kmd}, which orch's "
            "support table (orchestrator/data/rocm_kmd_support.json) does not list; the device probe will tell."
        )
        return _verdict("unknown", explanation, requirement, host_text)
    if f"{image.major}.{image.minor}" in tested:
        explanation = (
            f"The image needs ROCm {image}; this host's amdgpu driver {host.driver_version} (ROCm {kmd}) is tested "
            "with it in AMD's user/kernel-space support matrix."
        )
        return _verdict("supported", explanation, requirement, host_text)
    explanation = (
        f"The image needs ROCm {image}, but this host's amdgpu driver {host.driver_version} (ROCm {kmd}) is tested "
        f"only with ROCm {', '.join(tested)} user space. Rebuild for one of those, or install the amdgpu driver "
        f"of a ROCm release that lists {image}."
    )
    return _verdict("unsupported", explanation, requirement, host_text)


def _no_amd_gpu(kfd_present: bool, host: AmdDriverFacts | None, image: Version | None, cpu_variant: str | None) -> str:
    wanted = f"The image needs ROCm {image}, but" if image is not None else "The image is a ROCm image, but"
    if not kfd_present and host is not None and host.gpus:
        return f"{wanted} /dev/kfd is missing, so no container can reach the AMD GPU. Load the amdgpu driver's KFD."
    return (
        f"{wanted} this host has no AMD GPU driver (no /dev/kfd, or no GPU in the KFD topology). "
        f"Install the amdgpu driver, {without_gpu_advice(cpu_variant)}."
    )


def _amd_host_text(host: AmdDriverFacts | None) -> str | None:
    if host is None:
        return None
    driver = (
        f"amdgpu {host.driver_version}"
        if host.driver_version
        else "amdgpu (version unknown)"
        if host.source == "rocminfo"
        else "in-tree amdgpu"
    )
    return f"{driver} (ROCm {host.rocm_version})" if host.rocm_version else driver


def _rocm_release(text: str | None) -> Version | None:
    """ "6.2.4", "6.2", "rocm6.2", "6.4.0-47" → the release's major.minor."""
    if not text:
        return None
    cleaned = text.strip().removeprefix("rocm").split("-", 1)[0]
    version = parse_version(cleaned)
    return Version(f"{version.major}.{version.minor}") if version is not None else None


# ------------------------------------------------------------------------------------------------ helpers


def _verdict(status: CompatStatus, explanation: str, requirement: str | None, host_driver: str | None) -> CompatVerdict:
    return CompatVerdict(status=status, explanation=explanation, image_requirement=requirement, host_driver=host_driver)
