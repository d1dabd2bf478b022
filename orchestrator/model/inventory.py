"""The image inventory (what the built image contains) and its diff against the reference inventory.

Pure: parsing the inventory probe's JSON and comparing `pip freeze` listings. Running the probe is the
build's job (`orchestrator.stages.build`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.model.environment import EnvironmentListing, EnvironmentSummary
from orchestrator.model.recorded import Recorded
from orchestrator.redact import redact


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PipCheck(Frozen):
    ok: bool
    lines: list[str]


class BackendFacts(Frozen):
    """CUDA/ROCm user space as the image carries it (image env and files), torch's build flags."""

    cuda_toolkit: str | None = None
    rocm: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    torch_hip: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cuda_compat_libs: list[str] = Field(default_factory=list, description="cuda-compat libcuda files in the image.")
    torch_arch_list: list[str] = Field(
        default_factory=list,
        description="torch's compiled GPU targets (sm_XX, compute_XX, gfxNNN), read without a GPU.",
    )


class BuiltExtension(Frozen):
    """A compiled extension as the inventory probe found it in the image (its bytes hashed there)."""

    name: str
    file: str
    recorded_sha256: str = Field(description="What the builder stage recorded right after building it.")
    sha256: str | None = Field(description="The file's sha256 read in the image; None when it is missing.")
    compilers: list[str] = Field(description="The ELF .comment strings: the compilers that built the object.")
    compiled_archs: list[str] = Field(
        default_factory=list,
        description="GPU code in the object's .nv_fatbin section: 'sm_XY' machine code, 'compute_XY' PTX. "
        "Empty for a CPU-only object.",
    )
    fatbin_error: str | None = Field(default=None, description="Why the .nv_fatbin section could not be read.")


class ExtensionsFacts(Frozen):
    artefacts: list[BuiltExtension]
    #: The toolchain's own `--version` lines in the builder stage (gcc, g++, nvcc).
    toolchain: dict[str, str | None]
    #: name==version of the build-only toolchain wheels (build.toolchain.requirements), in the builder stage.
    toolchain_wheels: list[str] = Field(default_factory=list)


class Inventory(Frozen):
    python_version: str
    python_executable: str
    libc: str
    pip_freeze: list[str]
    pip_check: PipCheck
    pip_inspect: dict[str, Any] | None
    os_release: dict[str, str]
    os_package_manager: str | None
    os_packages: dict[str, str]
    #: dpkg's architecture of each OS package (amd64, arm64, all), checked word by word; {} from older probes.
    os_package_architectures: dict[str, str] = Field(default_factory=dict)
    backend: BackendFacts
    errors: list[str] = Field(default_factory=list, description="Probe steps that could not report.")
    extensions: ExtensionsFacts | None = Field(default=None, description="Compiled extensions (dossier `build`).")
    environment: EnvironmentSummary | None = Field(
        default=None,
        description="The environment digest (model/environment.py); its per-file list is environment.json.",
    )


class PackageChange(Frozen):
    name: str
    reference: str
    observed: str


class InventoryDiff(Frozen):
    reference_file: str
    added: list[str]  # "name==version" present in the rebuild only
    removed: list[str]  # present in the reference only
    changed: list[PackageChange]
    #: The venv's own installer (pip) when the lock does not pin it: it comes with the interpreter that made the
    #: venv, not from the lock, so a different version is said here and not counted ("pip 23.2.1 → 23.0.1").
    installer: list[str] = Field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.changed)


def parse_freeze(lines: list[str]) -> dict[str, str]:
    """`pip freeze` lines → {canonical name: version or 'name @ url' reference}. Comments are skipped."""
    packages: dict[str, str] = {}
    for raw in lines:
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("-e") else raw.strip()
        if not line or line.startswith("-"):
            continue
        if "==" in line:
            name, _, version = line.partition("==")
            packages[canonicalize_name(name.strip())] = version.strip()
        elif " @ " in line:
            name, _, url = line.partition(" @ ")
            packages[canonicalize_name(name.strip())] = "@ " + redact(url.strip())
    return packages


def diff_inventories(
    reference: list[str], observed: list[str], reference_file: str, *, compare_installer: bool = True
) -> InventoryDiff:
    """The rebuild's `pip freeze --all` against the reference's. `compare_installer` False (the lock pins no pip):
    pip is set aside and a different version only noted, since the venv's interpreter brought it."""
    ref, obs = parse_freeze(reference), parse_freeze(observed)
    installer: list[str] = []
    if not compare_installer:
        before, after = ref.pop("pip", None), obs.pop("pip", None)
        if before != after:
            installer.append(f"pip {before or 'absent'} in the reference, {after or 'absent'} here")
    return InventoryDiff(
        installer=installer,
        reference_file=reference_file,
        added=sorted(f"{name}=={obs[name]}" for name in obs.keys() - ref.keys()),
        removed=sorted(f"{name}=={ref[name]}" for name in ref.keys() - obs.keys()),
        changed=[
            PackageChange(name=name, reference=ref[name], observed=obs[name])
            for name in sorted(ref.keys() & obs.keys())
            if ref[name] != obs[name]
        ],
    )


