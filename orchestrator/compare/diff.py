"""`orch compare A B`: what differs between two runs, layer by layer, and whether the difference was meant.

A is the reference, B the rebuild. Each side is a `report.json` (format `orch.report/1`), a `build.json`
(format `orch.build/1`), or a folder holding either or both (the output folder of `orch rebuild` holds
both). The comparison (format `orch.compare/1`, a frozen value; fields are only ever added within a
format version) has five parts, in the order of the chain:

- **dossier**: name, identity and variant of each side;
- **packages**: `pip freeze` of A against B (`inventory.diff_inventories`, A as the reference), from
  the build records' inventories, else from a report's image facts when they list the packages;
- **system**: platform, Python, torch and its CUDA/HIP build flags, the CUDA toolkit and ROCm the image
  carries, the host's NVIDIA and AMD drivers, the devices torch saw (count and names), the host's CPU
  (model and ISA flags) and torch's CPU capability;
- **stages**: the four stages' status on each side;
- **numbers**: every check of the sample stage found on both sides (matched by name; a comparison
  with the reference is matched by its output name, so a variant with another metric still lines up)
  and the device's compute checks (matmul, conv2d against float64): observed on each side, B's
  expectation (the tolerance it was judged by), and whether each side held.

Each row has a verdict:

- `same`: equal on both sides;
- `within_tolerance`: the check held on both sides with different observed values ("same within
  tolerance": B's own tolerance, which is the variant's when B is a variant);
- `intended`: a difference a declared variant explains (see below), shown with the variant's name and
  description, never as a regression;
- `improved`: failed (or did not pass) in A, holds in B;
- `host`: a fact of the machine that ran the probes differs (its NVIDIA or AMD driver, its ROCm, the
  devices torch saw, its CPU and torch's CPU capability): the dossier does not fix the host, and a rebuild is expected to run on another
  machine, so the row is shown and does not count against B. Whether it matters is what the stages and
  numbers say (a GPU that B cannot see fails B's device stage: a `regression`). Added in orch 0.1 within
  `orch.compare/1`; a reader that does not know it should treat it like `intended`;
- `changed`: an unintended difference in what was built, where it ran, or what was checked;
- `regression`: something that held in A does not in B (a stage, a check, a number out of tolerance).

**Variants.** A difference is intended only when the two sides are the same dossier (same name) and
their variants differ, and every variant involved is *declared*: `load_side` reads the dossier at the
recorded `dossier.path` and looks the variant up in its `variants`. When that file is gone or cannot be
read, a recorded variant name still counts as declared (`orch` refuses an undeclared `--variant`, so a
report only ever records declared ones) and its description is unknown. A dossier that can be read and
no longer declares the variant makes its differences unintended. When the dossier could be read, only
the sections the variant replaces are excused: `system` excuses platform, CUDA/ROCm, drivers and
devices; `python` excuses packages and the torch version; either excuses Python and torch's CUDA/HIP
build; `compare` excuses a sample comparison check present on one side only. When it could not be read,
all of them are excused. Numbers are never excused: they must hold against B's own tolerance. The two
identities always differ between a reference and its variant (the variant is part of the identity):
that is expected and shown as intended.

**Verdict.** `regressed` when any row is `changed` or `regression`; `identical` when every row is `same`;
`equivalent` otherwise (only intended differences, improvements, host differences, numbers within
tolerance).
`unintended` lists every `regression` row first (stages, then numbers), then every `changed` row
(packages, system, stages, numbers, dossier), one line each: its first line is what `orch compare`
names when it exits 1. What could not be compared (no inventory on a side, a stage that did not run)
is listed in `not_compared` and does not change the verdict.

Pure apart from reading the given files and the dossier: no Docker, no network, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator import __version__
from orchestrator.documents import read_one_of
from orchestrator.errors import BadInput
from orchestrator.model.build_record import BUILD_FORMAT, BuildRecord
from orchestrator.model.checks import Check
from orchestrator.model.inventory import InventoryDiff, diff_inventories
from orchestrator.model.report import REPORT_FORMAT, STAGES, Report, StageName, StageStatus
from orchestrator.report.view import clean, one_line

COMPARE_FORMAT = "orch.compare/1"
REPORT_FILE = "report.json"
BUILD_FILE = "build.json"

Verdict = Literal["same", "within_tolerance", "intended", "improved", "host", "changed", "regression"]
Overall = Literal["identical", "equivalent", "regressed"]
UNINTENDED: tuple[Verdict, ...] = ("changed", "regression")
HOST_NOTE = "another host: the dossier does not fix it; the stages and numbers say whether it matters"

#: Sections of a dossier a variant can replace, in the order the dossier declares them.
VARIANT_SECTIONS = ("system", "python", "compare")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class VariantInfo(Frozen):
    """A side's variant, as its dossier declares it (or as the report recorded it)."""

    name: str
    declared: bool
    description: str | None = Field(default=None, description="None when the dossier could not be read.")
    overrides: list[str] | None = Field(
        default=None, description="Sections the variant replaces (system, python, compare); None when unknown."
    )
    source: str = Field(description="Where the declaration was looked up, or why it could not be.")


