"""The device probe's report (`probes/device.py`, `probe_version` 1): what torch saw inside the container.

The probe runs with the image's Python and prints one JSON document; the host validates it against
`DeviceProbeReport` before any check reads it, so a key renamed in the probe (or a report forged by a
package in the image) is a failed device stage naming the field, never a silently missing fact.
The probe reports failures as data: a key it could not fill is absent (or holds an `error` string),
which is why most fields are optional.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from orchestrator.model.recorded import Recorded


class VisibleNodes(Recorded):
    """Device nodes the container can see (before torch is imported)."""

    nvidia: list[str]
    nvidiactl: bool
    kfd: bool
    dri_render: list[str]
    proc_driver_nvidia: str | None


class TorchBuild(Recorded):
    version: str
    cuda: str | None
    hip: str | None
    #: cuDNN's version number, None without cuDNN, or "error: …" when asking failed.
    cudnn: int | str | None = None


class Accelerator(Recorded):
    available: bool
    device_count: int


class DeviceEntry(Recorded):
    """One GPU as torch sees it, or only `index` and `error` when its properties could not be read."""

    index: int
    name: str | None = None
    capability: str | None = None
    gcn_arch: str | None = None
    total_memory: int | None = None
    multiprocessors: int | None = None
    arch_supported: bool | None = Field(default=None, description="None when torch reported no arch list.")
    error: str | None = None


class OpResult(Recorded):
    """One computation on the device against float64 on the CPU: its largest difference, or its error."""

    ok: bool
    max_abs_diff: float | None = None
    seconds: float | None = None
    error: str | None = None


class Compute(Recorded):
    device: str
    rtol: float
    atol: float
    matmul: OpResult | None = None
    conv2d: OpResult | None = None


class DeviceProbeReport(Recorded):
    probe: Literal["device"]
    probe_version: Literal[1]
    expect: dict[str, Any]
    python: str
    visible: VisibleNodes
    env: dict[str, str]
    torch_error: str | None = None
    torch: TorchBuild | None = None
    cuda_error: str | None = None
    accelerator: Accelerator | None = None
    #: torch's CPU kernel level (DEFAULT, AVX2, AVX512, …), or "error: …".
    cpu_capability: str | None = None
    arch_list: list[str] | None = None
    devices: list[DeviceEntry] | None = None
    compute: Compute | None = None
    #: torch's warnings and the end of what the runtimes wrote to stderr while the probe ran.
    warnings: list[str] | None = None
    stderr: str | None = None


#: What the device stage keeps of the probe's report as its facts (see `model.facts.DeviceFacts`).
DEVICE_FACTS = (
    "torch",
    "accelerator",
    "devices",
    "arch_list",
    "visible",
    "env",
    "compute",
    "cpu_capability",
    "warnings",
    "stderr",
)
