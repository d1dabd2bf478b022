"""Can this host's GPU driver run this image? A verdict in words, before any container starts.

The runtime's own errors are cryptic ("unsatisfied condition: cuda>=12.8", or a kernel that fails long
after `torch.cuda.is_available()` said True); orch compares the host driver with the image's needs from
the vendor tables in `orchestrator/data/` and says what to do. Everything here is pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from packaging.version import InvalidVersion, Version

from orchestrator.model.host import AmdDriverFacts, CompatStatus, CompatVerdict, NvidiaDriverFacts
from orchestrator.resources import data_json
from orchestrator.vendor import CudaDriverRequirement, cuda_driver_requirements, torch_local_tag

# NVIDIA_REQUIRE_CUDA: space-separated alternatives (OR), each a comma-separated list of conditions (AND),
# e.g. `cuda>=12.4 brand=tesla,driver>=470,driver<471` (nvidia-container-toolkit, gpu-domain §3.2).
_CUDA_CLAUSE = re.compile(r"^cuda>=(\d+(?:\.\d+)*)$")
_DRIVER_FLOOR_CLAUSE = re.compile(r"^driver>=(\d+)(?:\.\d+)*$")


# ------------------------------------------------------------------------------------ NVIDIA_REQUIRE_CUDA


def parse_require_cuda(value: str) -> str | None:
    """The minimum CUDA an NVIDIA_REQUIRE_CUDA value asks for (its `cuda>=X` clause), e.g. "12.4"."""
    found = [version for alternative in value.split() for version in _cuda_clauses(alternative)]
    return str(min(found)) if found else None


def require_cuda_driver_branches(value: str) -> list[int]:
    """The driver branches an NVIDIA_REQUIRE_CUDA value admits without its cuda clause.

    Official images add `brand=tesla,driver>=535,driver<536`-style alternatives for each data-center branch
    on which forward compatibility (cuda-compat) is offered; any other old driver fails the container
    toolkit's check at start (gpu-domain §1.3, §4.2).
    """
    branches: set[int] = set()
    for alternative in value.split():
        if _cuda_clauses(alternative):
            continue
        for condition in alternative.split(","):
            match = _DRIVER_FLOOR_CLAUSE.match(condition.strip())
            if match:
                branches.add(int(match.group(1)))
    return sorted(branches)


def _cuda_clauses(alternative: str) -> list[Version]:
    versions = []
    for condition in alternative.split(","):
        match = _CUDA_CLAUSE.match(condition.strip())
        version = _version(match.group(1)) if match else None
        if version is not None:
            versions.append(version)
    return versions


# ------------------------------------------------------------------------------------------- CUDA verdict


@dataclass(frozen=True)
class _TableRow:
    """The table's figures used for a needed CUDA, and whether its bundled driver proves full support."""

    requirement: CudaDriverRequirement
    proves_full_support: bool
    basis: str  # a sentence when the figures are another release's; "" for an exact entry