class SideInfo(Frozen):
    files: list[str]
    dossier: str
    dossier_path: str
    identity: str
    variant: VariantInfo | None
    platform: str | None
    image: str | None
    report_verdict: Literal["passed", "failed"] | None
    build_status: Literal["passed", "failed"] | None


class Difference(Frozen):
    field: str
    a: str
    b: str
    verdict: Verdict
    note: str | None = None


class StageComparison(Frozen):
    stage: StageName
    a: StageStatus | None
    b: StageStatus | None
    verdict: Verdict
    note: str | None = Field(default=None, description="B's first error or reason when B did not pass.")


class NumberComparison(Frozen):
    stage: Literal["device", "sample"]
    name: str
    a_observed: str | None
    b_observed: str | None
    expected: str = Field(description="B's expectation (its tolerance); A's when B has no such check.")
    a_passed: bool | None
    b_passed: bool | None
    verdict: Verdict
    note: str | None = None


class Comparison(Frozen):
    format: Literal["orch.compare/1"] = "orch.compare/1"
    orch_version: str = __version__
    a: SideInfo
    b: SideInfo
    intent: str | None = Field(
        description="The declared variant that explains intended differences: 'variant NAME: description'."
    )
    dossier: list[Difference]
    packages: InventoryDiff | None
    packages_verdict: Verdict | None
    packages_note: str | None = None
    system: list[Difference]
    stages: list[StageComparison]
    numbers: list[NumberComparison]
    not_compared: list[str]
    notes: list[str]
    unintended: list[str] = Field(description="Every regression, then every unintended change, one line each.")
    verdict: Overall


# -- reading the two sides -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One side of a comparison: the report and/or the build record read from the path given."""

    path: Path
    report: Report | None = None
    record: BuildRecord | None = None
    report_file: Path | None = None
    record_file: Path | None = None
    variant: VariantInfo | None = None  # None: the documents record no variant, or it was not looked up
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.report is None and self.record is None:
            raise ValueError("a side needs a report or a build record")

    @property
    def files(self) -> list[str]:
        found = [str(file) for file in (self.report_file, self.record_file) if file is not None]
        return found or [str(self.path)]

    @property
    def dossier_name(self) -> str:
        return self.report.dossier.name if self.report else _record(self).dossier.name

    @property
    def dossier_path(self) -> str:
        return self.report.dossier.path if self.report else _record(self).dossier.path

    @property
    def identity(self) -> str:
        return self.report.dossier.identity if self.report else _record(self).dossier.identity

    @property
    def variant_name(self) -> str | None:
        return self.report.dossier.variant if self.report else _record(self).dossier.variant

    @property
    def image_id(self) -> str | None:
        if self.report is not None:
            return self.report.image.id if self.report.image else None
        record = _record(self)
        return record.image.id if record.image else None


def _record(side: Side) -> BuildRecord:
    assert side.record is not None
    return side.record


def _read_document(path: Path) -> Report | BuildRecord:
    """A report or a build record, told apart by its `format`; anything else is `BadInput` naming the file."""
    document = read_one_of(path, {REPORT_FORMAT: (Report, "report"), BUILD_FORMAT: (BuildRecord, "build record")})
    assert isinstance(document, Report | BuildRecord)
    return document


def _consistent(report: Report, record: BuildRecord) -> bool:
    """The report and the build record describe the same image of the same dossier."""
    report_image = report.image.id if report.image else None
    record_image = record.image.id if record.image else None
    return report.dossier.identity == record.dossier.identity and report_image == record_image


def resolve_variant(name: str, dossier_path: str) -> VariantInfo:
    """Look `name` up in the dossier at `dossier_path` (as recorded: absolute, or relative to the working directory).

    Only the schema is read (no referenced file has to exist any more). A dossier that is gone or cannot
    be parsed leaves the recorded name standing as declared, with no description: see the module docstring.
    """
    from orchestrator.dossier.models import Dossier
    from orchestrator.dossier.yaml_source import YamlSourceError, read_yaml

    path = Path(dossier_path)
    recorded = "orch records only variants the dossier declares"
    try:
        document = read_yaml(path.read_bytes())
        dossier = Dossier.model_validate(document.data)
    except OSError as exc:
        return VariantInfo(
            name=name,
            declared=True,
            source=f"recorded; dossier {dossier_path} not readable ({exc.strerror}); {recorded}",
        )
    except (YamlSourceError, ValidationError):
        return VariantInfo(
            name=name, declared=True, source=f"recorded; dossier {dossier_path} no longer valid; {recorded}"
        )
    for variant in dossier.variants:
        if variant.name == name:
            overrides = [
                section
                for section, value in zip(
                    VARIANT_SECTIONS, (variant.system, variant.python, variant.compare or None), strict=True
                )
                if value is not None
            ]
            return VariantInfo(
                name=name,
                declared=True,
                description=" ".join(variant.description.split()),
                overrides=overrides,
                source=str(path),
            )
    return VariantInfo(name=name, declared=False, source=str(path))


