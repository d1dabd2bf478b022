"""What changed in a cell: against the previous night, and against the reference.

Pure apart from reading the two cells' folders. The package, system and number rows are
`orch compare`'s (`compare.read.load_side` + `compare.verdict.compare_sides`): a night and `orch
compare A B` can never judge a layer differently. This module adds what only a series of nights has:
the status change (newly failing / fixed / still failing), the base image digest, build time and
image size, and each criterion as a number (`criteria`, for the trend plots and |Δ| between nights).

Against the reference: with the plan's `reference_run` (a reference rebuild's report/build), the same
comparison with it; without one, the reference is what the dossier declares, and each report already
holds the sample's comparison with the reference outputs: those criteria are shown as they held.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.compare.read import load_side
from orchestrator.compare.verdict import compare_sides
from orchestrator.documents import read_document
from orchestrator.errors import OrchError
from orchestrator.model.build_record import BUILD_FORMAT, BuildRecord
from orchestrator.model.comparison import Comparison
from orchestrator.model.inventory import InventoryDiff
from orchestrator.model.report import REPORT_FORMAT, Report, first_failed_stage
from orchestrator.nightly.cell import CellStatus
from orchestrator.text import one_line

StatusChange = Literal["new", "newly failing", "fixed", "still failing", "still passing"]

#: The sample's criteria: its comparisons with the reference outputs (`NAME: METRIC vs FILE`) and its
#: business checks (nearest-neighbour agreement, label equality); the rest is structure, not a number to follow.
_CRITERIA = re.compile(r" vs |: nearest-neighbour agreement|: label equality")
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf", re.IGNORECASE)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Criterion(_Frozen):
    """One sample criterion of one night: the check's name, its number, and whether it held."""

    name: str
    value: float | None
    observed: str
    expected: str
    passed: bool


class StageBrief(_Frozen):
    name: str
    status: str
    reason: str | None = None


class CellFacts(_Frozen):
    """What a cell's folder says, reduced to what a series of nights compares."""

    build_s: float | None = None
    image_bytes: int | None = None
    base_image_digest: str | None = None
    first_failing_stage: str | None = None
    criteria: tuple[Criterion, ...] = ()
    #: The report's four stages (none when the cell left no report).
    stages: tuple[StageBrief, ...] = ()


class Change(_Frozen):
    """One line of "what changed": its kind, and the sentence the summary prints."""

    kind: Literal["status", "package", "base-image", "host", "system", "number", "build-time", "image-size", "stage"]
    text: str


class CellDrift(_Frozen):
    cell_id: str
    #: The night compared with (`2026-12-01`), None when the cell is new tonight.
    previous_night: str | None
    status_change: StatusChange
    changes: tuple[Change, ...]
    packages: InventoryDiff | None = None
    #: One sentence: what the changes did (the verdict, the criteria that moved), None when nothing changed.
    effect: str | None = None
    #: Against the reference: the comparison's verdict (with `reference_run`) and its unintended lines,
    #: else the report's criteria against the dossier's reference outputs.
    reference_verdict: str | None = None
    reference_lines: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


#: How a value a hair below 1 is written (`min cosine = 1 (1 - 4.4e-16)`): the parenthesis is the exact value.
_ONE_MINUS = re.compile(r"\(1 - ((?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)\)")


def first_number(text: str) -> float | None:
    text = text.replace("\u2212", "-")
    below_one = _ONE_MINUS.search(text)
    if below_one:
        return 1.0 - float(below_one.group(1))
    match = _NUMBER.search(text)
    return float(match.group()) if match else None


def read_report(cell_dir: Path) -> Report | None:
    file = cell_dir / "report.json"
    if not file.is_file():
        return None
    try:
        return read_document(file, Report, REPORT_FORMAT, "report")
    except OrchError:
        return None


