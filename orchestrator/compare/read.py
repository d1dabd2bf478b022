"""Reading the two sides of `orch compare`: a report, a build record, or a folder holding them.

Also the typed facts of one side (`image_facts`, `host_facts`, `device_facts`): every fact the
comparison reads is a declared field of `orchestrator.model.facts`, so renaming one is a mypy error.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import ValidationError

from orchestrator.documents import read_json, read_one_of
from orchestrator.dossier.load import read_declaration
from orchestrator.errors import BadInput, DossierError
from orchestrator.model.build_record import BUILD_FORMAT, BuildRecord
from orchestrator.model.comparison import VariantInfo
from orchestrator.model.environment import ENVIRONMENT_FILE, EnvironmentFile, EnvironmentSummary
from orchestrator.model.facts import DeviceStageFacts, HostStageFacts, ImageStageFacts
from orchestrator.model.report import REPORT_FORMAT, Report
from orchestrator.report.view import one_line

REPORT_FILE = "report.json"
BUILD_FILE = "build.json"
#: Sections of a dossier a variant can replace, in the order the dossier declares them.
VARIANT_SECTIONS = ("system", "python", "compare")


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
    #: The per-file list of the side's environment digest (environment.json beside it), when it was found.
    environment_files: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.report is None and self.record is None:
            raise ValueError("a side needs a report or a build record")

    @property
    def files(self) -> list[str]:
        found = [str(file) for file in (self.report_file, self.record_file) if file is not None]
        return found or [str(self.path)]

    @property
    def dossier_name(self) -> str:
        return self.report.dossier.name if self.report else record_of(self).dossier.name

    @property
    def dossier_path(self) -> str:
        return self.report.dossier.path if self.report else record_of(self).dossier.path

    @property
    def identity(self) -> str:
        return self.report.dossier.identity if self.report else record_of(self).dossier.identity

    @property
    def variant_name(self) -> str | None:
        return self.report.dossier.variant if self.report else record_of(self).dossier.variant

    @property
    def image_id(self) -> str | None:
        if self.report is not None:
            return self.report.image.id if self.report.image else None
        record = record_of(self)
        return record.image.id if record.image else None


def record_of(side: Side) -> BuildRecord:
    assert side.record is not None
    return side.record


# -- the facts of one side -----------------------------------------------------------------------------


def image_facts(side: Side) -> ImageStageFacts | None:
    stage = side.report.stages.get("image") if side.report else None
    return stage.facts if stage is not None and isinstance(stage.facts, ImageStageFacts) else None


def host_facts(side: Side) -> HostStageFacts | None:
    stage = side.report.stages.get("host") if side.report else None
    return stage.facts if stage is not None and isinstance(stage.facts, HostStageFacts) else None


def device_facts(side: Side) -> DeviceStageFacts | None:
    stage = side.report.stages.get("device") if side.report else None
    return stage.facts if stage is not None and isinstance(stage.facts, DeviceStageFacts) else None


# -- the environment digest's per-file list -----------------------------------------------------------

#: environment.json of torch's CPU build is ~4 MB (22 000 files); the bound leaves room for CUDA builds.
MAX_ENVIRONMENT_BYTES = 96 << 20


def environment_of(side: Side) -> EnvironmentSummary | None:
    """The side's environment digest: its build record's inventory, else its report's image facts."""
    if side.record is not None and side.record.inventory is not None and side.record.inventory.environment:
        return side.record.inventory.environment
    facts = image_facts(side)
    return facts.environment if facts is not None else None


def read_environment_file(path: Path, summary: EnvironmentSummary) -> tuple[dict[str, str] | None, str | None]:
    """The per-file list at `path` when it is a regular file that folds to `summary`'s digest; else (None, why)."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{path} not used: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return None, f"{path} not used: not a regular file"
    if info.st_size > MAX_ENVIRONMENT_BYTES:
        return None, f"{path} not used: {info.st_size} bytes, over the limit of {MAX_ENVIRONMENT_BYTES}"
    try:
        listed = EnvironmentFile.model_validate(read_json(path, "an environment file (orch.environment/1)"))
    except BadInput as exc:
        return None, f"{path} not used: {one_line(exc.message, 200)}"
    except ValidationError as exc:
        return None, f"{path} not used: {one_line(str(exc.errors()[0]['msg']), 200)}"
    if listed.summary.digest != summary.digest:
        return None, f"{path} not used: it lists another environment ({listed.summary.digest[:19]})"
    return dict(listed.files), None


def environment_file_beside(side_path: Path) -> Path:
    """Where a side's environment.json lies: in the folder given, or beside the file given."""
    return (side_path if side_path.is_dir() else side_path.parent) / ENVIRONMENT_FILE


# -- reading -------------------------------------------------------------------------------------------


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

    Only the dossier's own fields are read (`read_declaration`: no referenced file has to exist any
    more). A dossier that is gone or cannot be parsed leaves the recorded name standing as declared,
    with no description: see `orchestrator.compare`.
    """
    path = Path(dossier_path)
    recorded = "orch records only variants the dossier declares"
    try:
        dossier = read_declaration(path)
    except DossierError as exc:
        return VariantInfo(
            name=name,
            declared=True,
            source=f"recorded; dossier not readable or no longer valid: {one_line(exc.message, 300)}; {recorded}",
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
    summary = environment_of(side)
    if summary is not None:
        files, why = read_environment_file(environment_file_beside(path), summary)
        side = replace(side, environment_files=files, notes=side.notes + ((why,) if why else ()))
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