def load_side(path: Path) -> Side:
    """Read one side: a `report.json`, a `build.json`, or a folder holding either or both.

    Given a file, its sibling of the other kind (`build.json` beside a `report.json` and vice versa) is
    read too when it describes the same image of the same dossier, so `orch compare a/report.json
    b/report.json` still compares packages. A missing path, a file that is not JSON, or a JSON document
    of another format is `BadInput` naming the file and what was expected. The side's variant, when one
    is recorded, is looked up in its dossier (`resolve_variant`).
    """
    documents: list[tuple[Report | BuildRecord, Path]] = []
    notes: list[str] = []
    if path.is_dir():
        found = [path / name for name in (REPORT_FILE, BUILD_FILE) if (path / name).is_file()]
        if not found:
            raise BadInput(
                f"{path}: holds neither {REPORT_FILE} nor {BUILD_FILE}; expected the output folder of "
                "`orch rebuild`, `orch build` or `orch probe`, or one of those files"
            )
        documents = [(_read_document(file), file) for file in found]
    elif path.exists():
        first = _read_document(path)
        documents.append((first, path))
        sibling = path.parent / (BUILD_FILE if isinstance(first, Report) else REPORT_FILE)
        if sibling.is_file() and not sibling.samefile(path):
            try:
                other = _read_document(sibling)
            except BadInput as exc:
                notes.append(f"{sibling} not used: {exc.message}")
            else:
                pair = _pair(first, other)
                if pair is not None and _consistent(*pair):
                    documents.append((other, sibling))
                elif pair is not None:
                    notes.append(f"{sibling} not used: it describes another image or dossier than {path}")
    else:
        raise BadInput(
            f"{path}: no such file or folder; expected a {REPORT_FILE}, a {BUILD_FILE}, "
            "or the output folder of `orch rebuild` holding them"
        )
    reports = [(document, file) for document, file in documents if isinstance(document, Report)]
    records = [(document, file) for document, file in documents if isinstance(document, BuildRecord)]
    for kind, group in (("reports", reports), ("build records", records)):
        if len(group) > 1:
            raise BadInput(f"{path}: holds two {kind} ({', '.join(str(file) for _, file in group)}); give one file")
    report, report_file = reports[0] if reports else (None, None)
    record, record_file = records[0] if records else (None, None)
    if report is not None and record is not None and path.is_dir() and not _consistent(report, record):
        notes.append(
            f"{path}: {REPORT_FILE} and {BUILD_FILE} describe different images or dossiers; "
            f"packages come from {BUILD_FILE}, everything else from {REPORT_FILE}"
        )
    side = Side(
        path=path,
        report=report,
        record=record,
        report_file=report_file,
        record_file=record_file,
        notes=tuple(notes),
    )
    name = side.variant_name
    if name is None:
        return side
    return replace(side, variant=resolve_variant(name, side.dossier_path))


def _pair(one: Report | BuildRecord, other: Report | BuildRecord) -> tuple[Report, BuildRecord] | None:
    if isinstance(one, Report) and isinstance(other, BuildRecord):
        return one, other
    if isinstance(one, BuildRecord) and isinstance(other, Report):
        return other, one
    return None


# -- facts of one side ---------------------------------------------------------------------------------


def _facts(side: Side, stage: StageName) -> Mapping[str, Any]:
    if side.report is None or stage not in side.report.stages:
        return {}
    return side.report.stages[stage].facts


def _show(value: Any) -> str:
    """A recorded value as text; a recorded None (no driver, not a CUDA build) is 'none'."""
    return "none" if value is None or value == "" else clean(str(value))


def _nested(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, Mapping) else None


def _image_fact(side: Side, inventory_value: Callable[[Any], Any], *keys: tuple[str, ...]) -> str | None:
    """From the build record's inventory, else the report's image facts (flat key, or key.subkey)."""
    inventory = side.record.inventory if side.record is not None else None
    if inventory is not None:
        return _show(inventory_value(inventory))
    facts = _facts(side, "image")
    for path in keys:
        if path[0] in facts:
            value = facts[path[0]]
            if len(path) == 1 and not isinstance(value, Mapping):
                return _show(value)
            if len(path) == 2 and isinstance(value, Mapping) and path[1] in value:
                return _show(value[path[1]])
    return None


def _torch_fact(side: Side, key: str, inventory_attr: str) -> str | None:
    found = _image_fact(
        side,
        lambda inventory: getattr(inventory.backend, inventory_attr),
        ("torch" if key == "version" else f"torch_{key}",),
        ("torch", key),
    )
    if found is not None:
        return found
    torch = _facts(side, "device").get("torch")
    return _show(torch.get(key)) if isinstance(torch, Mapping) and key in torch else None


def _platform(side: Side) -> str | None:
    if side.report is not None:
        dossier = side.report.dossier
        return f"{dossier.platform} {dossier.backend_version}" if dossier.backend_version else dossier.platform
    record = _record(side)
    if record.image is None:
        return None
    from orchestrator.model.platform import LABEL_PREFIX

    platform = record.image.labels.get(f"{LABEL_PREFIX}.platform")
    version = record.image.labels.get(f"{LABEL_PREFIX}.backend.version")
    if platform is None:
        return None
    return f"{platform} {version}" if version and version != "none" else platform


def _python(side: Side) -> str | None:
    return _image_fact(side, lambda inventory: inventory.python_version, ("python",), ("python", "version"))