def read_build(cell_dir: Path) -> BuildRecord | None:
    file = cell_dir / "build.json"
    if not file.is_file():
        return None
    try:
        return read_document(file, BuildRecord, BUILD_FORMAT, "build record")
    except OrchError:
        return None


def _build_seconds(record: BuildRecord) -> float:
    durations = record.durations_s
    return round(durations["total"] if "total" in durations else sum(durations.values()), 3)


def cell_facts(cell_dir: Path) -> CellFacts:
    """The numbers of one cell's folder: build time, image size, base digest, first failing stage, criteria."""
    report, record = read_report(cell_dir), read_build(cell_dir)
    criteria: list[Criterion] = []
    stages: list[StageBrief] = []
    first_failing: str | None = None
    if report is not None:
        stages = [
            StageBrief(name=name, status=stage.status, reason=one_line(stage.reason, 200) if stage.reason else None)
            for name, stage in report.stages.items()
        ]
        first = first_failed_stage(report)
        first_failing = first.name if first is not None else None
        sample = report.stages.get("sample")
        for check in sample.checks if sample else []:
            if not _CRITERIA.search(check.name):
                continue
            criteria.append(
                Criterion(
                    name=check.name,
                    value=first_number(check.observed),
                    observed=one_line(check.observed, 160),
                    expected=one_line(check.expected, 160),
                    passed=check.passed,
                )
            )
    elif record is not None and record.status == "failed":
        first_failing = "image"
    return CellFacts(
        build_s=_build_seconds(record) if record is not None else None,
        image_bytes=record.image.size_bytes if record is not None and record.image is not None else None,
        base_image_digest=(record.base_image.digest or record.base_image.id) if record is not None else None,
        first_failing_stage=first_failing,
        criteria=tuple(criteria),
        stages=tuple(stages),
    )


def status_change(previous: CellStatus | None, current: CellStatus) -> StatusChange:
    if previous is None:
        return "new"
    if current == "passed":
        return "still passing" if previous == "passed" else "fixed"
    return "newly failing" if previous == "passed" else "still failing"


def _comparison(a: Path, b: Path) -> tuple[Comparison | None, str | None]:
    try:
        return compare_sides(load_side(a), load_side(b)), None
    except OrchError as exc:
        return None, one_line(exc.message, 200)


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _relative(before: float, after: float) -> float:
    return abs(after - before) / before if before else (0.0 if after == before else 1.0)


#: Build time and image size count as changed beyond these relative differences (noise below).
BUILD_TIME_TOLERANCE = 0.25
IMAGE_SIZE_TOLERANCE = 0.01


def _package_changes(diff: InventoryDiff) -> list[Change]:
    changes = [Change(kind="package", text=f"{c.name} {c.reference} → {c.observed}") for c in diff.changed]
    changes += [Change(kind="package", text=f"added {item}") for item in diff.added]
    changes += [Change(kind="package", text=f"removed {item}") for item in diff.removed]
    return changes


def _number_changes(before: CellFacts, after: CellFacts) -> list[Change]:
    changes: list[Change] = []
    earlier = {criterion.name: criterion for criterion in before.criteria}
    for criterion in after.criteria:
        old = earlier.get(criterion.name)
        if old is None:
            changes.append(Change(kind="number", text=f"{criterion.name}: new criterion, {criterion.observed}"))
            continue
        held = "" if old.passed == criterion.passed else (" (now holds)" if criterion.passed else " (now FAILS)")
        if old.value is not None and criterion.value is not None and old.value != criterion.value:
            delta = criterion.value - old.value
            changes.append(
                Change(
                    kind="number",
                    text=f"{criterion.name}: {old.value:.8g} → {criterion.value:.8g} (Δ {delta:+.3g}){held}",
                )
            )
        elif held:
            changes.append(Change(kind="number", text=f"{criterion.name}: {criterion.observed}{held}"))
    return changes


_VERDICT = {
    "newly failing": "the cell now fails",
    "fixed": "the cell now passes",
    "still failing": "the cell still fails",
    "still passing": "the cell still passes",
}