def cuda_verdict(
    image_cuda: str | None,
    require_cuda: str | None,
    host: NvidiaDriverFacts | None,
    datacenter_gpu: bool = False,
    image_has_compat_libs: bool = False,
    cpu_variant: str | None = None,
) -> CompatVerdict:
    """Compare the host's NVIDIA driver with what a CUDA image needs.

    `image_cuda`: the image's CUDA toolkit (CUDA_VERSION "12.4.1", or torch's CUDA build "13.0" for pip's
    CUDA wheels). `require_cuda`: the image's NVIDIA_REQUIRE_CUDA value (a bare version is accepted too).
    When both are given, the higher one governs: a cu130 torch in a CUDA 12.4 base needs a 13.0 driver.
    `datacenter_gpu` and `image_has_compat_libs` decide whether forward compatibility could apply.
    `cpu_variant`: the CPU variant the dossier declares, if any, offered when the host has no driver.
    """
    need = _needed_cuda(image_cuda, require_cuda)
    requirement = f"cuda>={need}" if need is not None else None
    if host is None:
        return _no_nvidia_driver(need, requirement, cpu_variant)
    host_text = host.driver_version
    driver = _version(host.driver_version)
    if need is None:
        return _verdict("unknown", _no_cuda_stated(host_text), None, host_text)
    if driver is None:
        explanation = (
            f"The image needs CUDA {need}, but orch could not read this host's NVIDIA driver version "
            f"(source: {host.source}). Check `nvidia-smi` on the host; the device probe will show whether CUDA works."
        )
        return _verdict("unknown", explanation, requirement, host_text)
    row = _table_row(need)
    if row is None:
        explanation = (
            f"CUDA {need} is not in orch's CUDA → driver table (orchestrator/data/cuda_driver.json), so the host "
            f"driver {host_text} cannot be checked against it; the device probe will show whether CUDA works."
        )
        return _verdict("unknown", explanation, requirement, host_text)
    return _compare(need, driver, row, require_cuda, datacenter_gpu, image_has_compat_libs, requirement, host_text)


def _compare(
    need: Version,
    driver: Version,
    row: _TableRow,
    require_cuda: str | None,
    datacenter_gpu: bool,
    image_has_compat_libs: bool,
    requirement: str | None,
    host_text: str | None,
) -> CompatVerdict:
    bundled, floor = row.requirement.bundled, row.requirement.minor_compat
    basis = f" {row.basis}" if row.basis else ""
    shipped_with = _fully_supported(need, driver, row)
    if shipped_with is not None:
        explanation = (
            f"The image needs CUDA {need}; this host's NVIDIA driver {host_text} fully supports it (it is at least "
            f"{shipped_with.bundled}, the driver CUDA {shipped_with.toolkit} ships with)."
        )
        if row.proves_full_support:
            explanation += basis
        return _verdict("supported", explanation, requirement, host_text)
    if driver >= Version(floor):
        explanation = (
            f"The image needs CUDA {need}, whose own driver is {bundled}; this host has {host_text}, which runs it "
            "through minor-version compatibility: no PTX JIT (a GPU the wheels carry no SASS for fails) and APIs "
            f"that need a newer driver fail with cudaErrorCallRequiresNewerDriver. Update the driver to {bundled} "
            f"or newer for full support.{basis}"
        )
        return _verdict("minor-version-compat", explanation, requirement, host_text)
    too_old = (
        f"The image needs CUDA {need}, which needs NVIDIA driver ≥ {bundled} (≥ {floor} with minor-version "
        f"compatibility); this host has {host_text}."
    )
    if datacenter_gpu and image_has_compat_libs:
        return _forward_compat(too_old + basis, driver, require_cuda, requirement, host_text)
    explanation = f"{too_old} Update the driver to {floor} or newer{_rebuild_advice(driver, need)}.{basis}"
    return _verdict("unsupported", explanation, requirement, host_text)


def _forward_compat(
    too_old: str, driver: Version, require_cuda: str | None, requirement: str | None, host_text: str | None
) -> CompatVerdict:
    branches = require_cuda_driver_branches(require_cuda) if require_cuda else []
    if branches and driver.major not in branches:
        listed = ", ".join(f"R{branch}" for branch in branches)
        explanation = (
            f"{too_old} The image's NVIDIA_REQUIRE_CUDA admits forward compatibility only on the {listed} branches, "
            f"so the container toolkit will refuse to start it on R{driver.major}. Update the driver to a newer branch."
        )
        return _verdict("unsupported", explanation, requirement, host_text)
    explanation = (
        f"{too_old} This is a data-center GPU and the image carries the cuda-compat libraries, so forward "
        "compatibility may work if this driver branch is one the compat package supports and "
        "/usr/local/cuda/compat is on the library path; the device probe confirms it with a real kernel launch."
    )
    return _verdict("forward-compat-possible", explanation, requirement, host_text)