def _host_nvidia(side: Side) -> str | None:
    facts = _facts(side, "host")
    if "nvidia" not in facts:
        return None
    nvidia = facts["nvidia"]
    if not isinstance(nvidia, Mapping):
        return _show(nvidia)
    driver = _show(nvidia.get("driver_version"))
    cuda = nvidia.get("cuda_driver_version")
    return f"{driver} (CUDA ≤ {cuda})" if cuda else driver


def _host_amd(key: str) -> Callable[[Side], str | None]:
    def read(side: Side) -> str | None:
        facts = _facts(side, "host")
        if "amd" not in facts:
            return None
        amd = facts["amd"]
        if not isinstance(amd, Mapping):
            return _show(amd)
        value = amd.get(key)
        if key == "driver_version" and value is None:
            return "in-tree amdgpu"
        return _show(value)

    return read


def _device_count(side: Side) -> str | None:
    accelerator = _facts(side, "device").get("accelerator")
    return _show(accelerator.get("device_count")) if isinstance(accelerator, Mapping) else None


def _devices(side: Side) -> str | None:
    devices = _facts(side, "device").get("devices")
    if not isinstance(devices, list):
        return None
    names = [
        clean(str(_nested(device, "name") or f"device {_nested(device, 'index')}: {_nested(device, 'error')}"))
        for device in devices
    ]
    return ", ".join(names) if names else "none"


def _host_cpu(side: Side) -> str | None:
    """The host CPU and the ISA flags that pick float kernels: another CPU explains other last bits."""
    cpu = _facts(side, "host").get("cpu")
    if not isinstance(cpu, Mapping):
        return None
    flags = cpu.get("isa_flags")
    shown = " ".join(str(flag) for flag in flags) if isinstance(flags, list) else "?"
    return f"{_show(cpu.get('model'))}; ISA {shown or 'none of note'}"


def _cpu_capability(side: Side) -> str | None:
    value = _facts(side, "device").get("cpu_capability")
    return None if value is None else _show(value)


#: (field, how to read it from a side, the variant sections that make a difference in it intended).
SYSTEM_FIELDS: tuple[tuple[str, Callable[[Side], str | None], frozenset[str]], ...] = (
    ("platform", _platform, frozenset({"system"})),
    ("python", _python, frozenset({"system", "python"})),
    ("torch", lambda side: _torch_fact(side, "version", "torch"), frozenset({"python"})),
    ("torch.version.cuda", lambda side: _torch_fact(side, "cuda", "torch_cuda"), frozenset({"system", "python"})),
    ("torch.version.hip", lambda side: _torch_fact(side, "hip", "torch_hip"), frozenset({"system", "python"})),
    (
        "CUDA toolkit (image)",
        lambda side: _image_fact(side, lambda inventory: inventory.backend.cuda_toolkit, ("cuda_toolkit",)),
        frozenset({"system"}),
    ),
    (
        "ROCm (image)",
        lambda side: _image_fact(side, lambda inventory: inventory.backend.rocm, ("rocm",)),
        frozenset({"system"}),
    ),
    ("host NVIDIA driver", _host_nvidia, frozenset({"system"})),
    ("host AMD driver", _host_amd("driver_version"), frozenset({"system"})),
    ("host ROCm", _host_amd("rocm_version"), frozenset({"system"})),
    ("device count", _device_count, frozenset({"system"})),
    ("devices", _devices, frozenset({"system"})),
    ("host CPU", _host_cpu, frozenset({"system"})),
    ("torch CPU capability", _cpu_capability, frozenset({"system"})),
)


#: The system rows that describe the host that ran the probes, not the image: see the `host` verdict.
HOST_FIELDS = frozenset(
    {
        "host NVIDIA driver",
        "host AMD driver",
        "host ROCm",
        "device count",
        "devices",
        "host CPU",
        "torch CPU capability",
    }
)


def _freeze(side: Side) -> tuple[list[str], str] | None:
    """`pip freeze` lines and the file they came from: the build record's inventory, else the report's image facts."""
    if side.record is not None and side.record.inventory is not None:
        return side.record.inventory.pip_freeze, str(side.record_file or side.path)
    packages = _facts(side, "image").get("packages")
    if isinstance(packages, list) and all(isinstance(line, str) for line in packages):
        return list(packages), str(side.report_file or side.path)
    return None


# -- comparing -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Intent:
    label: str
    overrides: frozenset[str] | None  # None: unknown, everything a variant can change is excused

    def covers(self, sections: frozenset[str]) -> bool:
        return self.overrides is None or bool(self.overrides & sections)


def _variant_of(side: Side) -> VariantInfo | None:
    name = side.variant_name
    if name is None:
        return None
    if side.variant is not None and side.variant.name == name:
        return side.variant
    kind = "report" if side.report is not None else "build record"
    return VariantInfo(
        name=name, declared=True, source=f"recorded in the {kind}; orch records only variants the dossier declares"
    )


