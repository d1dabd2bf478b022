"""Does the image's torch carry kernels for each host GPU? Read before running, confirmed by the device stage.

CUDA: torch's arch list (`torch.cuda.get_arch_list()`, or the build's `TORCH_CUDA_ARCH_LIST`) names SASS targets
(`sm_86`) and PTX targets (`compute_90`). A cubin for sm_XY runs on a GPU of the same major X with minor ≥ Y;
the arch-specific `sm_90a`/`sm_100a` variants run only on exactly that GPU. PTX for compute_XY is JIT-compiled
by the driver for any GPU ≥ X.Y (slow first run; and not at all under minor-version compatibility, which has no
PTX JIT). ROCm: code objects are per gfx target; a GPU runs only its own target (`gfx942`), and the feature
suffixes (`gfx90a:xnack-`) must not contradict it. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Coverage = Literal["sass", "ptx-jit", "none"]

_SM = re.compile(r"^sm_(\d+)(\d)([af]?)$")
_PTX = re.compile(r"^compute_(\d+)(\d)([af]?)$")


@dataclass(frozen=True)
class ArchFinding:
    gpu: str  # "GeForce RTX 5090 (sm_120)"
    coverage: Coverage
    sentence: str


def _cc(capability: str) -> tuple[int, int] | None:
    match = re.fullmatch(r"(\d+)\.(\d+)", capability.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def cuda_arch_coverage(arch_list: Sequence[str], gpu_name: str, capability: str) -> ArchFinding:
    """How an image whose torch was built for `arch_list` runs on one NVIDIA GPU of compute `capability` ("12.0")."""
    cc = _cc(capability)
    label = f"{gpu_name} (sm_{capability.replace('.', '')})"
    if cc is None:
        return ArchFinding(
            label, "none", f"{label}: compute capability {capability!r} unreadable; the device stage will tell"
        )
    sass = []
    ptx = []
    for arch in arch_list:
        if match := _SM.match(arch):
            major, minor, suffix = int(match.group(1)), int(match.group(2)), match.group(3)
            exact = (major, minor) == cc
            if exact or (not suffix and major == cc[0] and minor <= cc[1]):
                sass.append(arch)
        elif match := _PTX.match(arch):
            major, minor = int(match.group(1)), int(match.group(2))
            if (major, minor) <= cc:
                ptx.append(arch)
    if sass:
        return ArchFinding(label, "sass", f"{label}: the image has kernels for it ({', '.join(sass)}).")
    if ptx:
        best = max(ptx, key=lambda arch: tuple(int(x) for x in _PTX.match(arch).groups()[:2]))  # type: ignore[union-attr]
        return ArchFinding(
            label,
            "ptx-jit",
            f"{label}: this image has no kernels for it; PTX for {best.replace('compute_', 'sm_')} can be JIT-compiled "
            "by the driver: slow first run, and it fails under minor-version compatibility (no PTX JIT).",
        )
    listed = ", ".join(arch_list) or "none"
    return ArchFinding(
        label,
        "none",
        f"{label}: this image has no kernels for it and no PTX it could JIT (torch arch list: {listed}); kernels will "
        "fail with 'no kernel image is available for execution on the device'. Use a torch build that lists it.",
    )


def rocm_arch_coverage(arch_list: Sequence[str], gfx_target: str) -> ArchFinding:
    """How a ROCm torch built for `arch_list` (gfx targets, maybe with :xnack-/+ features) runs on `gfx_target`."""
    base = gfx_target.split(":", maxsplit=1)[0]
    matching = [arch for arch in arch_list if arch.split(":")[0] == base]
    if matching:
        return ArchFinding(
            gfx_target, "sass", f"{gfx_target}: the image has code objects for it ({', '.join(matching)})."
        )
    listed = ", ".join(arch_list) or "none"
    return ArchFinding(
        gfx_target,
        "none",
        f"{gfx_target}: this image has no code object for it (torch arch list: {listed}); HIP fails with "
        "hipErrorNoBinaryForGpu. Use a ROCm torch build that lists it (HSA_OVERRIDE_GFX_VERSION is an unsupported "
        "workaround, flagged when set).",
    )
