"""Cross-field rules that need vendor facts: torch ↔ CUDA/ROCm index, Python ↔ torch ↔ base image.

Each rule returns an `Incoherence` (field path + message listing the valid choices) instead of raising,
so the loader decides how to report it and the rules stay pure and testable on their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from orchestrator import vendor
from orchestrator.dossier.extensions import BuildSpec
from orchestrator.dossier.lock import Lock
from orchestrator.dossier.models import BaseImageSpec, PythonSpec, SystemSpec
from orchestrator.model.image_ref import split_reference
from orchestrator.model.platform import Platform


@dataclass(frozen=True)
class Incoherence:
    field: str
    message: str


@dataclass(frozen=True)
class ResolvedBaseImage:
    """The base image a build will start FROM, with what orch knows about it."""

    ref: str
    digest: str | None
    image_id: str | None
    python_versions: tuple[str, ...]
    python_source: str  # "apt" | "image"
    glibc: str | None
    from_table: bool
    #: The distribution ('debian-12', 'ubuntu-22.04') when orch's table knows the image; None otherwise.
    os: str | None = None

    @property
    def from_line(self) -> str:
        return f"{self.ref}@{self.digest}" if self.digest else self.ref

    @property
    def has_nvcc(self) -> bool:
        """NVIDIA's devel images (nvidia/cuda:<version>-[cudnn-]devel-<os>) carry nvcc in /usr/local/cuda;
        runtime images and orch's local Debian base do not."""
        repository, tag, _ = split_reference(self.ref)
        return repository.endswith("nvidia/cuda") and "-devel-" in f"-{tag or ''}-"


def _versions(values: tuple[str, ...]) -> str:
    return ", ".join(values) if values else "none"


def resolve_base_image(system: SystemSpec) -> ResolvedBaseImage | Incoherence:
    spec: BaseImageSpec | None = system.base_image
    if spec is None:
        row = vendor.default_base_image(system.platform, system.version)
        if row is None:
            known = sorted(
                f"{image.platform} {image.backend_version}"
                for image in vendor.base_images()
                if image.default and image.platform == system.platform
            )
            return Incoherence(
                "system.base_image",
                f"orch has no default base image for {system.platform} {system.version}; "
                f"defaults exist for: {', '.join(known) or 'none'}. Set system.base_image.ref.",
            )
        return ResolvedBaseImage(
            ref=row.ref,
            digest=row.digest,
            image_id=None,
            python_versions=row.python_versions,
            python_source=row.python_source,
            glibc=row.glibc,
            from_table=True,
            os=row.os,
        )
    row = vendor.find_base_image(spec.ref)
    if row is None:
        if spec.python is None:
            return Incoherence(
                "system.base_image.python",
                f"{spec.ref} is not in orch's base-image table, so orch cannot know its Python; "
                "state it with system.base_image.python (e.g. '3.11')",
            )
        return ResolvedBaseImage(
            ref=spec.ref,
            digest=spec.digest,
            image_id=spec.image_id,
            python_versions=(spec.python,),
            python_source="image",
            glibc=spec.glibc,
            from_table=False,
        )
    if row.platform is not None and row.platform != system.platform:
        return Incoherence(
            "system.base_image.ref",
            f"{spec.ref} is a {row.platform} image but the dossier's platform is {system.platform}",
        )
    versions = (spec.python,) if spec.python else row.python_versions
    return ResolvedBaseImage(
        ref=row.ref,
        digest=spec.digest or row.digest,
        image_id=spec.image_id,
        python_versions=versions,
        python_source=row.python_source,
        glibc=spec.glibc or row.glibc,
        from_table=True,
        os=row.os,
    )


def _images_with_python(version: str, platform: Platform) -> list[str]:
    """Base images of orch's table that carry `version`, for `platform` or for any platform."""
    rows = [
        image
        for image in vendor.base_images()
        if version in image.python_versions and image.platform in (platform, None)
    ]
    return [
        f"{image.ref} ({image.platform} {image.backend_version})"
        if image.platform and image.backend_version
        else f"{image.ref} ({image.platform or 'any platform'}, {image.os})"
        for image in rows
    ]