def _intent(a: Side, b: Side, notes: list[str]) -> _Intent | None:
    if a.variant_name == b.variant_name:
        return None
    if a.dossier_name != b.dossier_name:
        notes.append(
            f"A and B are different dossiers ({a.dossier_name}, {b.dossier_name}): a variant only explains "
            "differences from its own dossier's reference"
        )
        return None
    variants = [info for info in (_variant_of(a), _variant_of(b)) if info is not None]
    undeclared = [info for info in variants if not info.declared]
    if undeclared:
        notes.append(
            f"variant {undeclared[0].name} is not declared in {undeclared[0].source}: its differences are unintended"
        )
        return None
    last = variants[-1]
    names = " → ".join(f"variant {info.name}" for info in variants)
    label = f"{names}: {last.description or '(description unknown: the dossier could not be read)'}"
    overrides: frozenset[str] | None = frozenset()
    for info in variants:
        if info.overrides is None or overrides is None:
            overrides = None
        else:
            overrides |= frozenset(info.overrides)
    return _Intent(label=label, overrides=overrides)


def _side_info(side: Side) -> SideInfo:
    return SideInfo(
        files=side.files,
        dossier=side.dossier_name,
        dossier_path=side.dossier_path,
        identity=side.identity,
        variant=_variant_of(side),
        platform=_platform(side),
        image=side.image_id,
        report_verdict=side.report.verdict if side.report else None,
        build_status=side.record.status if side.record else None,
    )


def _difference(
    field: str, a: str, b: str, intent: _Intent | None, sections: frozenset[str], unexplained: str | None = None
) -> Difference:
    if a == b:
        return Difference(field=field, a=a, b=b, verdict="same")
    if intent is not None and intent.covers(sections):
        return Difference(field=field, a=a, b=b, verdict="intended", note=intent.label)
    if field in HOST_FIELDS:
        return Difference(field=field, a=a, b=b, verdict="host", note=HOST_NOTE)
    return Difference(field=field, a=a, b=b, verdict="changed", note=unexplained)


def _dossier_rows(a: Side, b: Side, intent: _Intent | None) -> list[Difference]:
    every = frozenset(VARIANT_SECTIONS)
    same_name = a.dossier_name == b.dossier_name
    identity = _difference(
        "identity",
        a.identity,
        b.identity,
        intent,
        every,
        "the dossier or a file it references changed (lock, sample, reference outputs, code)",
    )
    if identity.verdict == "intended" and intent is not None:
        identity = identity.model_copy(update={"note": f"{intent.label} — a variant has its own identity, as expected"})
    return [
        Difference(
            field="dossier",
            a=a.dossier_name,
            b=b.dossier_name,
            verdict="same" if same_name else "changed",
            note=None if same_name else "different dossiers",
        ),
        _difference(
            "variant", a.variant_name or "none (reference)", b.variant_name or "none (reference)", intent, every
        ),
        identity,
    ]


def _stage_status(side: Side, stage: StageName) -> StageStatus | None:
    if side.report is not None:
        result = side.report.stages.get(stage)
        return result.status if result is not None else None
    if stage == "image":
        return _record(side).status
    return None


def _stage_note(side: Side, stage: StageName) -> str | None:
    if side.report is None or stage not in side.report.stages:
        if stage == "image" and side.record is not None and side.record.failure is not None:
            failure = side.record.failure
            return one_line(f"{failure.step or 'build'}: {failure.first_error}")
        return None
    result = side.report.stages[stage]
    if result.status in ("passed", "skipped"):
        return None
    if result.first_error is not None:
        return one_line(f"{result.first_error.step}: {result.first_error.message}")
    return one_line(result.reason) if result.reason else None


def _stage_rows(a: Side, b: Side, not_compared: list[str]) -> list[StageComparison]:
    rows: list[StageComparison] = []
    for stage in STAGES:
        status_a, status_b = _stage_status(a, stage), _stage_status(b, stage)
        if status_a is None or status_b is None:
            if status_a is not None or status_b is not None:
                missing = "A" if status_a is None else "B"
                not_compared.append(
                    f"{stage} stage: {missing} has no report (a build record holds the image stage only)"
                )
            continue
        ok_a, ok_b = status_a in ("passed", "skipped"), status_b in ("passed", "skipped")
        verdict: Verdict
        if status_a == status_b:
            verdict = "same"
        elif ok_a and not ok_b:
            verdict = "regression"
        elif ok_b and not ok_a:
            verdict = "improved"
        else:
            verdict = "changed"
        rows.append(StageComparison(stage=stage, a=status_a, b=status_b, verdict=verdict, note=_stage_note(b, stage)))
    return rows


_COMPARISON_CHECK = re.compile(r"^(?P<output>.+?): (?:max_abs|allclose|cosine|exact) vs ")


def _check_key(name: str) -> str:
    """Sample checks match by name; a comparison with the reference by its output (a variant may change the metric)."""
    match = _COMPARISON_CHECK.match(name)
    return f"{match['output']}: comparison with the reference" if match else name


def _compute_checks(side: Side) -> list[Check] | None:
    """The device probe's compute results (matmul and conv2d against float64) as checks; None when absent."""
    compute = _facts(side, "device").get("compute")
    if not isinstance(compute, Mapping):
        return None
    checks: list[Check] = []
    for op in ("matmul", "conv2d"):
        result = compute.get(op)
        if not isinstance(result, Mapping):
            continue
        diff = result.get("max_abs_diff")
        observed = (
            str(result["error"])
            if result.get("error")
            else f"max |Δ| = {diff:.3g} on {compute.get('device')}"
            if isinstance(diff, int | float)
            else f"no result on {compute.get('device')}"
        )
        checks.append(
            Check(
                name=f"{op} vs float64",
                expected=f"|Δ| ≤ {compute.get('atol')} + {compute.get('rtol')}·|reference|",
                observed=observed,
                passed=bool(result.get("ok")),
            )
        )
    return checks