def _fully_supported(need: Version, driver: Version, row: _TableRow) -> CudaDriverRequirement | None:
    """The table entry whose bundled driver proves full support for `need`, if the host driver meets one.

    A driver runs every toolkit up to the one it ships with: meeting the bundled driver of the needed
    release, or of any later release in the table, is full support.
    """
    if row.proves_full_support and driver >= Version(row.requirement.bundled):
        return row.requirement
    later = [
        entry
        for toolkit, entry in cuda_driver_requirements().items()
        if _minor(toolkit) >= need and driver >= Version(entry.bundled)
    ]
    return min(later, key=lambda entry: _minor(entry.toolkit)) if later else None


def _table_row(need: Version) -> _TableRow | None:
    """The table's entry for `need`, else the nearest lower minor of the same CUDA major, saying so."""
    table = cuda_driver_requirements()
    exact = table.get(f"{need.major}.{need.minor}")
    if exact is not None:
        return _TableRow(exact, proves_full_support=True, basis="")
    same_major = sorted((_minor(key), entry) for key, entry in table.items() if _minor(key).major == need.major)
    lower = [(version, entry) for version, entry in same_major if version < need]
    if not lower:
        return None
    basis_version, entry = lower[-1]
    if same_major[-1][0] > need:
        # A gap in the releases (there is no CUDA 12.7): the previous release's figures apply.
        basis = (
            f"CUDA {need} is not in orch's table; the figures are those of CUDA {basis_version}, the release before it."
        )
        return _TableRow(entry, proves_full_support=True, basis=basis)
    # Newer than the table knows: the major's minor-compat floor still holds, full support is not proven.
    basis = (
        f"CUDA {need} is newer than orch's table; the figures are those of CUDA {basis_version}, so only "
        "minor-version compatibility can be vouched for."
    )
    return _TableRow(entry, proves_full_support=False, basis=basis)


def _rebuild_advice(driver: Version, need: Version) -> str:
    """ ", or rebuild for CUDA 12.4 (torch cu124) …": the newest toolkit this driver fully supports."""
    table = cuda_driver_requirements()
    full = [_minor(key) for key, entry in table.items() if driver >= Version(entry.bundled) and _minor(key) < need]
    compat_majors = [_minor(key).major for key, entry in table.items() if driver >= Version(entry.minor_compat)]
    compat_major = max(compat_majors) if compat_majors else None
    if not full:
        if compat_major is None:
            return ""
        return f", or rebuild for CUDA {compat_major}.x, which this driver runs through minor-version compatibility"
    best = max(full)
    advice = f", or rebuild for CUDA {best} (torch {torch_local_tag('cuda', str(best))}), the newest it fully supports"
    if compat_major == best.major:
        advice += f"; other CUDA {best.major}.x builds run through minor-version compatibility"
    return advice


def _needed_cuda(image_cuda: str | None, require_cuda: str | None) -> Version | None:
    candidates = []
    if image_cuda:
        candidates.append(_version(image_cuda))
    if require_cuda:
        candidates.append(_version(parse_require_cuda(require_cuda) or require_cuda.strip()))
    found = [_minor(str(version)) for version in candidates if version is not None]
    return max(found) if found else None


def without_gpu_advice(cpu_variant: str | None) -> str:
    """What to do on a host without the GPU: the dossier's own CPU variant, only when it declares one."""
    if cpu_variant is not None:
        return f"or run the dossier's declared CPU variant on purpose (--variant {cpu_variant})"
    return (
        "or, to run without this GPU, declare a CPU variant in the dossier (this dossier declares no CPU "
        "variant; see `variants` in docs/dossier.md)"
    )