def check_python_fits_image(
    python: PythonSpec, image: ResolvedBaseImage, system: SystemSpec | None = None
) -> Incoherence | None:
    if python.version in image.python_versions:
        return None
    message = (
        f"Python {python.version} does not fit base image {image.ref}, which provides "
        f"{_versions(image.python_versions)}"
    )
    if image.python_versions:
        message += f". Either set python.version to {' or '.join(image.python_versions)}"
    if system is not None:
        carriers = _images_with_python(python.version, system.platform)
        if carriers:
            message += (
                f", or set system.base_image.ref to a base image with Python {python.version}: {', '.join(carriers)}"
            )
        else:
            message += (
                f"; no base image in orch's table carries Python {python.version} for {system.platform}: set "
                "system.base_image.ref to one that does and state system.base_image.python"
            )
    return Incoherence("python.version", message)


def check_torch(system: SystemSpec, python: PythonSpec, lock: Lock) -> Incoherence | None:
    """The torch pinned in the lock must exist as a build for the dossier's platform and version."""
    torch = lock.get("torch")
    if torch is None:
        return None
    field = "python.requirements"
    release = vendor.torch_release(torch.version)
    known = sorted(vendor.torch_releases(), key=Version)
    if release is None:
        return Incoherence(
            field, f"torch {torch.version} is not in orch's torch table; known series: {', '.join(known)}"
        )
    if Version(python.version) < Version(release.min_python):
        return Incoherence(
            "python.version",
            f"torch {release.series} needs Python ≥ {release.min_python}, got {python.version}",
        )
    local = torch.version.local
    public = torch.version.public
    expected_tag = vendor.torch_local_tag(system.platform, system.version)
    if system.platform == "cpu":
        if local != "cpu":
            return Incoherence(
                field,
                f"torch=={torch.version} (lock line {torch.line}) is not a CPU build: pin torch=={public}+cpu "
                f"from {vendor.torch_index_url('cpu')}",
            )
        return None
    offered = release.cuda if system.platform == "cuda" else release.rocm
    if local is None:
        if system.platform == "cuda" and release.pypi_cuda == system.version:
            return None  # PyPI's own wheel is built for exactly this CUDA.
        pypi = f"PyPI's torch {public} is built for CUDA {release.pypi_cuda}"
        if system.version in offered:
            return Incoherence(
                field,
                f"{pypi}, not {system.platform} {system.version}; pin torch=={public}+{expected_tag} "
                f"(offered for {system.platform}: {_versions(offered)})",
            )
        return Incoherence(
            field,
            f"{pypi}, not {system.platform} {system.version}, and torch {release.series} has no "
            f"{system.platform} {system.version} build. {_backend_choices(system, release, str(public))}",
        )
    if local != expected_tag:
        return Incoherence(
            field,
            f"torch=={torch.version} is a {local} build but the dossier's platform is "
            f"{system.platform} {system.version} (expected +{expected_tag})",
        )
    if system.version not in offered:
        return Incoherence(
            "system.version",
            f"torch {release.series} has no {system.platform} {system.version} build; "
            f"{system.platform} versions for torch {release.series}: {_versions(offered)}. "
            + _backend_choices(system, release, str(public)),
        )
    return None


def _series_with(platform: Platform, version: str) -> list[str]:
    """The torch series of orch's table that torch's own index builds for this CUDA or ROCm version."""
    releases = sorted(vendor.torch_releases().values(), key=lambda release: Version(release.series))
    return [r.series for r in releases if version in (r.cuda if platform == "cuda" else r.rocm)]


def _backend_choices(system: SystemSpec, release: vendor.TorchRelease, public: str) -> str:
    """The working choices when a torch release has no build for the dossier's CUDA/ROCm version (data tables)."""
    choices: list[str] = []
    if system.platform == "cuda" and release.pypi_cuda:
        choices.append(
            f"PyPI's torch {public} (no local tag) is a CUDA {release.pypi_cuda} build: set "
            f'system.version: "{release.pypi_cuda}" and pin torch=={public} without a local tag'
        )
    series = _series_with(system.platform, str(system.version))
    tag = vendor.torch_local_tag(system.platform, system.version)
    listed = ", ".join(series) or "none in the table"
    keep = f"keep {system.platform} {system.version} with a torch series that has a {system.platform} "
    keep += f"{system.version} build (torch series with a {system.platform} {system.version} build: {listed})"
    if series:
        keep += f", pinned as torch==VERSION+{tag} from {vendor.torch_index_url(tag)}"
    choices.append(keep)
    return "Working choices: " + "; or ".join(choices) + " (docs/dossier.md, Vendor tables)."


#: gcc-N/g++-N majors each distribution's own archive offers (Debian: packages.debian.org, suites
#: bookworm and trixie; Ubuntu: packages.ubuntu.com, jammy and noble; bookworm checked with apt-cache
#: policy in orch/debian-python:bookworm: gcc-11 11.3.0-12, gcc-12 12.2.0-14+deb12u1).
GCC_BY_OS: dict[str, tuple[str, ...]] = {
    "debian-12": ("11", "12"),
    "debian-13": ("13", "14"),
    "ubuntu-22.04": ("9", "10", "11", "12"),
    "ubuntu-24.04": ("9", "10", "11", "12", "13", "14"),
}


