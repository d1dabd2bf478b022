"""The dossier schema (version 1): what a reference run *is*, validated by pydantic v2.

Every model forbids unknown keys (a typo is an error, not a silently ignored setting) and is frozen:
a loaded dossier is a value handed from stage to stage. Paths are kept as written; `load` resolves
them against the dossier's folder and checks they exist. Cross-field rules that need vendor tables
(torch ↔ CUDA/ROCm, Python ↔ base image) live in `coherence`, not here, so this module stays a plain
description of the format that `orch schema` exports.

Why one module of ~530 lines: it is the format's reference, section by section in the order a dossier
is written, and `orch schema` exports it whole; split, a reader would chase one format across files.
The one self-contained section, `build` (compiled extensions), lives in `extensions.py`; the strict base
model and the path type both use are in `fields.py`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from orchestrator.dossier.extensions import BuildSpec
from orchestrator.dossier.fields import RelativePath, StrictModel
from orchestrator.dossier.sources import parse_source
from orchestrator.model.platform import Installer, InstallMode, Platform

SCHEMA_VERSION = 1

Sha256 = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9a-f]{64}$"),
    Field(description="Lower-case hex SHA-256 of the file's bytes (64 characters)."),
]
ImageDigest = Annotated[
    str,
    StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$"),
    Field(description="An image digest or id: 'sha256:' followed by 64 lower-case hex characters."),
]
EnvName = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Z_][A-Z0-9_]*$"),
    Field(description="The NAME of an environment variable or secret that holds the credential; never the value."),
]
Identifier = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$"),
    Field(description="Lower-case name: letters, digits, '.', '_' and '-', at most 63 characters."),
]
DebianPackage = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+:~-]+)?$")]

# Query parameters that carry credentials in index URLs (pip, Artifactory, Nexus, cloud storage).
_TOKEN_QUERY_KEYS = re.compile(r"(token|key|secret|password|passwd|auth|signature|sig|credential)", re.I)


def _refuse_credentials_in_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        raise ValueError(
            "a URL must not carry credentials (user:token@); give the *name* of the environment variable "
            "that holds them in 'access' instead"
        )
    if any(_TOKEN_QUERY_KEYS.search(key) for key, _ in parse_qsl(parts.query)):
        raise ValueError(
            "a URL must not carry a token in its query string; give the *name* of the environment variable "
            "that holds it in 'access' instead"
        )
    return url


class CodeSpec(StrictModel):
    """The application: where its code is, at which revision, how it starts."""

    source: RelativePath = Field(
        description="A local folder (relative to the dossier) or a git URL (https://, ssh://, git@host:path)."
    )
    revision: str | None = Field(
        default=None,
        pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})$",
        description="Full git commit id. Required for a git URL; for a local folder inside a git work tree "
        "it is checked against HEAD at build time.",
    )
    entrypoint: RelativePath = Field(description="The program inside the source, e.g. 'embed.py'.")
    options: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Options the reference run used, recorded verbatim."
    )
    dirty: Literal["refuse", "record"] = Field(
        default="refuse",
        description="A work tree with uncommitted changes: refuse it, or record it as a variant with its diff hash.",
    )

    @property
    def is_git_url(self) -> bool:
        return self.source.startswith(("https://", "http://", "ssh://", "git://", "file://", "git@"))

    @model_validator(mode="after")
    def _git_needs_revision(self) -> CodeSpec:
        if self.is_git_url:
            _refuse_credentials_in_url(self.source)
            if self.revision is None:
                raise ValueError("a git URL needs 'revision': the full commit id the reference ran")
        return self


class Artifact(StrictModel):
    """A data set or weights file the sample needs, with its fingerprint and where it came from."""

    name: Identifier
    path: RelativePath | None = Field(
        default=None,
        description="Local file or folder, relative to the dossier. A folder (a model's files) is one item: its "
        "sha256 is the tree hash of its regular files (each relative path and sha256, in order), and it is mounted "
        "as a folder.",
    )
    uri: str | None = Field(
        default=None,
        description="Remote location, fetched into orch's cache and checked against sha256 before use: "
        "https://host/file, s3://bucket/key (s3://bucket/prefix/ for a folder), "
        "hf://owner/repo@<40-hex commit>/path, oci://registry/repository@sha256:<manifest digest> "
        "(docs/remote-sources.md). A branch, tag or OCI tag is refused: it can move.",
    )
    endpoint: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/]+/?$",
        description="s3:// only: the endpoint of an S3-compatible store (https://minio.example:9000); "
        "AWS S3 when absent.",
    )
    sha256: Sha256
    provenance: str = Field(min_length=1, description="Who made it, from what, when.")
    access: EnvName | None = Field(
        default=None,
        description="Name of the environment variable that grants access (its value is read when fetching, never "
        "written): https and hf a bearer token, s3 KEY_ID:SECRET[:SESSION_TOKEN], oci user:password.",
    )

    @model_validator(mode="after")
    def _one_location(self) -> Artifact:
        if (self.path is None) == (self.uri is None):
            raise ValueError("give exactly one of 'path' (a local file) or 'uri' (a remote one)")
        if self.uri is not None:
            _refuse_credentials_in_url(self.uri)
            source = parse_source(self.uri)  # SourceError is a ValueError: pydantic names the field
            if self.endpoint is not None and source.scheme != "s3":
                raise ValueError("'endpoint' goes with an s3:// uri (an S3-compatible store)")
        elif self.endpoint is not None:
            raise ValueError("'endpoint' goes with an s3:// uri, not a local path")
        return self


class IndexSpec(StrictModel):
    url: str = Field(pattern=r"^(https?|file)://\S+$", description="A PEP 503 simple index URL.")
    access: EnvName | None = Field(
        default=None,
        description="Name of the environment variable holding 'user:token' for this index. Only usable with "
        "install: wheelhouse, so the credential stays on the host.",
    )

    @field_validator("url")
    @classmethod
    def _no_credentials(cls, url: str) -> str:
        return _refuse_credentials_in_url(url)


class PythonSpec(StrictModel):
    version: str = Field(pattern=r"^3\.\d{1,2}$", description="Interpreter version, e.g. '3.11'.")
    requirements: RelativePath = Field(
        description="Pinned requirements (a lock): every line 'name==version', optionally with --hash."
    )
    install: InstallMode = Field(
        default="online",
        description="online: pip in the build reaches the indexes. wheelhouse: the host downloads the pinned, "
        "hashed wheels and the build installs them with no network.",
    )
    installer: Installer | None = Field(
        default=None,
        description="What installs the lock in the build: uv (wheelhouse mode only; its own hash-pinned wheel "
        "is collected with the others, used in the builder stage and never shipped) or pip. Default: uv in "
        "wheelhouse mode, pip online.",
    )
    indexes: list[IndexSpec] = Field(
        default_factory=list,
        description="Extra package indexes, searched after PyPI unless use_pypi is false.",
    )
    use_pypi: bool = True
    find_links: list[str] = Field(
        default_factory=list, description="Folders or URLs of wheels (pip --find-links), host side."
    )
    reference_inventory: RelativePath | None = Field(
        default=None,
        description="The reference environment's `pip freeze --all`, to diff the rebuild against.",
    )

    @field_validator("find_links")
    @classmethod
    def _no_credentials(cls, links: list[str]) -> list[str]:
        for link in links:
            _refuse_credentials_in_url(link)
        return links

    @model_validator(mode="after")
    def _uv_needs_wheelhouse(self) -> PythonSpec:
        if self.installer == "uv" and self.install != "wheelhouse":
            raise ValueError(
                "installer uv comes from the wheelhouse (the host collects its pinned wheel); "
                "set install: wheelhouse, or installer: pip for an online install"
            )
        return self

    @property
    def effective_installer(self) -> Installer:
        """The installer the build uses: the dossier's, else uv for a wheelhouse and pip online."""
        if self.installer is not None:
            return self.installer
        return "uv" if self.install == "wheelhouse" else "pip"

    @model_validator(mode="after")
    def _private_index_needs_wheelhouse(self) -> PythonSpec:
        local_links = [link for link in self.find_links if not link.startswith(("http://", "https://"))]
        if local_links and self.install != "wheelhouse":
            raise ValueError(
                f"find-links {local_links[0]!r} is a host folder, which a build container cannot see; "
                "set install: wheelhouse so the host collects the wheels"
            )
        private = [index.url for index in self.indexes if index.access is not None]
        if private and self.install != "wheelhouse":
            raise ValueError(
                f"index {private[0]} needs credentials, which would enter the image in online mode; "
                "set install: wheelhouse so the host downloads the wheels"
            )
        return self


