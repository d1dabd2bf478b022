"""Typed host facts, as the host probe reports them (the report's **host** section)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NvidiaGpu(Frozen):
    index: int
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total_mib: int | None = None
    compute_capability: str | None = None  # "9.0"


class NvidiaDriverFacts(Frozen):
    #: Where the facts came from, best first: NVML, nvidia-smi, /sys/module, /proc/driver; "l4t": a Jetson's
    #: kernel module, whose version is its L4T release (the driver is part of L4T).
    source: Literal["nvml", "nvidia-smi", "sysfs", "procfs", "l4t"]
    #: The driver version ("550.54.15"); on a Jetson read from its module, its L4T release ("L4T R35.3.1").
    driver_version: str | None
    #: The newest CUDA the driver supports (NVML / nvidia-smi banner), e.g. "12.4"; not a toolkit.
    cuda_driver_version: str | None = None
    kernel_module: Literal["open", "proprietary"] | None = None
    gpus: list[NvidiaGpu] = Field(default_factory=list)


class AmdGpu(Frozen):
    node: int
    gfx_target: str  # "gfx942"
    vendor_id: int | None = None
    device_id: int | None = None
    unique_id: str | None = None
    vram_bytes: int | None = None
    name: str | None = None


class AmdDriverFacts(Frozen):
    #: "rocminfo": the GPUs were known only from rocminfo's output (a capture without the KFD topology), so a
    #: None driver_version means *unknown*, not the in-tree driver.
    source: Literal["amd-smi", "rocm-smi", "sysfs", "kfd", "rocminfo"]
    #: DKMS amdgpu version (/sys/module/amdgpu/version); None with the in-tree driver, which is not an error.
    driver_version: str | None
    rocm_version: str | None = None
    gpus: list[AmdGpu] = Field(default_factory=list)


class DockerGpuFacts(Frozen):
    """What the container engine offers for GPUs (Docker's daemon or Podman's API service)."""

    runtimes: list[str]
    nvidia_runtime: bool
    cdi_spec_dirs: list[str] = Field(default_factory=list)
    cdi_devices: list[str] = Field(default_factory=list)  # e.g. "nvidia.com/gpu=all" found in CDI specs
    #: "docker" or "podman" (EngineInfo.kind): Podman maps GPUs through CDI only, never an nvidia runtime request.
    engine_kind: Literal["docker", "podman"] = "docker"
    #: The engine resolves CDI device names: Docker when it lists CDI spec dirs (CDI on; default since 28.2),
    #: Podman always (since 4.1, reading /etc/cdi and /var/run/cdi).
    cdi_enabled: bool = False
    #: The engine runs rootless (Podman as a user; rootless Docker): EngineInfo.rootless.
    rootless: bool = False


class CpuFacts(Frozen):
    """The host CPU as /proc/cpuinfo describes it: float results of the same image differ between CPUs that
    offer different vector units (AVX2 vs AVX-512, AMX), so the report records them."""

    model: str | None
    vendor: str | None
    logical_cpus: int
    #: The instruction-set flags that decide which kernels torch and oneDNN pick, in a fixed order.
    isa_flags: list[str] = Field(default_factory=list)


class HostFacts(Frozen):
    kernel: str
    nvidia: NvidiaDriverFacts | None
    amd: AmdDriverFacts | None
    docker: DockerGpuFacts | None
    kfd_present: bool = False
    dri_render_nodes: list[str] = Field(default_factory=list)
    video_gid: int | None = None
    render_gid: int | None = None
    cpu: CpuFacts | None = None
    #: An NVIDIA Jetson's L4T release ("R35.3.1", /etc/nv_tegra_release); None on other hosts.
    l4t_release: str | None = None
    #: What each source said when it could not answer ("nvidia-smi: not found"), for the report.
    notes: list[str] = Field(default_factory=list)


CompatStatus = Literal[
    "supported",  # driver ≥ the toolkit's bundled driver
    "minor-version-compat",  # floor ≤ driver < bundled: runs, without PTX JIT and newer-driver APIs
    "forward-compat-possible",  # driver too old, but a data-center GPU on an eligible branch with cuda-compat
    "unsupported",  # driver too old
    "no-driver",  # the image needs a GPU driver and the host has none
    "not-applicable",  # CPU image
    "unknown",  # the image states no requirement orch can read
    "refused-by-toolkit",  # the NVIDIA container toolkit would refuse to start it (NVIDIA_REQUIRE_CUDA)
    "jetson",  # an NVIDIA Jetson: its driver is part of L4T; the desktop/data-centre table does not apply
]


class CompatVerdict(Frozen):
    status: CompatStatus
    explanation: str
    image_requirement: str | None = None  # "cuda>=12.4" or "ROCm 6.2"
    host_driver: str | None = None