def effect_of(change: StatusChange, changes: list[Change]) -> str | None:
    """What tonight's changes did: the verdict, then each criterion, stage, build time or size that moved."""
    if change == "new" or not changes:
        return None
    moved = [c.text for c in changes if c.kind in ("number", "stage")] or ["no criterion moved"]
    costs = [c.text for c in changes if c.kind in ("build-time", "image-size")]
    return "; ".join([_VERDICT[change], *moved, *costs])


def cell_drift(
    cell_id: str,
    current_dir: Path,
    current_status: CellStatus,
    previous: tuple[str, Path, CellStatus] | None,
    reference_run: Path | None = None,
) -> CellDrift:
    """Drift of one cell: `previous` is (night name, that night's cell folder, its status) or None."""
    after = cell_facts(current_dir)
    changes: list[Change] = []
    notes: list[str] = []
    packages: InventoryDiff | None = None
    change = status_change(previous[2] if previous else None, current_status)
    if previous is not None:
        night, previous_dir, previous_status = previous
        if change in ("newly failing", "fixed") or previous_status != current_status:
            changes.append(Change(kind="status", text=f"{change}: {previous_status} → {current_status}"))
        before = cell_facts(previous_dir)
        has_documents = any(
            (d / name).is_file() for d in (previous_dir, current_dir) for name in ("report.json", "build.json")
        )
        comparison, why = _comparison(previous_dir, current_dir) if has_documents else (None, None)
        if why:
            notes.append(f"not compared with {night}: {why}")
        if comparison is not None:
            packages = comparison.packages
            if packages is not None:
                changes += _package_changes(packages)
            for row in comparison.system:
                if row.verdict != "same":
                    kind: Literal["host", "system"] = "host" if row.verdict == "host" else "system"
                    changes.append(Change(kind=kind, text=f"{row.field}: {row.a} → {row.b}"))
            for stage in comparison.stages:
                if stage.a != stage.b:
                    changes.append(Change(kind="stage", text=f"stage {stage.stage}: {stage.a} → {stage.b}"))
        if before.base_image_digest and after.base_image_digest and before.base_image_digest != after.base_image_digest:
            changes.append(
                Change(kind="base-image", text=f"base image {before.base_image_digest} → {after.base_image_digest}")
            )
        changes += _number_changes(before, after)
        if before.build_s and after.build_s and _relative(before.build_s, after.build_s) > BUILD_TIME_TOLERANCE:
            changes.append(Change(kind="build-time", text=f"build time {before.build_s:.0f} s → {after.build_s:.0f} s"))
        if (
            before.image_bytes
            and after.image_bytes
            and _relative(before.image_bytes, after.image_bytes) > IMAGE_SIZE_TOLERANCE
        ):
            changes.append(
                Change(
                    kind="image-size",
                    text=f"image size {_size(before.image_bytes)} → {_size(after.image_bytes)}",
                )
            )
    reference_verdict: str | None = None
    reference_lines: tuple[str, ...] = ()
    if reference_run is not None:
        comparison, why = _comparison(reference_run, current_dir)
        if comparison is not None:
            reference_verdict = comparison.verdict
            reference_lines = tuple(one_line(line, 200) for line in comparison.unintended)
        else:
            notes.append(f"not compared with the reference run {reference_run}: {why}")
    elif after.criteria:
        reference_verdict = "held" if all(c.passed for c in after.criteria) else "failed"
        reference_lines = tuple(f"{c.name}: {c.observed} (expected {c.expected})" for c in after.criteria)
    return CellDrift(
        cell_id=cell_id,
        previous_night=previous[0] if previous else None,
        status_change=change,
        changes=tuple(changes),
        packages=packages,
        effect=effect_of(change, changes),
        reference_verdict=reference_verdict,
        reference_lines=reference_lines,
        notes=tuple(notes),
    )