class BaseImageSpec(StrictModel):
    ref: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9._/:-]*$", description="Image reference (tag form).")
    digest: ImageDigest | None = Field(
        default=None, description="Registry digest; the Dockerfile then pins FROM ref@digest."
    )
    image_id: ImageDigest | None = Field(
        default=None,
        description="Local image id (for images made with `orch base`, which have no registry digest); "
        "checked before the build.",
    )
    python: str | None = Field(
        default=None,
        pattern=r"^3\.\d{1,2}$",
        description="The Python version the image provides; required for images not in orch's table.",
    )
    glibc: str | None = Field(
        default=None,
        pattern=r"^2\.\d{1,3}$",
        description="The image's glibc version (for wheelhouse downloads); needed for images not in orch's table.",
    )


class SystemSpec(StrictModel):
    platform: Platform
    version: str | None = Field(
        default=None,
        pattern=r"^\d+\.\d+(\.\d+)?$",
        description="CUDA or ROCm version, e.g. '12.4' or '6.2'. None for cpu.",
    )
    base_image: BaseImageSpec | None = Field(
        default=None, description="Defaults to orch's table for the platform and version."
    )
    os_packages: list[DebianPackage] = Field(default_factory=list, description="Runtime OS packages.")
    build_packages: list[DebianPackage] = Field(
        default_factory=list,
        description="Build tools for compiled extensions: installed in the builder stage only.",
    )

    @model_validator(mode="after")
    def _version_matches_platform(self) -> SystemSpec:
        if self.platform == "cpu" and self.version is not None:
            raise ValueError("platform cpu takes no 'version'")
        if self.platform != "cpu" and self.version is None:
            raise ValueError(f"platform {self.platform} needs 'version' (the {self.platform.upper()} version)")
        return self