def _number_verdict(a: Check, b: Check) -> Verdict:
    if a.passed and b.passed:
        return "same" if a.observed == b.observed else "within_tolerance"
    if a.passed:
        return "regression"
    if b.passed:
        return "improved"
    return "same" if a.observed == b.observed else "changed"


def _match_checks(
    stage: Literal["device", "sample"], checks_a: list[Check], checks_b: list[Check], intent: _Intent | None
) -> list[NumberComparison]:
    by_a = {_check_key(check.name): check for check in checks_a}
    by_b = {_check_key(check.name): check for check in checks_b}
    keys = list(by_a) + [key for key in by_b if key not in by_a]
    rows: list[NumberComparison] = []
    for key in keys:
        a, b = by_a.get(key), by_b.get(key)
        if a is not None and b is not None:
            notes = []
            if a.name != b.name:
                notes.append(f"A checked {a.name}")
            if a.expected != b.expected:
                notes.append(f"A expected {a.expected}")
            rows.append(
                NumberComparison(
                    stage=stage,
                    name=b.name,
                    a_observed=a.observed,
                    b_observed=b.observed,
                    expected=b.expected,
                    a_passed=a.passed,
                    b_passed=b.passed,
                    verdict=_number_verdict(a, b),
                    note="; ".join(notes) or None,
                )
            )
            continue
        present = a or b
        assert present is not None
        verdict: Verdict
        if key != present.name and intent is not None and intent.covers(frozenset({"compare"})):
            verdict, note = "intended", intent.label
        elif (a is not None and a.passed) or (b is not None and not b.passed):
            verdict, note = "regression", "not checked in B" if b is None else "checked in B only"
        else:
            verdict, note = "changed", "not checked in B" if b is None else "checked in B only"
        rows.append(
            NumberComparison(
                stage=stage,
                name=present.name,
                a_observed=a.observed if a else None,
                b_observed=b.observed if b else None,
                expected=present.expected,
                a_passed=a.passed if a else None,
                b_passed=b.passed if b else None,
                verdict=verdict,
                note=note,
            )
        )
    return rows


def _number_rows(a: Side, b: Side, intent: _Intent | None, not_compared: list[str]) -> list[NumberComparison]:
    if a.report is None or b.report is None:
        if a.report is not None or b.report is not None:
            not_compared.append(f"numbers: {'A' if a.report is None else 'B'} has no report")
        return []
    rows: list[NumberComparison] = []
    compute_a, compute_b = _compute_checks(a), _compute_checks(b)
    if compute_a is not None and compute_b is not None:
        rows += _match_checks("device", compute_a, compute_b, intent)
    elif compute_a is not None or compute_b is not None:
        missing = "A" if compute_a is None else "B"
        not_compared.append(f"device compute: {missing}'s device probe ran no computation")
    sample_a, sample_b = a.report.stages.get("sample"), b.report.stages.get("sample")
    checks_a = sample_a.checks if sample_a else []
    checks_b = sample_b.checks if sample_b else []
    if checks_a and checks_b:
        rows += _match_checks("sample", checks_a, checks_b, intent)
    elif checks_a or checks_b:
        missing, result = ("A", sample_a) if not checks_a else ("B", sample_b)
        status = result.status if result else "not recorded"
        why = f": {one_line(result.reason, 120)}" if result and result.reason else ""
        not_compared.append(f"sample checks: {missing}'s sample stage has none ({status}{why})")
    return rows


def _packages(
    a: Side, b: Side, intent: _Intent | None, not_compared: list[str]
) -> tuple[InventoryDiff | None, Verdict | None, str | None]:
    freeze_a, freeze_b = _freeze(a), _freeze(b)
    if freeze_a is None or freeze_b is None:
        missing = "A and B have" if freeze_a is None and freeze_b is None else f"{'A' if freeze_a is None else 'B'} has"
        not_compared.append(
            f"packages: {missing} no inventory (give the {BUILD_FILE}, or the `orch rebuild` folder holding it)"
        )
        return None, None, None
    diff = diff_inventories(freeze_a[0], freeze_b[0], freeze_a[1])
    if diff.identical:
        return diff, "same", None
    if intent is not None and intent.covers(frozenset({"python"})):
        return diff, "intended", intent.label
    return diff, "changed", None


