"""Typed views over the vendor data tables in `orchestrator/data/` (torch ↔ backend, base images).

The CUDA ↔ driver table (`cuda_driver.json`) has one reader, the NVIDIA verdict (`checks/require_cuda.py`).

The facts live in JSON with their sources noted; this module only reads them. Nothing here decides
policy: the dossier's coherence checks and the renderer ask these questions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from packaging.version import Version

from orchestrator.model.image_ref import split_reference
from orchestrator.model.platform import Platform
from orchestrator.resources import data_json


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
    raw = data_json("torch_platforms.json")["releases"]
    return {
        series: TorchRelease(
            series=series,
            cuda=tuple(row["cuda"]),
            rocm=tuple(row["rocm"]),
            pypi_cuda=row.get("pypi_cuda"),
            min_python=row["min_python"],
        )
        for series, row in raw.items()
    }


def torch_release(version: Version) -> TorchRelease | None:
    return torch_releases().get(f"{version.major}.{version.minor}")


def torch_index_url(tag: str) -> str:
    template: str = data_json("torch_platforms.json")["index_url_template"]
    return template.format(tag=tag)


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
    return tuple(
        BaseImageInfo(
            key=row["key"],
            platform=row["platform"],
            backend_version=row["backend_version"],
            ref=row["ref"],
            digest=row["digest"],
            os=row["os"],
            glibc=row["glibc"],
            python_versions=tuple(row["python_versions"]),
            python_source=row["python_source"],
            default=row["default"],
        )
        for row in data_json("base_images.json")["images"]
    )


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
    row = data_json("installers.json")["uv"]
    wheel = row["wheels"].get(machine)
    if wheel is None:
        return None
    return InstallerWheel(
        name="uv", version=row["version"], machine=machine, file_name=wheel["file"], sha256=wheel["sha256"]
    )