def parse_inventory(document: dict[str, Any]) -> Inventory:
    """The inventory probe's JSON as a typed value; missing parts become recorded errors, not crashes."""
    errors: list[str] = []
    python = document.get("python") or {}
    pip = document.get("pip") or {}
    os_section = document.get("os") or {}
    backend = document.get("backend") or {}
    for name in ("pip", "os", "backend", "extensions", "environment"):
        section = document.get(name)
        if isinstance(section, dict) and "error" in section:
            errors.append(f"{name}: {section['error']}")
    if pip.get("freeze_error"):
        errors.append(f"pip freeze: {pip['freeze_error']}")
    if pip.get("inspect_error"):
        errors.append(f"pip inspect: {pip['inspect_error']}")
    torch = backend.get("torch") or {}
    return Inventory(
        python_version=str(python.get("version", "unknown")),
        python_executable=str(python.get("executable", "unknown")),
        libc=str(python.get("libc", "")),
        pip_freeze=[redact(line) for line in pip.get("freeze") or []],
        pip_check=PipCheck(ok=bool(pip.get("check_ok")), lines=[redact(x) for x in pip.get("check_lines") or []]),
        pip_inspect=_redacted(pip.get("inspect")),
        os_release=dict(os_section.get("release") or {}),
        os_package_manager=os_section.get("package_manager"),
        os_packages=dict(os_section.get("packages") or {}),
        os_package_architectures=_architectures(os_section.get("architectures")),
        backend=BackendFacts(
            cuda_toolkit=backend.get("cuda_toolkit"),
            rocm=backend.get("rocm"),
            torch=torch.get("version"),
            torch_cuda=torch.get("cuda"),
            torch_hip=torch.get("hip"),
            env=dict(backend.get("env") or {}),
            cuda_compat_libs=list(backend.get("cuda_compat_libs") or []),
            torch_arch_list=[str(arch) for arch in backend.get("torch_arch_list") or []],
        ),
        errors=errors,
        extensions=_extensions(document.get("extensions")),
    )


#: A dpkg architecture name (amd64, arm64, i386, all, musl-linux-arm64): anything else the image printed is dropped.
_ARCHITECTURE = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{0,127}")


def _redacted(value: Any) -> Any:
    """Every string in a JSON value redacted: `pip inspect` carries direct URLs, which may hold credentials."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    return value


def _architectures(section: Any) -> dict[str, str]:
    """The probe's {package: architecture}, untrusted: only well-formed dpkg names and architectures are kept."""
    if not isinstance(section, dict):
        return {}
    return {
        name: arch
        for name, arch in section.items()
        if isinstance(name, str)
        and isinstance(arch, str)
        and _PACKAGE.fullmatch(name)
        and _ARCHITECTURE.fullmatch(arch)
    }


def _extensions(section: Any) -> ExtensionsFacts | None:
    if not isinstance(section, dict) or "error" in section:
        return None
    return ExtensionsFacts(
        artefacts=[BuiltExtension.model_validate(entry) for entry in section.get("artefacts") or []],
        toolchain={
            str(k): (None if v is None else redact(str(v))) for k, v in (section.get("toolchain") or {}).items()
        },
        toolchain_wheels=[str(wheel) for wheel in section.get("toolchain_wheels") or []],
    )


# -- the inventory probe's report (`probes/inventory.py`, probe_version 1) -------------------------------
# Validated on the host before `parse_inventory` reads it: a key renamed in the probe (or a report forged
# inside the image) fails the image stage naming the field. A section the probe could not produce is
# `{"error": "…"}`.


class SectionError(Recorded):
    error: str


class ProbePython(Recorded):
    version: str
    implementation: str
    executable: str
    prefix: str
    machine: str
    libc: str


class InstalledDistribution(Recorded):
    name: str | None
    version: str | None
    requires_dist: list[str] | None
    installer: str | None
    direct_url: dict[str, Any] | None
    requested: bool | None


class PipInspect(Recorded):
    version: str | None
    pip_version: str | None
    environment: dict[str, str] | None
    installed: list[InstalledDistribution]


class ProbePip(Recorded):
    freeze: list[str] | None
    freeze_error: str | None
    check_ok: bool
    check_lines: list[str]
    inspect: PipInspect | None
    inspect_error: str | None


class ProbeOs(Recorded):
    release: dict[str, str]
    package_manager: str | None
    packages: dict[str, str]
    #: dpkg's `Architecture` of each installed package; absent from older probes and for rpm.
    architectures: dict[str, str] | None = None


class ProbeTorch(Recorded):
    version: str | None
    cuda: str | None
    hip: str | None


class ProbeBackend(Recorded):
    cuda_toolkit: str | None
    rocm: str | None
    env: dict[str, str]
    torch: ProbeTorch | None
    cuda_compat_libs: list[str]
    #: torch's compiled GPU targets (sm_XX / compute_XX / gfxNNN), read without a GPU; absent from older probes.
    torch_arch_list: list[str] | None = None


class ProbeExtension(Recorded):
    name: str
    file: str
    recorded_sha256: str
    sha256: str | None
    compilers: list[str]
    compiled_archs: list[str]
    fatbin_error: str | None = None


class ProbeExtensions(Recorded):
    artefacts: list[ProbeExtension]
    toolchain: dict[str, str | None]
    toolchain_wheels: list[str]


class InventoryProbeReport(Recorded):
    probe: Literal["inventory"]
    probe_version: Literal[1]
    python: ProbePython
    pip: ProbePip | SectionError
    os: ProbeOs | SectionError
    backend: ProbeBackend | SectionError
    #: Only in images with compiled extensions (dossier `build`).
    extensions: ProbeExtensions | SectionError | None = None
    #: Every installed file's sha256 and their digest; absent from probes older than the digest.
    environment: EnvironmentListing | SectionError | None = None