class _Comparison(StrictModel):
    reference: RelativePath = Field(description="The reference output file, relative to the dossier.")
    sha256: Sha256 | None = None
    justification: str = Field(
        min_length=10, description="Why this tolerance fits the use: stated before any comparison runs."
    )


class MaxAbsComparison(_Comparison):
    metric: Literal["max_abs"]
    max: float = Field(ge=0)


class AllCloseComparison(_Comparison):
    metric: Literal["allclose"]
    rtol: float = Field(ge=0)
    atol: float = Field(ge=0)


class CosineComparison(_Comparison):
    metric: Literal["cosine"]
    min: float = Field(ge=-1, le=1, description="Smallest row-wise cosine similarity allowed.")


class ExactComparison(_Comparison):
    metric: Literal["exact"]


#: How one output is compared with its reference (the dossier's *spec*; `orch compare`'s result is
#: `orchestrator.model.comparison.Comparison`).
ComparisonSpec = Annotated[
    MaxAbsComparison | AllCloseComparison | CosineComparison | ExactComparison,
    Field(discriminator="metric"),
]


def _inside_output_folder(path: str) -> str:
    parts = path.split("/")
    if path.startswith("/") or ".." in parts or "" in parts:
        raise ValueError("must be a relative path inside the output folder (no leading '/', no '..')")
    return path


OutputFile = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9._/-]+$", max_length=255),
    AfterValidator(_inside_output_folder),
    Field(description="A relative path inside the output folder."),
]


class IdsSpec(StrictModel):
    file: OutputFile
    expected: RelativePath = Field(description="The sample's identifiers in order, relative to the dossier.")


class OutputSpec(StrictModel):
    name: Identifier
    file: OutputFile
    format: Literal["npy", "json", "jsonl"] = "npy"
    shape: list[int | None] | None = Field(default=None, description="Expected shape; null for any size.")
    dtype: Literal["float16", "bfloat16", "float32", "float64", "int32", "int64", "bool", "str"] | None = None
    finite: bool = True
    ids: IdsSpec | None = None
    compare: ComparisonSpec | None = None

    @field_validator("shape")
    @classmethod
    def _positive_dims(cls, shape: list[int | None] | None) -> list[int | None] | None:
        if shape is not None and any(dim is not None and dim < 0 for dim in shape):
            raise ValueError("dimensions are non-negative integers, or null for any size")
        return shape


class NearestNeighbourCheck(StrictModel):
    kind: Literal["nearest_neighbour"]
    output: Identifier
    pairs: RelativePath = Field(description="JSON list of [id, id] pairs that must be each other's nearest.")
    min_agreement: float = Field(default=1.0, ge=0, le=1)


class LabelEqualityCheck(StrictModel):
    kind: Literal["label_equality"]
    output: Identifier
    reference: RelativePath
    min_agreement: float = Field(default=1.0, ge=0, le=1)


BusinessCheck = Annotated[NearestNeighbourCheck | LabelEqualityCheck, Field(discriminator="kind")]


