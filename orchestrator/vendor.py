"""The vendor data tables in `orchestrator/data/`: each file read once, here, and validated by its pydantic model.

The facts live in JSON with their sources noted; this module only reads them. Nothing here decides
policy: the dossier's coherence checks, the renderer, the host verdicts (CUDA ↔ driver, ROCm KMD) and the
failure catalogue ask these questions. `TABLES` names every file and its model; a file that does not fit
its model is a bug in orch's data and fails at the first read (and in tests/unit/test_vendor_tables.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Literal, TypeVar

from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.model.image_ref import split_reference
from orchestrator.model.platform import Platform
from orchestrator.resources import data_json

# ----------------------------------------------------------------------------------------------- schemas


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class _File(_Row):
    #: Where the facts come from (every table says so).
    source: str = Field(alias="_source")


class TorchPlatformRow(_Row):
    cuda: tuple[str, ...]
    rocm: tuple[str, ...]
    pypi_cuda: str | None = None
    min_python: str


class TorchPlatformsFile(_File):
    index_url_template: str = Field(pattern=r"\{tag\}")
    releases: dict[str, TorchPlatformRow]


class BaseImageRow(_Row):
    key: str
    platform: Platform | None
    backend_version: str | None
    ref: str
    digest: str | None = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    os: str
    glibc: str
    python_versions: tuple[str, ...]
    python_source: Literal["apt", "image"]
    default: bool


class BaseImagesFile(_File):
    images: tuple[BaseImageRow, ...]


class CudaReleaseRow(_Row):
    cuda: str
    release: str
    linux_driver: str
    source: str


class MinorCompatRow(_Row):
    floor: str | None
    note: str


class CudaDriverFile(_File):
    releases_note: str = Field(alias="_releases_note")
    releases: tuple[CudaReleaseRow, ...]
    #: CUDA major ("12") → its minor-version-compatibility floor.
    minor_compat: dict[str, MinorCompatRow]


class FailureExampleRow(_Row):
    message: str
    source: str


#: The error vocabularies a cause is keyed on: the CUDA runtime's and driver's, HIP's, NVML's and HSA's numbered
#: errors, the CUDA libraries' status names (NVRTC, cuDNN, cuBLAS: matched by name only, their numbers are too
#: small to tell apart in text), and the start errors of the NVIDIA container toolkit, CDI and the Docker daemon
#: (strings in their sources).
FailureCodeKind = Literal[
    "cudaError_t",
    "CUresult",
    "hipError_t",
    "nvmlReturn_t",
    "hsa_status_t",
    "nvrtcResult",
    "cudnnStatus_t",
    "cublasStatus_t",
    "start-error",
]


class FailureCodeRow(_Row):
    """One vendor error that identifies the cause, in whatever wording a tool prints it: its enum name, its
    number (numbered kinds only, matched next to the vendor's word, "CUDA error 35"), its error string."""

    kind: FailureCodeKind
    name: str | None = None
    number: int | None = None
    #: The vendor's own error string (cudaGetErrorString, hipGetErrorString, nvmlErrorString, a format string).
    text: str | None = None


class FailureRow(_Row):
    id: str
    layer: Literal["host", "image", "device", "sample"]
    #: For a version mismatch between two layers (a host driver older than the image's CUDA), or a symptom whose
    #: cause lies in one of two, the other layer the same message may be fixed in: the message cannot tell them
    #: apart, so orch names both.
    other_layer: Literal["host", "image", "device"] | None = None
    #: Where the cause shows: a container's start (the daemon / runtime), a probe in the image, a captured command.
    appears_in: tuple[Literal["container-start", "probe", "captured-command"], ...] = Field(min_length=1)
    #: The vendor errors that identify the cause across tools and wordings.
    codes: tuple[FailureCodeRow, ...] = ()
    #: Further wordings (Python regular expressions), for causes a tool reports in its own words.
    patterns: tuple[str, ...] = ()
    #: Wordings of the cause's idea rather than of one tool ("cuDNN … version … but …", "dkms … failed"), for
    #: messages in words nobody has collected yet. Tried only when no entry's codes or patterns match the text, so
    #: a known wording is always explained by its own entry and a broad one never adds a second cause to it.
    broad_patterns: tuple[str, ...] = ()
    cause: str
    next_step: str
    #: Where the codes are defined: the vendor's error list or source file.
    vendor_sources: tuple[str, ...] = Field(min_length=1)
    examples: tuple[FailureExampleRow, ...] = Field(min_length=1)


class FailuresFile(_Row):
    about: str = Field(alias="_about")
    entries: tuple[FailureRow, ...]


class InstallerWheelRow(_Row):
    file: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class InstallerRow(_Row):
    version: str
    #: machine (`x86_64`) → its wheel.
    wheels: dict[str, InstallerWheelRow]


class InstallersFile(_File):
    uv: InstallerRow


class AmdGpuIdRow(_Row):
    gfx_target: str
    family: str


class AmdGpuIdsFile(_File):
    use: str = Field(alias="_use")
    #: PCI device id (`0x67a0`) → its gfx target.
    devices: dict[str, AmdGpuIdRow]


class RocmKmdSupportFile(_File):
    #: KMD (amdgpu DKMS) ROCm release → the user-space releases AMD tested with it.
    kmd: dict[str, tuple[str, ...]]


class NvidiaGpuClassesFile(_File):
    #: Whole-word, case-insensitive regular expressions on a GPU's marketing name: not a data-centre part.
    consumer: tuple[str, ...] = Field(min_length=1)
    #: The same, for data-centre parts (checked after `consumer`).
    datacenter: tuple[str, ...] = Field(min_length=1)


#: Every file in orchestrator/data/ and the model it must fit.
TABLES: dict[str, type[_Row]] = {
    "torch_platforms.json": TorchPlatformsFile,
    "base_images.json": BaseImagesFile,
    "cuda_driver.json": CudaDriverFile,
    "failures.json": FailuresFile,
    "installers.json": InstallersFile,
    "amd_gpu_ids.json": AmdGpuIdsFile,
    "rocm_kmd_support.json": RocmKmdSupportFile,
    "nvidia_gpu_classes.json": NvidiaGpuClassesFile,
}

_T = TypeVar("_T", bound=_Row)


@cache
def _read(name: str) -> _Row:
    return TABLES[name].model_validate(data_json(name))


def table(name: str, model: type[_T]) -> _T:
    """The file `name` of orchestrator/data/, validated by `model` (read once per process)."""
    if TABLES.get(name) is not model:
        raise KeyError(f"{name} is not read as {model.__name__} (see vendor.TABLES)")
    found = _read(name)
    assert isinstance(found, model)
    return found


def torch_platforms() -> TorchPlatformsFile:
    return table("torch_platforms.json", TorchPlatformsFile)


def base_images_file() -> BaseImagesFile:
    return table("base_images.json", BaseImagesFile)


def cuda_driver_table() -> CudaDriverFile:
    return table("cuda_driver.json", CudaDriverFile)


def failure_rows() -> tuple[FailureRow, ...]:
    return table("failures.json", FailuresFile).entries


def amd_gpu_ids() -> dict[str, AmdGpuIdRow]:
    """PCI device id (`0x67a0`) → gfx target, for KFD nodes without `gfx_target_version`."""
    return table("amd_gpu_ids.json", AmdGpuIdsFile).devices


def rocm_kmd_support() -> dict[str, tuple[str, ...]]:
    """KMD (amdgpu DKMS) ROCm release → the user-space releases AMD tested with it."""
    return table("rocm_kmd_support.json", RocmKmdSupportFile).kmd


@dataclass(frozen=True)
class GpuClasses:
    consumer: re.Pattern[str]
    datacenter: re.Pattern[str]


@cache
def nvidia_gpu_classes() -> GpuClasses:
    """The consumer and data-centre name patterns of nvidia_gpu_classes.json, each one whole-word regex."""
    rows = table("nvidia_gpu_classes.json", NvidiaGpuClassesFile)

    def words(patterns: tuple[str, ...]) -> re.Pattern[str]:
        return re.compile(r"\b(?:" + "|".join(patterns) + r")\b", re.IGNORECASE)

    return GpuClasses(consumer=words(rows.consumer), datacenter=words(rows.datacenter))


# ---------------------------------------------------------------------------------------- typed views


@dataclass(frozen=True)
class TorchRelease:
    series: str
    cuda: tuple[str, ...]
    rocm: tuple[str, ...]
    pypi_cuda: str | None
    min_python: str


@dataclass(frozen=True)
class BaseImageInfo:
    key: str
    platform: Platform | None
    backend_version: str | None
    ref: str
    digest: str | None
    os: str
    glibc: str
    python_versions: tuple[str, ...]
    #: "apt": the template installs pythonX.Y with the image's apt; "image": the image already has it.
    python_source: Literal["apt", "image"]
    default: bool


@cache
def torch_releases() -> dict[str, TorchRelease]:
    return {
        series: TorchRelease(
            series=series, cuda=row.cuda, rocm=row.rocm, pypi_cuda=row.pypi_cuda, min_python=row.min_python
        )
        for series, row in torch_platforms().releases.items()
    }


def torch_release(version: Version) -> TorchRelease | None:
    return torch_releases().get(f"{version.major}.{version.minor}")


def torch_index_url(tag: str) -> str:
    return torch_platforms().index_url_template.format(tag=tag)


def torch_local_tag(platform: Platform, backend_version: str | None) -> str:
    """The local version label torch's own index uses for a platform: cpu, cu124, rocm6.2."""
    if platform == "cpu":
        return "cpu"
    assert backend_version is not None
    if platform == "cuda":
        return "cu" + backend_version.replace(".", "")
    return "rocm" + backend_version


@cache
def base_images() -> tuple[BaseImageInfo, ...]:
    return tuple(BaseImageInfo(**row.model_dump()) for row in base_images_file().images)


def default_base_image(platform: Platform, backend_version: str | None) -> BaseImageInfo | None:
    for image in base_images():
        if image.default and image.platform == platform and image.backend_version == backend_version:
            return image
    return None


def find_base_image(ref: str) -> BaseImageInfo | None:
    """The table's row for an image reference (tag form; a digest suffix is ignored)."""
    name, tag, _ = split_reference(ref)
    bare = f"{name}:{tag}" if tag is not None else name
    for image in base_images():
        if image.ref == bare:
            return image
    return None


@dataclass(frozen=True)
class InstallerWheel:
    """The pinned wheel of an installer the builder stage runs (uv), collected like a locked wheel."""

    name: str
    version: str
    machine: str
    file_name: str
    sha256: str

    @property
    def binary(self) -> str:
        """Where the executable lies once the wheel is unpacked (a wheel's `.data/scripts` folder)."""
        return f"{self.name}-{self.version}.data/scripts/{self.name}"


def uv_wheel(machine: str = "x86_64") -> InstallerWheel | None:
    """uv's pinned wheel for `machine`, or None when the table has none for it."""
    row = table("installers.json", InstallersFile).uv
    wheel = row.wheels.get(machine)
    if wheel is None:
        return None
    return InstallerWheel(name="uv", version=row.version, machine=machine, file_name=wheel.file, sha256=wheel.sha256)