def nvcc_wheel_name(cuda_major: int) -> str:
    """NVIDIA's PyPI name for nvcc: one package per CUDA major up to 12 (-cu12), plain from 13 on."""
    return "nvidia-cuda-nvcc" if cuda_major >= 13 else f"nvidia-cuda-nvcc-cu{cuda_major}"


def _release_matches(asked: str, version: Version) -> bool:
    """'13.0' matches 13.0.x; '13.0.88' matches only 13.0.88."""
    parts = tuple(int(part) for part in asked.split("."))
    return version.release[: len(parts)] == parts


def check_cuda_toolchain(
    build: BuildSpec, system: SystemSpec, image: ResolvedBaseImage, toolchain_lock: Lock | None
) -> Incoherence | None:
    """nvcc: its major matches the platform's CUDA (torch.utils.cpp_extension refuses a mismatched major); it
    comes from a devel base, or from NVIDIA's wheels pinned in the build-only toolchain lock."""
    nvcc, field = build.toolchain.nvcc, "build.toolchain.nvcc"
    assert nvcc is not None  # the schema requires it with CUDA sources
    if system.version is None or nvcc.split(".")[0] != system.version.split(".")[0]:
        return Incoherence(
            field,
            f"nvcc {nvcc} does not build for CUDA {system.version} (system.version): torch.utils.cpp_extension "
            f"refuses a CUDA compiler of another major than torch's; choose nvcc {system.version}",
        )
    requirements = build.toolchain.requirements
    if image.has_nvcc:
        if requirements is not None:
            return Incoherence(
                "build.toolchain.requirements",
                f"{image.ref} is a CUDA devel image with its own nvcc: drop build.toolchain.requirements",
            )
        return None
    if requirements is None or toolchain_lock is None:
        return Incoherence(
            "build.toolchain.requirements",
            f"{image.ref} has no nvcc: name a lock of NVIDIA's toolchain wheels ({nvcc_wheel_name(int(nvcc.split('.')[0]))}, "
            "nvidia-cuda-runtime, and what nvcc needs) in build.toolchain.requirements, or use a "
            "nvidia/cuda devel base image",
        )
    wheel = nvcc_wheel_name(int(nvcc.split(".")[0]))
    pinned = toolchain_lock.get(wheel)
    if pinned is None:
        return Incoherence(
            "build.toolchain.requirements", f"{requirements} pins no {wheel}: the CUDA compiler comes from that wheel"
        )
    if not _release_matches(nvcc, pinned.version):
        return Incoherence(
            field,
            f"nvcc {nvcc} is asked but {requirements} line {pinned.line} pins {wheel}=={pinned.version}; "
            "make them agree",
        )
    return None


def check_build(
    build: BuildSpec | None,
    system: SystemSpec,
    image: ResolvedBaseImage,
    lock: Lock,
    toolchain_lock: Lock | None = None,
) -> Incoherence | None:
    """The extensions' toolchain against the platform, the base image's archive and the locks."""
    if build is None:
        return None
    language = build.language
    if language == "hip":
        return Incoherence(
            "build.extensions",
            "HIP extensions are not built by this orch yet (the design is hipcc from a ROCm devel base image); "
            "build C++ or CUDA sources",
        )
    if language == "cuda" and system.platform != "cuda":
        return Incoherence(
            "build.extensions", f"CUDA sources (.cu) need system.platform cuda; the dossier's is {system.platform}"
        )
    if language == "cuda":
        problem = check_cuda_toolchain(build, system, image, toolchain_lock)
        if problem is not None:
            return problem
    if lock.get("torch") is None:
        return Incoherence(
            "python.requirements", "build.extensions are built with torch.utils.cpp_extension: pin torch in the lock"
        )
    if build.toolchain.ninja and lock.get("ninja") is None:
        return Incoherence("build.toolchain.ninja", "ninja: true builds with the ninja wheel: pin ninja in the lock")
    offered = GCC_BY_OS.get(image.os or "")
    if offered is not None and build.toolchain.gcc not in offered:
        return Incoherence(
            "build.toolchain.gcc",
            f"gcc {build.toolchain.gcc} is not in {image.ref}'s archive ({image.os}); choose {' or '.join(offered)}",
        )
    return None