def _unintended(
    dossier: list[Difference],
    packages: InventoryDiff | None,
    packages_verdict: Verdict | None,
    system: list[Difference],
    stages: list[StageComparison],
    numbers: list[NumberComparison],
) -> list[str]:
    def stage_line(row: StageComparison) -> str:
        return f"{row.stage} stage {row.a} in A, {row.b} in B" + (f" ({row.note})" if row.note else "")

    def number_line(row: NumberComparison) -> str:
        def side(observed: str | None, passed: bool | None) -> str:
            return "not checked" if observed is None else f"{observed} ({'held' if passed else 'failed'})"

        return (
            f"{row.stage} check {row.name!r}: A {side(row.a_observed, row.a_passed)}, "
            f"B {side(row.b_observed, row.b_passed)}; expected {row.expected}"
        )

    def difference_line(row: Difference) -> str:
        return f"{row.field} changed: {row.a} → {row.b}" + (f" ({row.note})" if row.note else "")

    lines = [stage_line(row) for row in stages if row.verdict == "regression"]
    lines += [number_line(row) for row in numbers if row.verdict == "regression"]
    if packages is not None and packages_verdict == "changed":
        lines += [
            f"package {change.name} changed: {change.reference} → {change.observed}" for change in packages.changed
        ]
        lines += [f"package added: {line}" for line in packages.added]
        lines += [f"package removed: {line}" for line in packages.removed]
    lines += [difference_line(row) for row in system if row.verdict == "changed"]
    lines += [stage_line(row) for row in stages if row.verdict == "changed"]
    lines += [number_line(row) for row in numbers if row.verdict == "changed"]
    lines += [difference_line(row) for row in dossier if row.verdict == "changed"]
    return [one_line(line, 1000) for line in lines]


def compare_sides(a: Side, b: Side) -> Comparison:
    """Compare B (the rebuild) with A (the reference). Pure: reads nothing beyond the two sides."""
    notes = [*a.notes, *b.notes]
    not_compared: list[str] = []
    intent = _intent(a, b, notes)
    dossier = _dossier_rows(a, b, intent)
    packages, packages_verdict, packages_note = _packages(a, b, intent, not_compared)
    system: list[Difference] = []
    for field, read, sections in SYSTEM_FIELDS:
        value_a, value_b = read(a), read(b)
        if value_a is None or value_b is None:
            if value_a is not None or value_b is not None:
                not_compared.append(f"{field}: not recorded in {'A' if value_a is None else 'B'}")
            continue
        system.append(_difference(field, value_a, value_b, intent, sections))
    stages = _stage_rows(a, b, not_compared)
    numbers = _number_rows(a, b, intent, not_compared)

    verdicts: list[Verdict] = [row.verdict for row in [*dossier, *system]]
    verdicts += [row.verdict for row in stages] + [row.verdict for row in numbers]
    if packages_verdict is not None:
        verdicts.append(packages_verdict)
    overall: Overall
    if any(verdict in UNINTENDED for verdict in verdicts):
        overall = "regressed"
    elif all(verdict == "same" for verdict in verdicts):
        overall = "identical"
    else:
        overall = "equivalent"
    return Comparison(
        a=_side_info(a),
        b=_side_info(b),
        intent=intent.label if intent else None,
        dossier=dossier,
        packages=packages,
        packages_verdict=packages_verdict,
        packages_note=packages_note,
        system=system,
        stages=stages,
        numbers=numbers,
        not_compared=not_compared,
        notes=notes,
        unintended=_unintended(dossier, packages, packages_verdict, system, stages, numbers),
        verdict=overall,
    )


# -- rendering -----------------------------------------------------------------------------------------

VERDICT_TEXT: dict[Verdict, str] = {
    "same": "same",
    "within_tolerance": "same within tolerance",
    "intended": "intended",
    "improved": "improved",
    "host": "differs by host",
    "changed": "changed",
    "regression": "regression",
}

OVERALL_TEXT: dict[Overall, str] = {
    "identical": "identical: nothing differs",
    "equivalent": "equivalent: only intended differences, host differences, improvements and numbers within tolerance",
    "regressed": "regressed: B differs from A in ways no declared variant explains",
}


def verdict_label(verdict: Verdict, note: str | None = None, *, intent: str | None = None) -> str:
    """`intended (variant cpu: description)` for an intended row, the plain verdict otherwise.

    Given the comparison's `intent`, an intended row names the variant only (`intended (variant cpu)`):
    the renderings state the description once, at the top, instead of on every row.
    """
    if verdict != "intended" or not note:
        return VERDICT_TEXT[verdict]
    if intent and note.startswith(intent):
        note = intent.split(": ", 1)[0] + note[len(intent) :]
    return f"intended ({note})"


def short(value: str | None) -> str:
    """Identities and image ids shortened for people (`sha256:` kept); the JSON keeps them whole."""
    if value is None:
        return "—"
    if value.startswith("sha256:"):
        return value[:19]
    return value[:12] if re.fullmatch(r"[0-9a-f]{64}", value) else value


def side_summary(side: SideInfo) -> list[tuple[str, str]]:
    """(label, value) rows that describe one side, shared by the Markdown and terminal renderings."""
    variant = "none (reference)"
    if side.variant is not None:
        variant = side.variant.name + ("" if side.variant.declared else " (not declared)")
    results = []
    if side.build_status:
        results.append(f"build {side.build_status}")
    if side.report_verdict:
        results.append(f"report {side.report_verdict}")
    return [
        ("read", ", ".join(side.files)),
        ("dossier", f"{side.dossier} ({short(side.identity)})"),
        ("variant", variant),
        ("platform", side.platform or "—"),
        ("image", short(side.image)),
        ("result", ", ".join(results)),
    ]


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>&|~])")
_BACKTICKS = re.compile(r"`+")


