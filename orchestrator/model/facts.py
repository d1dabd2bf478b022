"""Each stage's facts in `report.json`, typed per stage (image, host, device, sample).

Facts are what a stage saw, kept beside its checks for people and for `orch compare`. Every key a stage
may record is a declared field here, so a fact that `orch compare` reads is a field mypy knows, and a
stage that records an undeclared key fails its unit test instead of writing it. A stage records only
the facts it got to (a failed stage records a few): absent keys stay absent in `report.json`, and the
keys keep the order the stage recorded them in (`Recorded`), so the file reads as it always did.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from orchestrator.model.build_record import CacheStats, ImageLayer
from orchestrator.model.device import Accelerator, Compute, DeviceEntry, TorchBuild, VisibleNodes
from orchestrator.model.host import AmdDriverFacts, CompatVerdict, CpuFacts, DockerGpuFacts, NvidiaDriverFacts
from orchestrator.model.recorded import Recorded


class ImageStageFacts(Recorded):
    image: str | None = None
    tags: list[str] | None = None
    size_bytes: int | None = None
    inventory_source: str | None = None
    python: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    torch_hip: str | None = None
    cuda_toolkit: str | None = None
    rocm: str | None = None
    os: str | None = None
    #: How many Python packages the image holds (`pip freeze`). A list of `pip freeze` lines is read too
    #: (`orch compare` then compares packages from the report alone).
    packages: int | list[str] | None = None
    os_packages: int | None = None
    build_seconds: float | None = None
    built: str | None = None
    #: Only after a failed build (`orch rebuild`): the build's log file and its layer-cache counts.
    build_log: str | None = None
    cache: CacheStats | None = None
    #: The image's layers with their sizes, oldest first, from build.json of this image (when it has them).
    layers: list[ImageLayer] | None = None


class GpuSelectionFacts(Recorded):
    all: bool
    indices: list[int] = Field(default_factory=list)
    device_ids: list[str] = Field(default_factory=list)
    devices: list[str] = Field(default_factory=list)
    reason: str = ""
    notes: list[str] = Field(default_factory=list)


class HostStageFacts(Recorded):
    kernel: str | None = None
    nvidia: NvidiaDriverFacts | None = None
    amd: AmdDriverFacts | None = None
    docker: DockerGpuFacts | None = None
    kfd_present: bool | None = None
    cpu: CpuFacts | None = None
    gpu_mapping: str | None = None
    #: Which GPUs were mapped and why (`--gpus`, a scheduler's allocation, or all).
    gpu_selection: GpuSelectionFacts | None = None
    #: An NVIDIA Jetson's L4T release.
    l4t_release: str | None = None
    notes: list[str] | None = None
    compatibility: CompatVerdict | None = None


class DeviceStageFacts(Recorded):
    """The device probe's report (`model.device.DEVICE_FACTS`), how the GPUs were mapped, and in host mode the Python."""

    torch: TorchBuild | None = None
    accelerator: Accelerator | None = None
    devices: list[DeviceEntry] | None = None
    arch_list: list[str] | None = None
    visible: VisibleNodes | None = None
    env: dict[str, str] | None = None
    compute: Compute | None = None
    cpu_capability: str | None = None
    gpu_mapping: str | None = None
    python: str | None = None
    #: torch's warnings and the end of the runtimes' stderr during the probe.
    warnings: list[str] | None = None
    stderr: str | None = None
    #: Known failures in them (or in a probe that died), explained by the failure catalogue.
    explanations: list[dict[str, str]] | None = None
    #: Only when the device stage stopped before starting a container: the host stage's verdict.
    compatibility: CompatVerdict | None = None


class Fingerprint(Recorded):
    expected: str
    observed: str


class LogCut(Recorded):
    """Bytes of the sample's output left out of sample.log (it is capped)."""

    stdout: int
    stderr: int


class SampleStageFacts(Recorded):
    ran: bool | None = None
    command: list[str] | None = None
    exit_code: int | None = None
    seconds: float | None = None
    output_folder: str | None = None
    log: str | None = None
    fingerprints: dict[str, Fingerprint] | None = None
    log_cut_bytes: LogCut | None = None
    #: What the probe site applied (determinism.json, written inside the image: any JSON object), or why
    #: there is none.
    determinism: dict[str, Any] | str | None = None


StageFacts = ImageStageFacts | HostStageFacts | DeviceStageFacts | SampleStageFacts

FACTS_BY_STAGE: dict[str, type[StageFacts]] = {
    "image": ImageStageFacts,
    "host": HostStageFacts,
    "device": DeviceStageFacts,
    "sample": SampleStageFacts,
}