def _no_nvidia_driver(need: Version | None, requirement: str | None, cpu_variant: str | None) -> CompatVerdict:
    wanted = f"The image needs CUDA {need}, but" if need is not None else "The image is a CUDA image, but"
    install = "Install an NVIDIA driver"
    row = _table_row(need) if need is not None else None
    if row is not None:
        install += f" ≥ {row.requirement.bundled}"
    explanation = (
        f"{wanted} this host has no NVIDIA driver (NVML, nvidia-smi, /sys/module/nvidia/version and "
        f"/proc/driver/nvidia/version found nothing). {install}, {without_gpu_advice(cpu_variant)}."
    )
    return _verdict("no-driver", explanation, requirement, None)


def _no_cuda_stated(host_text: str | None) -> str:
    return (
        "The image states no CUDA version orch can read (no CUDA_VERSION, no cuda>= clause in NVIDIA_REQUIRE_CUDA, "
        f"no torch CUDA build), so the host driver {host_text or '(version unknown)'} cannot be checked against it; "
        "the device probe will show whether CUDA works."
    )


# ------------------------------------------------------------------------------------------- ROCm verdict


@cache
def rocm_kmd_support() -> dict[str, tuple[str, ...]]:
    """KMD (amdgpu DKMS) ROCm release → the user-space releases AMD tested with it (data/rocm_kmd_support.json)."""
    raw: dict[str, list[str]] = data_json("rocm_kmd_support.json")["kmd"]
    return {kmd: tuple(user_spaces) for kmd, user_spaces in raw.items()}


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
    driver = f"amdgpu {host.driver_version}" if host.driver_version else "in-tree amdgpu"
    return f"{driver} (ROCm {host.rocm_version})" if host.rocm_version else driver


def _rocm_release(text: str | None) -> Version | None:
    """ "6.2.4", "6.2", "rocm6.2", "6.4.0-47" → the release's major.minor."""
    if not text:
        return None
    cleaned = text.strip().removeprefix("rocm").split("-", 1)[0]
    version = _version(cleaned)
    return Version(f"{version.major}.{version.minor}") if version is not None else None


# -------------------------------------------------------------------------------------------- GPU classes

# A heuristic, not a table from NVIDIA: forward compatibility (cuda-compat) is offered only on data-center
# GPUs (gpu-domain §1.3), and nothing the driver reports says "data center". Product names do: GeForce,
# TITAN, Quadro and RTX cards are not data-center parts (the few NGC-ready RTX server cards are treated as
# not eligible, the safe side: a wrong "no" costs a suggestion, a wrong "yes" a false hope).
_CONSUMER = re.compile(r"\b(GeForce|TITAN|Quadro|RTX)\b", re.IGNORECASE)
_DATACENTER = re.compile(
    r"\b(Tesla|DGX|HGX"
    r"|[KMPV]\d{2,3}|P4|T4|A2|A10G?|A16|A30|A40|A100|A800|H20|H100|H800|H200|GH200|GB200|GB300|B100|B200|B300"
    r"|L4|L20|L40S?)\b",
    re.IGNORECASE,
)


def gpu_datacenter(name: str) -> bool:
    """Whether an NVIDIA GPU name looks like a data-center part ("NVIDIA H100 80GB HBM3": yes; "NVIDIA GeForce
    RTX 4090": no). A heuristic on the marketing name; unknown names count as not data-center."""
    if _CONSUMER.search(name):
        return False
    return bool(_DATACENTER.search(name))


# ------------------------------------------------------------------------------------------------ helpers


def _verdict(status: CompatStatus, explanation: str, requirement: str | None, host_driver: str | None) -> CompatVerdict:
    return CompatVerdict(status=status, explanation=explanation, image_requirement=requirement, host_driver=host_driver)


def _version(text: str | None) -> Version | None:
    if not text:
        return None
    try:
        return Version(text.strip())
    except InvalidVersion:
        return None


def _minor(text: str) -> Version:
    """A CUDA version cut to major.minor: "12.4.1" → 12.4, "13" → 13.0."""
    version = Version(text)
    return Version(f"{version.major}.{version.minor}")