def _md(value: str) -> str:
    """Prose, escaped so it renders as written; one line (a newline would end a table row)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", one_line(value, 10_000))


def _md_code(value: str | None) -> str:
    """A literal value in a code span, `|` escaped for table cells (GFM splits cells first)."""
    if value is None:
        return "—"
    value = one_line(value, 10_000)
    if not value:
        return "*(empty)*"
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(value)), default=0) + 1)
    padded = f" {value} " if value.startswith("`") or value.endswith("`") else value
    return f"{fence}{padded}{fence}".replace("|", r"\|")


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _md_differences(title: str, rows: list[Difference], c: Comparison) -> list[str]:
    lines = [f"## {title}", ""]
    differing = [row for row in rows if row.verdict != "same"]
    if differing:
        lines += [_md_row(["", "A", "B", "Verdict"]), _md_row(["---", "---", "---", "---"])]
        for row in differing:
            a, b = (short(row.a), short(row.b)) if row.field == "identity" else (row.a, row.b)
            lines.append(
                _md_row(
                    [
                        _md(row.field),
                        _md_code(a),
                        _md_code(b),
                        _md(verdict_label(row.verdict, row.note, intent=c.intent)),
                    ]
                )
            )
        lines.append("")
    same = [row.field for row in rows if row.verdict == "same"]
    if same:
        lines += ["Same on both sides: " + ", ".join(_md(field) for field in same) + ".", ""]
    if not rows:
        lines += ["Nothing recorded on both sides.", ""]
    return lines


def _md_passed(passed: bool | None) -> str:
    return "" if passed is None else (" ✅" if passed else " ❌")


def render_compare_markdown(comparison: Comparison) -> str:
    """The comparison as GitHub-flavoured Markdown (a CI job summary, a PR comment). Deterministic."""
    c = comparison
    lines = [f"# orch compare: {c.verdict}", "", _md(OVERALL_TEXT[c.verdict]), ""]
    if c.intent:
        lines += [
            f"**{_md(verdict_label('intended', c.intent))}**: the rows marked intended are this declared variant's.",
            "",
        ]
    lines += [_md_row(["", "A (reference)", "B (rebuild)"]), _md_row(["---", "---", "---"])]
    for (label, value_a), (_, value_b) in zip(side_summary(c.a), side_summary(c.b), strict=True):
        lines.append(_md_row([label, _md_code(value_a), _md_code(value_b)]))
    lines.append("")
    if c.unintended:
        lines += ["## Unintended differences", ""]
        lines += [f"- {_md(line)}" for line in c.unintended]
        lines.append("")
    lines += _md_differences("Dossier", c.dossier, c)
    lines += ["## Packages", ""]
    if c.packages is None:
        lines += ["Not compared (see below).", ""]
    elif c.packages.identical:
        lines += ["Identical.", ""]
    else:
        assert c.packages_verdict is not None
        lines += [f"Verdict: {_md(verdict_label(c.packages_verdict, c.packages_note, intent=c.intent))}.", ""]
        lines += [_md_row(["Package", "A", "B"]), _md_row(["---", "---", "---"])]
        for change in c.packages.changed:
            lines.append(_md_row([_md_code(change.name), _md_code(change.reference), _md_code(change.observed)]))
        for line in c.packages.removed:
            name, _, version = line.partition("==")
            lines.append(_md_row([_md_code(name), _md_code(version), "*(absent)*"]))
        for line in c.packages.added:
            name, _, version = line.partition("==")
            lines.append(_md_row([_md_code(name), "*(absent)*", _md_code(version)]))
        lines.append("")
    lines += _md_differences("System", c.system, c)
    lines += ["## Stages", ""]
    if c.stages:
        lines += [_md_row(["Stage", "A", "B", "Verdict", "B's first error / reason"]), _md_row(["---"] * 5)]
        for stage in c.stages:
            lines.append(
                _md_row(
                    [
                        stage.stage,
                        _md_code(stage.a),
                        _md_code(stage.b),
                        _md(VERDICT_TEXT[stage.verdict]),
                        _md(stage.note or ""),
                    ]
                )
            )
    else:
        lines.append("Not compared (see below).")
    lines += ["", "## Numbers", ""]
    if c.numbers:
        lines += [_md_row(["Stage", "Check", "A", "B", "Expected (B)", "Verdict"]), _md_row(["---"] * 6)]
        for number in c.numbers:
            verdict = verdict_label(number.verdict, number.note, intent=c.intent)
            if number.note and number.verdict != "intended":
                verdict += f" ({number.note})"
            lines.append(
                _md_row(
                    [
                        number.stage,
                        _md_code(number.name),
                        _md_code(number.a_observed) + _md_passed(number.a_passed),
                        _md_code(number.b_observed) + _md_passed(number.b_passed),
                        _md_code(number.expected),
                        _md(verdict),
                    ]
                )
            )
    else:
        lines.append("No check recorded on both sides.")
    lines.append("")
    if c.not_compared or c.notes:
        lines += ["## Not compared, and notes", ""]
        lines += [f"- {_md(line)}" for line in [*c.not_compared, *c.notes]]
        lines.append("")
    return "\n".join(lines)