class InputFile(StrictModel):
    """A sample input, mounted read-only at /orch/input/<path>: a file, or a folder (one item, its sha256 the
    tree hash of its regular files)."""

    path: RelativePath
    sha256: Sha256


class LimitsSpec(StrictModel):
    """What the sample's container may use, and how much of what it writes the host will read."""

    memory_mib: int = Field(
        default=4096,
        ge=64,
        le=1_048_576,
        description="Memory limit of the sample's container in MiB (swap included: it gets no swap beyond it).",
    )
    output_mib: int = Field(
        default=1024,
        ge=1,
        le=65_536,
        description="Largest .npy output the host reads, in MiB; it is streamed, so host memory stays O(row).",
    )
    json_mib: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="Largest JSON/JSON Lines output or identifier file, in MiB; parsed in memory, which "
        "takes about 10 times its size (measured: 640 MiB for a 64 MiB ids.json).",
    )


#: What `orch record` writes where it hid a value; a command holding one cannot run as written.
_PLACEHOLDERS = ("<local path>", "<withheld", "TO CONFIRM")
#: Folders that exist on a user's machine and never in the sample's container: a command naming one was not
#: mapped (orch mounts what the sample reads under /orch, the code at /opt/app).
_HOST_ONLY_FOLDERS = ("/home/", "/root/", "/Users/", "/mnt/", "/media/", "/srv/", "/scratch/")


def _runnable_command(command: list[str]) -> list[str]:
    for position, token in enumerate(command):
        placeholder = next((mark for mark in _PLACEHOLDERS if mark in token), None)
        if placeholder is not None:
            raise ValueError(
                f"argument {position} ({token!r}) holds the placeholder {placeholder!r}, so the command cannot run as "
                "written; put the container path there (/orch/input/<path>, /orch/weights/<name>, /orch/output), "
                "or record again with the path given as --data or --weights"
            )
        path = token.partition("=")[2] if "=" in token and not token.startswith("/") else token
        if path.startswith(_HOST_ONLY_FOLDERS):
            raise ValueError(
                f"argument {position} ({token!r}) is a path on a host, which the sample's container does not have; "
                "declare the file or folder as an input, data or weights item and use its container path "
                "(/orch/input/<path>, /orch/data/<name>, /orch/weights/<name>)"
            )
    return command


class ExpectSpec(StrictModel):
    command: Annotated[list[Annotated[str, StringConstraints(min_length=1)]], AfterValidator(_runnable_command)] = (
        Field(
            min_length=1,
            description="The sample command, run in the image's working directory (/opt/app). Inputs are mounted "
            "read-only at /orch/input/<path>, data and weights at /orch/data/<name> and /orch/weights/<name>, the "
            "output folder at /orch/output. No placeholder and no host path: it runs as written.",
        )
    )
    inputs: list[InputFile] = Field(default_factory=list)
    timeout_s: int = Field(default=600, gt=0, le=86_400)
    outputs: list[OutputSpec] = Field(min_length=1)
    business: list[BusinessCheck] = Field(default_factory=list)
    limits: LimitsSpec = Field(default_factory=LimitsSpec)

    @model_validator(mode="after")
    def _names(self) -> ExpectSpec:
        names = [output.name for output in self.outputs]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"output names must be unique; repeated: {', '.join(duplicates)}")
        for check in self.business:
            if check.output not in names:
                raise ValueError(f"business check refers to output {check.output!r}; outputs are: {', '.join(names)}")
        return self


# Values of the CPU knobs, checked against their readers so a typo is an error instead of a knob that the
# library silently ignores:
# - ATEN_CPU_CAPABILITY: pytorch/pytorch aten/src/ATen/native/DispatchStub.cpp (`compute_cpu_capability`)
#   accepts "default", "avx2" and "avx512" on x86-64 and warns "ignoring invalid value" for anything else
#   (checked in the strings of torch 2.13.0+cpu's libtorch_cpu.so); torch.backends.cpu.get_cpu_capability()
#   reports the result.
# - ONEDNN_MAX_CPU_ISA: oneDNN doc/performance_considerations/dispatcher_control.md, "Runtime Controls"
#   (upper case; AVX512_CORE_FP16/AMX/AMX_FP16 are aliases of the AVX10_1_512 names).
AtenCpuCapability = Literal["default", "avx2", "avx512"]
OneDnnMaxCpuIsa = Literal[
    "DEFAULT",
    "SSE41",
    "AVX",
    "AVX2",
    "AVX2_VNNI",
    "AVX2_VNNI_2",
    "AVX512_CORE",
    "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16",
    "AVX512_CORE_FP16",
    "AVX10_1_512",
    "AVX512_CORE_AMX",
    "AVX10_1_512_AMX",
    "AVX512_CORE_AMX_FP16",
    "AVX10_1_512_AMX_FP16",
]


