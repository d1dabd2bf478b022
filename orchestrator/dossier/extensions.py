"""The dossier's `build` section: compiled extensions, their toolchain, target architectures and own check.

Part of the dossier schema (`models.Dossier.build`); kept in its own module because it is a section of
its own, read by the planner (builder-stage toolchain), the inventory and the device stage's check.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from orchestrator.dossier.fields import RelativePath, StrictModel

# -- compiled extensions --------------------------------------------------------------------------------

#: What a Python module name and a torch extension name may be: the extension is imported by it.
ModuleName = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z_][a-z0-9_]{0,62}$"),
    Field(description="A Python module name (lower case): the extension is built and imported under it."),
]
#: A CUDA compute capability as TORCH_CUDA_ARCH_LIST writes it ('8.0', '9.0', '9.0+PTX').
CudaArch = Annotated[str, StringConstraints(pattern=r"^\d{1,2}\.\d(\+PTX)?$")]
#: A ROCm GPU target as PYTORCH_ROCM_ARCH writes it ('gfx90a', 'gfx942').
RocmArch = Annotated[str, StringConstraints(pattern=r"^gfx[0-9a-f]{3,4}$")]


class ToolchainSpec(StrictModel):
    """The compilers that build the extensions, in the builder stage only (unless keep_toolchain)."""

    gcc: str = Field(
        pattern=r"^\d{1,2}$",
        description="Major version of Debian's/Ubuntu's gcc and g++ (packages gcc-N, g++-N), e.g. '12'. "
        "Checked against the base image's distribution.",
    )
    nvcc: str | None = Field(
        default=None,
        pattern=r"^\d+\.\d+(\.\d+)?$",
        description="CUDA compiler version: '13.0' (any 13.0.x) or exact ('13.0.88'). On a CUDA devel base the "
        "image's nvcc must report it; otherwise the nvcc wheel pinned in toolchain.requirements "
        "(nvidia-cuda-nvcc for CUDA 13, nvidia-cuda-nvcc-cu12 for 12.x) must be that version. "
        "Required for CUDA sources, refused for others.",
    )
    requirements: RelativePath | None = Field(
        default=None,
        description="Build-only lock (pip format, --hash on every line) of NVIDIA's toolchain wheels: nvcc, "
        "the CUDA runtime headers and what nvcc needs (crt, nvvm). Collected into the wheelhouse like "
        "python.requirements, installed in the builder stage only, never in the runtime image. Required for "
        "CUDA sources on a base without nvcc (orch's local Debian base, a CUDA runtime image); refused on a "
        "CUDA devel base (its nvcc is used) and for C++-only builds.",
    )
    hipcc: str | None = Field(
        default=None,
        pattern=r"^\d+\.\d+(\.\d+)?$",
        description="ROCm compiler version (from the ROCm devel image). Required for HIP sources.",
    )
    ninja: bool = Field(
        default=False,
        description="Build with ninja (from the lock's ninja wheel) instead of setuptools' compiler loop.",
    )


class ExtensionCheck(StrictModel):
    """The extension's own check, in the device stage after the minimal compute and before the sample.

    orch imports the extension, calls `function` on seeded float32 inputs made on the device, calls
    `reference` (a pure-PyTorch implementation in the code folder, 'module:function') on the same inputs,
    and compares them element-wise: |observed - reference| <= atol + rtol * |reference|.
    """

    function: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = Field(
        description="The operator's name in the extension module."
    )
    reference: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$",
        description="The pure-PyTorch equivalent, 'module:function', importable from the code folder.",
    )
    inputs: list[list[Annotated[int, Field(ge=1, le=65_536)]]] = Field(
        min_length=1,
        max_length=16,
        description="Shape of each input tensor (float32, normal values from a generator seeded with 0).",
    )
    rtol: float = Field(default=1e-5, ge=0)
    atol: float = Field(default=1e-6, ge=0)
    justification: str = Field(min_length=10, description="Why this tolerance fits: stated before the check runs.")

    @field_validator("inputs")
    @classmethod
    def _small(cls, inputs: list[list[int]]) -> list[list[int]]:
        for shape in inputs:
            size = 1
            for dim in shape:
                size *= dim
            if size > 16_777_216:
                raise ValueError(f"input shape {shape} has more than 16,777,216 elements: a check is small")
        return inputs


class ExtensionSpec(StrictModel):
    """One compiled torch extension, built with torch.utils.cpp_extension from sources in the code folder."""

    name: ModuleName
    sources: list[RelativePath] = Field(
        min_length=1,
        description="Source files relative to the code folder: .cpp/.cc for C++, .cu for CUDA, .hip for HIP.",
    )
    include_dirs: list[RelativePath] = Field(default_factory=list, description="Relative to the code folder.")
    cxx_flags: list[str] = Field(default_factory=list)
    nvcc_flags: list[str] = Field(default_factory=list)
    check: ExtensionCheck | None = Field(
        default=None, description="The extension's own device check against a pure-PyTorch implementation."
    )

    @field_validator("sources", "include_dirs")
    @classmethod
    def _inside_code(cls, paths: list[str]) -> list[str]:
        for path in paths:
            parts = path.split("/")
            if path.startswith("/") or ".." in parts:
                raise ValueError(f"{path!r} must be relative to the code folder, with no '..'")
        return paths

    @property
    def language(self) -> Literal["cpp", "cuda", "hip"]:
        suffixes = {source.rsplit(".", 1)[-1] for source in self.sources}
        if "cu" in suffixes:
            return "cuda"
        if "hip" in suffixes:
            return "hip"
        return "cpp"

    @field_validator("sources")
    @classmethod
    def _known_suffixes(cls, sources: list[str]) -> list[str]:
        for source in sources:
            if source.rsplit(".", 1)[-1] not in {"cpp", "cc", "cxx", "cu", "hip"}:
                raise ValueError(f"{source!r}: sources end in .cpp, .cc, .cxx (C++), .cu (CUDA) or .hip (HIP)")
        return sources


class BuildSpec(StrictModel):
    """Compiled extensions: what is built, with which tools, for which GPUs, in the builder stage."""

    extensions: list[ExtensionSpec] = Field(min_length=1)
    toolchain: ToolchainSpec
    cuda_archs: list[CudaArch] = Field(
        default_factory=list,
        description="TORCH_CUDA_ARCH_LIST entries, e.g. ['8.0', '9.0+PTX']. Required with CUDA sources.",
    )
    rocm_archs: list[RocmArch] = Field(
        default_factory=list, description="PYTORCH_ROCM_ARCH entries, e.g. ['gfx90a']. Required with HIP sources."
    )
    env: dict[Annotated[str, StringConstraints(pattern=r"^[A-Z_][A-Z0-9_]*$")], str] = Field(
        default_factory=dict,
        description="Build-time environment (e.g. MAX_JOBS), set for the build step only; never in the image.",
    )
    keep_toolchain: bool = Field(
        default=False,
        description="false: the compilers stay in the builder stage, only the built extension is copied. "
        "true is refused by this orch (a runtime image with compilers is not built).",
    )

    @model_validator(mode="after")
    def _coherent(self) -> BuildSpec:
        names = [extension.name for extension in self.extensions]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"extension names must be unique; repeated: {', '.join(repeated)}")
        languages = {extension.language for extension in self.extensions}
        if "cuda" in languages and self.toolchain.nvcc is None:
            raise ValueError("CUDA sources (.cu) need toolchain.nvcc")
        if "cuda" not in languages and self.toolchain.nvcc is not None:
            raise ValueError("toolchain.nvcc is set but no extension has CUDA sources (.cu)")
        if "cuda" not in languages and self.toolchain.requirements is not None:
            raise ValueError("toolchain.requirements (CUDA toolchain wheels) is set but no extension has CUDA sources")
        if "cuda" in languages and not self.cuda_archs:
            raise ValueError("CUDA sources need cuda_archs (TORCH_CUDA_ARCH_LIST), e.g. ['8.0', '9.0']")
        if "hip" in languages and (self.toolchain.hipcc is None or not self.rocm_archs):
            raise ValueError("HIP sources need toolchain.hipcc and rocm_archs (PYTORCH_ROCM_ARCH)")
        if "hip" not in languages and (self.toolchain.hipcc is not None or self.rocm_archs):
            raise ValueError("toolchain.hipcc and rocm_archs are set but no extension has HIP sources (.hip)")
        if "cuda" not in languages and self.cuda_archs:
            raise ValueError("cuda_archs is set but no extension has CUDA sources (.cu)")
        if self.keep_toolchain:
            raise ValueError("keep_toolchain: true is not supported: the toolchain stays in the builder stage")
        for key in self.env:
            if key in {"TORCH_CUDA_ARCH_LIST", "PYTORCH_ROCM_ARCH", "CC", "CXX", "PATH"}:
                raise ValueError(f"build.env must not set {key}: orch sets it from the toolchain and arch lists")
        return self

    @property
    def language(self) -> Literal["cpp", "cuda", "hip"]:
        languages = {extension.language for extension in self.extensions}
        return "cuda" if "cuda" in languages else "hip" if "hip" in languages else "cpp"
