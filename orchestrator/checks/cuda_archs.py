"""GPU archs of a compiled CUDA extension: what the dossier asked, and whether a given GPU can run the result.

Pure. The archs compiled in are read from the object's .nv_fatbin section by the inventory probe
('sm_80' machine code, 'compute_90' PTX); here they meet the dossier's TORCH_CUDA_ARCH_LIST and a device.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.checks.arch_coverage import cuda_arch_coverage


def expected_archs(cuda_archs: Sequence[str]) -> list[str]:
    """What torch.utils.cpp_extension compiles for a TORCH_CUDA_ARCH_LIST: '8.0' gives sm_80 machine code,
    '9.0+PTX' sm_90 machine code and compute_90 PTX."""
    found: set[str] = set()
    for entry in cuda_archs:
        number = entry.removesuffix("+PTX").replace(".", "")
        found.add(f"sm_{number}")
        if entry.endswith("+PTX"):
            found.add(f"compute_{number}")
    return sort_archs(found)


def sort_archs(archs: Sequence[str] | set[str]) -> list[str]:
    return sorted(archs, key=lambda name: (int(re.sub(r"\D", "", name) or 0), name))


def arch_gap(device_arch: str, compiled: Sequence[str]) -> str | None:
    """Why code compiled for `compiled` cannot run on `device_arch` ('sm_90'), or None when it can, or when
    nothing is known (a CPU-only object). CUDA's rules (machine code within a major, PTX JIT upwards,
    arch-specific variants exact) are arch_coverage's, the same the host stage applies to torch's own list."""
    digits = device_arch.removeprefix("sm_")
    if not compiled or not device_arch.startswith("sm_") or not digits.isdigit() or len(digits) < 2:
        return None
    finding = cuda_arch_coverage(compiled, device_arch, f"{digits[:-1]}.{digits[-1]}")
    if finding.coverage != "none":
        return None
    machine = [arch for arch in compiled if arch.startswith("sm_")]
    ptx = [arch for arch in compiled if arch.startswith("compute_")]
    built = ", ".join(machine) or "PTX only"
    tail = "no PTX" if not ptx else f"its PTX ({', '.join(ptx)}) is for newer GPUs"
    return f"built for {built}, this GPU is {device_arch}, {tail}"