class CpuDeterminism(StrictModel):
    """CPU knobs that make float results steadier across x86-64 hosts (AVX2 vs AVX-512/AMX machines).

    Each is passed to the sample (and the device probe) as an environment variable and recorded in the report.
    They narrow the differences, they do not promise identical bits: compare with a tolerance.
    """

    aten_cpu_capability: AtenCpuCapability | None = Field(
        default=None,
        description="ATEN_CPU_CAPABILITY: the widest vector code torch's own CPU kernels may use "
        "(default = no AVX, avx2, avx512). Torch does not check it against the CPU: pin a level every host has.",
    )
    onednn_max_cpu_isa: OneDnnMaxCpuIsa | None = Field(
        default=None,
        description="ONEDNN_MAX_CPU_ISA: the newest instruction set oneDNN (mkldnn: convolutions, some matmuls) "
        "may dispatch to, e.g. AVX2 to keep AVX-512 and AMX hosts on the AVX2 code path.",
    )
    threads: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="OMP_NUM_THREADS and MKL_NUM_THREADS: a fixed thread count fixes how reductions are split.",
    )

    def environment(self) -> dict[str, str]:
        env: dict[str, str] = {}
        if self.aten_cpu_capability is not None:
            env["ATEN_CPU_CAPABILITY"] = self.aten_cpu_capability
        if self.onednn_max_cpu_isa is not None:
            env["ONEDNN_MAX_CPU_ISA"] = self.onednn_max_cpu_isa
        if self.threads is not None:
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(self.threads)
        return env


class DeterminismSpec(StrictModel):
    seed: int = Field(default=0, ge=0, lt=2**32)
    deterministic_algorithms: bool = True
    tf32: bool = False
    matmul_precision: Literal["highest", "high", "medium"] = "highest"
    cublas_workspace_config: Literal[":4096:8", ":16:8"] | None = ":4096:8"
    cpu: CpuDeterminism | None = Field(
        default=None, description="CPU knobs pinned for the sample: steadier CPU float results across hosts."
    )


class VariantSpec(StrictModel):
    """A named, intentional difference from the reference: never a silent acceptance."""

    name: Identifier
    description: str = Field(min_length=1)
    system: SystemSpec | None = Field(default=None, description="Replaces the reference's system section.")
    python: PythonSpec | None = Field(default=None, description="Replaces the reference's python section.")
    compare: dict[Identifier, ComparisonSpec] = Field(
        default_factory=dict, description="Per output name: the comparison to use for this variant."
    )


class Dossier(StrictModel):
    """A reference run, recorded so it can be rebuilt and checked."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="orch dossier")

    dossier: Literal[1] = Field(description="Schema version of this file.")
    name: Identifier
    description: str = ""
    code: CodeSpec
    data: list[Artifact] = Field(default_factory=list)
    weights: list[Artifact] = Field(default_factory=list)
    python: PythonSpec
    system: SystemSpec
    expect: ExpectSpec
    determinism: DeterminismSpec = Field(default_factory=DeterminismSpec)
    build: BuildSpec | None = Field(
        default=None,
        description="Compiled extensions (C++; CUDA with nvcc from a devel base or NVIDIA's wheels), built in the builder "
        "stage; only the artefact ships (docs/extensions.md).",
    )
    variants: list[VariantSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> Dossier:
        for label, names in (
            ("data and weights", [item.name for item in [*self.data, *self.weights]]),
            ("variants", [variant.name for variant in self.variants]),
        ):
            repeated = sorted({name for name in names if names.count(name) > 1})
            if repeated:
                raise ValueError(f"names in {label} must be unique; repeated: {', '.join(repeated)}")
        outputs = {output.name for output in self.expect.outputs}
        for variant in self.variants:
            unknown = sorted(set(variant.compare) - outputs)
            if unknown:
                raise ValueError(
                    f"variant {variant.name!r} overrides the comparison of unknown output(s) {', '.join(unknown)}"
                )
        return self

    def variant(self, name: str) -> VariantSpec:
        for variant in self.variants:
            if variant.name == name:
                return variant
        known = ", ".join(v.name for v in self.variants)
        declared = f"declared: {known}" if known else "it declares no variants"
        raise KeyError(f"variant {name!r} is not declared in this dossier ({declared})")
