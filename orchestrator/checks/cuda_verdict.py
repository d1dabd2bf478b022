"""The NVIDIA host verdict for a CUDA image, in the order the failures would happen: the one home of that rule.

1. Jetson (L4T): its own case — the GPU driver is part of L4T, NVIDIA's desktop/data-centre table does not apply.
2. No driver: install one (≥ the image's release's driver), or run the dossier's declared CPU variant.
3. The container toolkit's start-time check (`NVIDIA_REQUIRE_CUDA`, read and evaluated only by `require_cuda`):
   refused before start.
4. The driver's own reported CUDA version (nvidia-smi banner `CUDA Version` / `CUDA UMD Version`, NVML): a
   driver that reports a newer CUDA minor than the image needs, or the same minor when NVIDIA's table has no row
   for the image's exact release, supports it — this is how 13.2 / 13.3 images on R595 / R610 are judged.
5. NVIDIA's Table 3 row of the image's exact release (12.4.1, 12.8.1 …): at least its driver → supported; with no
   reported CUDA, at least the driver of a later CUDA minor → supported (a driver runs every older toolkit);
   at least the CUDA major's minor-compat floor (Table 2) → minor-version compatibility.
6. Below the floor: forward compatibility (cuda-compat) only on data-centre GPUs with the compat libraries in the
   image; otherwise unsupported, with the newest CUDA (and torch build) the driver fully supports.

Pure: the caller passes facts, this returns a status and a sentence a user can act on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from packaging.version import Version

from orchestrator.checks.require_cuda import (
    CudaRelease,
    DeviceFacts,
    cuda_releases,
    evaluate_image,
    image_requirements,
    minor_compat_floor,
    newest_cuda_for_driver,
    release_row,
    required_cuda,
)
from orchestrator.checks.rocm_verdict import without_gpu_advice
from orchestrator.errors import RequireExpressionError
from orchestrator.model.host import HostFacts
from orchestrator.vendor import nvidia_gpu_classes, torch_local_tag
from orchestrator.versions import parse_version

ToolkitStatus = Literal[
    "supported",
    "minor-version-compat",
    "forward-compat-possible",
    "unsupported",
    "refused-by-toolkit",
    "jetson",
    "no-driver",
    "unknown",
]


@dataclass(frozen=True)
class NvidiaHost:
    """The facts the verdict needs; built from HostFacts (or a capture) by the caller."""

    driver_version: str | None
    #: Where a driver was found (nvml, nvidia-smi, sysfs, procfs). A driver whose version could not be read has a
    #: source and no version ("unknown"); no source and no version is a host without a driver ("no-driver").
    driver_source: str | None = None
    #: The driver's own CUDA version ("12.4") from the banner or NVML; None when not reported.
    cuda_driver_version: str | None = None
    devices: Sequence[DeviceFacts] = ()
    #: Jetson's L4T release ("R35.3.1") from /etc/nv_tegra_release; None on a discrete-GPU host.
    l4t_release: str | None = None
    datacenter_gpu: bool = False
    #: A Jetson's integrated GPU as nvidia-smi names it ("Orin (nvgpu)") when no L4T release was read: the host is
    #: a Jetson all the same, and its driver version (540.4.0) must not be read against the desktop table.
    tegra_gpu: str | None = None


@dataclass(frozen=True)
class ToolkitVerdict:
    status: ToolkitStatus
    explanation: str
    #: The toolkit's own refusal text when status is refused-by-toolkit.
    toolkit_error: str | None = None
    #: What settled it: "l4t", "toolkit", "driver-cuda", "table", "floor", "none".
    basis: str = "none"


def needed_cuda(image_cuda: str | None, require_cuda: str | None) -> Version | None:
    """The CUDA the image needs: the higher of CUDA_VERSION (or torch's CUDA build) and the `cuda>=` of
    NVIDIA_REQUIRE_CUDA (`require_cuda.required_cuda`, the one reader of that expression): a cu130 torch in a
    CUDA 12.4 base needs a 13.0 driver."""
    versions = [v for v in (parse_version(image_cuda), required_cuda(require_cuda)) if v is not None]
    return max(versions) if versions else None


def nvidia_verdict(
    host: NvidiaHost,
    image_cuda: str | None,
    require_cuda: str | None = None,
    disable_require: str | None = None,
    image_has_compat_libs: bool = False,
    image_env: Mapping[str, str] | None = None,
    cpu_variant: str | None = None,
) -> ToolkitVerdict:
    """`image_env`: the image's whole environment when known (Config.Env); then the toolkit check reads every
    NVIDIA_REQUIRE_* and the legacy CUDA_VERSION rule from it, and `require_cuda`/`disable_require` default to it.
    `cpu_variant`: the CPU variant the dossier declares, if any, offered when the host has no driver."""
    if image_env is not None:
        require_cuda = require_cuda or image_env.get("NVIDIA_REQUIRE_CUDA")
        disable_require = disable_require or image_env.get("NVIDIA_DISABLE_REQUIRE")
    if host.l4t_release is not None or host.tegra_gpu is not None:
        return _jetson(host.l4t_release, image_cuda, host.tegra_gpu)
    driver = parse_version(host.driver_version)
    need = needed_cuda(image_cuda, require_cuda)
    if host.driver_version is None and host.driver_source is None:
        return _no_driver(need, cpu_variant)
    reported = parse_version(host.cuda_driver_version)
    driver_cuda = reported
    if driver_cuda is None and driver is not None:
        newest = newest_cuda_for_driver(driver)
        driver_cuda = Version(f"{newest.major}.{newest.minor}") if newest is not None else None
    if image_env is not None:
        refused = toolkit_refusal(image_env, host, driver_cuda, reported is None)
    else:
        refused = _toolkit_check(require_cuda, disable_require, host, driver_cuda, reported is None)
    if refused is not None:
        return refused
    if need is None:
        return ToolkitVerdict(
            "unknown",
            "The image states no CUDA version orch can read (no CUDA_VERSION, no cuda>= clause), so the host driver "
            f"{host.driver_version} cannot be checked against it; the device probe will show whether CUDA works.",
        )
    if driver is None:
        source = f" (source: {host.driver_source})" if host.driver_source else ""
        return ToolkitVerdict(
            "unknown",
            f"The image needs CUDA {need}, but orch could not read this host's NVIDIA driver version{source}: "
            f"{host.driver_version!r}. Check `nvidia-smi` on the host; the device probe will show whether CUDA works.",
        )
    return _support(need, driver, host, reported, image_has_compat_libs)


def _no_driver(need: Version | None, cpu_variant: str | None) -> ToolkitVerdict:
    wanted = f"The image needs CUDA {need}, but" if need is not None else "The image is a CUDA image, but"
    row = release_row(need) if need is not None else None
    install = f"Install an NVIDIA driver ≥ {row.driver_text}" if row is not None else "Install an NVIDIA driver"
    return ToolkitVerdict(
        "no-driver",
        f"{wanted} this host has no NVIDIA driver (NVML, nvidia-smi, /sys/module/nvidia/version and "
        f"/proc/driver/nvidia/version found nothing). {install}, {without_gpu_advice(cpu_variant)}.",
    )


def _toolkit_check(
    require_cuda: str | None, disable_require: str | None, host: NvidiaHost, driver_cuda: Version | None, inferred: bool
) -> ToolkitVerdict | None:
    env = {"NVIDIA_REQUIRE_CUDA": require_cuda or ""}
    if disable_require is not None:
        env["NVIDIA_DISABLE_REQUIRE"] = disable_require
    return toolkit_refusal(env, host, driver_cuda, inferred)


def toolkit_refusal(
    env: Mapping[str, str], host: NvidiaHost, driver_cuda: Version | None, inferred: bool = False
) -> ToolkitVerdict | None:
    """The toolkit's refusal for an image environment (all NVIDIA_REQUIRE_* and the legacy CUDA_VERSION rule).

    A driver version that is not dotted numbers is an unknown fact (counted as met, as the toolkit does with an
    unknown fact); an expression the toolkit cannot parse is its refusal "invalid expression"."""
    driver = host.driver_version if host.driver_version and re.fullmatch(r"[0-9.]+", host.driver_version) else None
    try:
        outcome = evaluate_image(env, driver, str(driver_cuda) if driver_cuda else None, host.devices)
    except RequireExpressionError as error:
        explanation = (
            f"The NVIDIA container toolkit will refuse to start this image: its requirement "
            f"({' '.join(image_requirements(env))}) is not an expression the toolkit can read ({error}). "
            "The toolkit says `requirement error: invalid expression`. Fix NVIDIA_REQUIRE_* in the image."
        )
        return ToolkitVerdict(
            "refused-by-toolkit", explanation, toolkit_error="requirement error: invalid expression", basis="toolkit"
        )
    if outcome.satisfied:
        return None
    how = " (the driver's CUDA version inferred from NVIDIA's table)" if inferred else ""
    shown = " ".join(image_requirements(env)) or "the image's requirements"
    explanation = (
        f"The NVIDIA container toolkit will refuse to start this image: its requirement ({shown}) is "
        f"not met by driver {host.driver_version}, which supports CUDA {driver_cuda}{how}. The toolkit says "
        f"`{outcome.error}`. Update the driver, or rebuild the image for CUDA {driver_cuda} or older; "
        "NVIDIA_DISABLE_REQUIRE=1 only moves the failure to CUDA initialisation."
    )
    return ToolkitVerdict("refused-by-toolkit", explanation, toolkit_error=outcome.error, basis="toolkit")


def _support(
    need: Version, driver: Version, host: NvidiaHost, reported: Version | None, image_has_compat_libs: bool
) -> ToolkitVerdict:
    need_minor = Version(f"{need.major}.{need.minor}")
    row = release_row(need)
    if reported is not None and (reported > need_minor or (reported == need_minor and row is None)):
        return ToolkitVerdict(
            "supported",
            f"The image needs CUDA {need}; this host's driver {host.driver_version} reports CUDA {reported} itself "
            "(nvidia-smi / NVML), so it supports it.",
            basis="driver-cuda",
        )
    if row is not None and driver >= row.linux_driver:
        return ToolkitVerdict(
            "supported",
            f"The image needs CUDA {need}; this host's driver {host.driver_version} is at least {row.driver_text}, "
            f"the driver CUDA {row.cuda} ({row.release}) ships with (NVIDIA's CUDA release notes, Table 3).",
            basis="table",
        )
    later = _later_release_met(need_minor, driver) if reported is None else None
    if later is not None:
        # A driver runs every toolkit up to the one it ships with: meeting a later minor's driver is full support,
        # also for a release the table has no row for (12.3.2, 11.0.221 …).
        return ToolkitVerdict(
            "supported",
            f"The image needs CUDA {need}; this host's driver {host.driver_version} is at least {later.driver_text}, "
            f"the driver the later CUDA {later.cuda} ({later.release}) ships with, and a driver runs every older "
            "toolkit (NVIDIA's CUDA release notes, Table 3).",
            basis="table",
        )
    floor = minor_compat_floor(need.major)
    if row is None and floor is None and need_minor > _newest_in_table():
        return ToolkitVerdict(
            "unknown",
            f"CUDA {need} is newer than orch's CUDA → driver table (orchestrator/data/cuda_driver.json) and this "
            f"host's driver {host.driver_version} reports no CUDA version, so it cannot be checked; the device probe "
            "will show whether CUDA works.",
        )
    shipped = row.driver_text if row is not None else "a newer driver (not in orch's table)"
    if floor is not None and driver >= Version(floor):
        return ToolkitVerdict(
            "minor-version-compat",
            f"The image needs CUDA {need}, whose own driver is {shipped}; this host has {host.driver_version}, which "
            f"runs it through minor-version compatibility (CUDA {need.major}.x needs ≥ {floor}): no PTX JIT (a GPU the "
            "wheels carry no SASS for fails) and APIs that need a newer driver fail with "
            f"cudaErrorCallRequiresNewerDriver. Update the driver to {shipped} or newer for full support.",
            basis="floor",
        )
    too_old = (
        f"The image needs CUDA {need}, which needs NVIDIA driver ≥ {shipped}"
        + (f" (≥ {floor} with minor-version compatibility)" if floor is not None else "")
        + f"; this host has {host.driver_version}."
    )
    if host.datacenter_gpu and image_has_compat_libs:
        return ToolkitVerdict(
            "forward-compat-possible",
            f"{too_old} This is a data-centre GPU and the image carries the cuda-compat libraries, so forward "
            "compatibility may work on a supported data-centre driver branch; NVIDIA offers it only on data-centre "
            "GPUs (not GeForce/RTX consumer cards). The device probe confirms it with a real kernel launch.",
            basis="table",
        )
    target = floor or (row.driver_text if row is not None else None)
    update = f"Update the driver to {target} or newer" if target is not None else "Update the driver"
    forward = "" if host.datacenter_gpu else " Forward compatibility (cuda-compat) is offered only on data-centre GPUs."
    return ToolkitVerdict(
        "unsupported", f"{too_old} {update}{_rebuild_advice(driver, need_minor)}.{forward}", basis="table"
    )


def _later_release_met(need_minor: Version, driver: Version) -> CudaRelease | None:
    """The oldest release of a later CUDA minor whose shipped driver this driver meets, if any."""
    later = [row for row in cuda_releases() if _minor(row.cuda) > need_minor and driver >= row.linux_driver]
    return min(later, key=lambda row: row.cuda) if later else None


def _newest_in_table() -> Version:
    return _minor(cuda_releases()[-1].cuda)


def _rebuild_advice(driver: Version, need_minor: Version) -> str:
    """ ", or rebuild for CUDA 12.4 (torch cu124) …": the newest CUDA minor this driver fully supports, and the
    CUDA major it runs through minor-version compatibility."""
    newest = newest_cuda_for_driver(driver)
    compat_majors = [
        major
        for major in sorted({row.cuda.major for row in cuda_releases()})
        if (floor := minor_compat_floor(major)) is not None and driver >= Version(floor)
    ]
    compat_major = compat_majors[-1] if compat_majors else None
    if newest is None or _minor(newest) >= need_minor:
        if compat_major is None:
            return ""
        return f", or rebuild for CUDA {compat_major}.x, which this driver runs through minor-version compatibility"
    best = _minor(newest)
    advice = f", or rebuild for CUDA {best} (torch {torch_local_tag('cuda', str(best))}), the newest it fully supports"
    if compat_major == best.major:
        advice += f"; other CUDA {best.major}.x builds run through minor-version compatibility"
    return advice


def _minor(version: Version) -> Version:
    return Version(f"{version.major}.{version.minor}")


def _jetson(l4t: str | None, image_cuda: str | None, tegra_gpu: str | None = None) -> ToolkitVerdict:
    wanted = f"The image needs CUDA {image_cuda}; " if image_cuda else ""
    which = f"L4T {l4t}" if l4t is not None else f"nvidia-smi names its GPU {tegra_gpu!r}; L4T release not captured"
    return ToolkitVerdict(
        "jetson",
        f"{wanted}this host is an NVIDIA Jetson ({which}). Its GPU driver is part of L4T (its version, e.g. 35.3.1, "
        "is an L4T release, not a desktop/data-centre driver), so NVIDIA's CUDA ↔ driver table does not apply: use an "
        "image built for this L4T/JetPack release (l4t-* base images, aarch64) and let the device probe confirm CUDA.",
        basis="l4t",
    )


# Jetsons before Thor run the Tegra GPU driver (nvgpu), and JetPack 6's nvidia-smi names the GPU after it:
# "Orin (nvgpu)". Its driver version (540.4.0) is an L4T driver's, not a desktop branch.
_TEGRA_GPU_NAME = re.compile(r"\(nvgpu\)\s*$")


def is_tegra_gpu_name(name: str) -> bool:
    """Whether an NVIDIA GPU name is a Jetson's integrated GPU as nvidia-smi names it on JetPack 6 ("Orin (nvgpu)")."""
    return bool(_TEGRA_GPU_NAME.search(name))


def gpu_datacenter(name: str) -> bool:
    """Whether an NVIDIA GPU name looks like a data-center part ("NVIDIA H100 80GB HBM3": yes; "NVIDIA GeForce
    RTX 4090": no). A heuristic on the marketing name (data/nvidia_gpu_classes.json says why); unknown names
    count as not data-center."""
    classes = nvidia_gpu_classes()
    if classes.consumer.search(name):
        return False
    return bool(classes.datacenter.search(name))


# A product-name heuristic for the toolkit's `brand` rule (NVML brand names, lower case as in NVIDIA_REQUIRE_CUDA).
def brand_from_name(name: str) -> str | None:
    lowered = name.lower()
    if "geforce" in lowered and "rtx" in lowered:
        return "geforcertx"
    if "geforce" in lowered:
        return "geforce"
    if "titan" in lowered:
        return "titanrtx" if "rtx" in lowered else "titan"
    if "quadro" in lowered:
        return "quadrortx" if "rtx" in lowered else "quadro"
    if re.search(r"\brtx\b", lowered):
        return "nvidiartx"
    if re.search(r"\b(tesla|[a-z]?\d{2,3}[a-z]?|h100|h200|a100|b200|l40s?|t4)\b", lowered):
        return "tesla"
    return None


def nvidia_host(facts: HostFacts, l4t_release: str | None = None) -> NvidiaHost:
    """The verdict's view of collected host facts (live or captured)."""
    nvidia = facts.nvidia
    if nvidia is None:
        return NvidiaHost(driver_version=None, l4t_release=l4t_release)
    names = [gpu.name for gpu in nvidia.gpus]
    devices = [DeviceFacts(arch=gpu.compute_capability, brand=brand_from_name(gpu.name)) for gpu in nvidia.gpus]
    return NvidiaHost(
        driver_version=nvidia.driver_version,
        driver_source=nvidia.source,
        cuda_driver_version=nvidia.cuda_driver_version,
        devices=devices,
        l4t_release=l4t_release,
        datacenter_gpu=bool(names) and all(gpu_datacenter(name) for name in names),
        tegra_gpu=next((name for name in names if is_tegra_gpu_name(name)), None),
    )
