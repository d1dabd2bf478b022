"""The morning's summary of one night: `summary.json` (this model), and its renderings.

Built from the night's state and its cells' folders (reports, build records) plus the previous
nights for the drift and the trends; `orch nightly summary NIGHT_DIR` rebuilds it from the same
files, so it can always be re-rendered. Everything taken from a report is untrusted text: the models
hold it cleaned, the renderers (`summary_render`) escape it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import OrchError
from orchestrator.fsutil import atomic_write_text
from orchestrator.nightly import history
from orchestrator.nightly.cell import CellStatus
from orchestrator.nightly.drift import CellFacts, cell_drift, cell_facts
from orchestrator.nightly.history import NightState
from orchestrator.nightly.summary_model import FILES, CellSummary, NightSummary, TrendPoint
from orchestrator.nightly.summary_render import render_html, render_junit, render_markdown
from orchestrator.text import one_line

PreviousLookup = Callable[[str], "tuple[str, Path, CellStatus] | None"]


def _trend(cell_id: str, night_dir: Path, status: CellStatus, nights: list[Path], limit: int) -> tuple[TrendPoint, ...]:
    points: list[TrendPoint] = []
    for night in [*reversed(nights[: limit - 1]), night_dir]:
        folder = night / cell_id
        if night == night_dir:
            night_status: CellStatus | None = status
        else:
            try:
                found = history.read_state(night).cell(cell_id)
            except OrchError:  # a damaged old night only leaves a gap in the plot
                continue
            if found is None:
                continue
            night_status = found.outcome.status if found.outcome else None
        facts = cell_facts(folder) if folder.is_dir() else CellFacts()
        points.append(
            TrendPoint(
                night=night.name,
                status=night_status,
                build_s=facts.build_s,
                criteria={criterion.name: criterion.value for criterion in facts.criteria},
            )
        )
    return tuple(points)


def build_summary(
    night_dir: Path,
    state: NightState,
    *,
    previous: PreviousLookup,
    trend_nights: int,
    nights: list[Path],
) -> NightSummary:
    """`nights`: the nights before this one, newest first (for the trends)."""
    cells: list[CellSummary] = []
    for cell in state.cells:
        outcome = cell.outcome
        status: CellStatus = outcome.status if outcome is not None else "cancelled"
        folder = night_dir / cell.cell_id
        facts = cell_facts(folder)
        reference_run = Path(cell.reference_run) if cell.reference_run else None
        drift = cell_drift(cell.cell_id, folder, status, previous(cell.cell_id), reference_run)
        first_failing = None if status == "passed" else (facts.first_failing_stage or status)
        first_error = outcome.first_error if outcome is not None else "the cell never ran (night interrupted)"
        cells.append(
            CellSummary(
                cell_id=cell.cell_id,
                dossier=cell.dossier_name,
                variant=cell.variant,
                target=cell.target,
                status=status,
                first_failing=first_failing,
                first_error=one_line(first_error, 300) if first_error else None,
                duration_s=outcome.duration_s if outcome is not None else 0.0,
                exit_code=outcome.exit_code if outcome is not None else None,
                handle=outcome.handle if outcome is not None else None,
                facts=facts,
                drift=drift,
                trend=_trend(cell.cell_id, night_dir, status, nights, trend_nights),
            )
        )
    rows: list[str] = []
    targets: list[str] = []
    for cell in state.cells:
        row = cell.dossier_name if cell.variant is None else f"{cell.dossier_name}.{cell.variant}"
        if row not in rows:
            rows.append(row)
        if cell.target not in targets:
            targets.append(cell.target)
    counts: dict[str, int] = {}
    for summary in cells:
        counts[summary.status] = counts.get(summary.status, 0) + 1
    return NightSummary(
        night=state.night,
        date=state.date,
        plan=state.plan,
        started=state.started,
        finished=state.finished,
        counts=dict(sorted(counts.items())),
        rows=tuple(rows),
        targets=tuple(targets),
        cells=tuple(cells),
        publish=state.publish,
    )


def write_summary(night_dir: Path, summary: NightSummary) -> dict[str, Path]:
    """All four files, rendered first, then written atomically; `summary.json` last (its presence means done)."""
    texts = {
        "markdown": render_markdown(summary),
        "html": render_html(summary),
        "junit": render_junit(summary),
        "json": summary.model_dump_json(indent=2) + "\n",
    }
    paths = {kind: night_dir / name for kind, name in FILES.items()}
    for kind in ("markdown", "html", "junit", "json"):
        atomic_write_text(paths[kind], texts[kind])
    return paths


def resummarise(night_dir: Path, trend_nights: int = 14) -> dict[str, Path]:
    """`orch nightly summary NIGHT_DIR`: the summary rebuilt from the night's files (and its history)."""
    state = history.read_state(night_dir)
    root = night_dir.parent.parent
    earlier = history.previous_nights(root, night_dir)

    def previous(cell_id: str) -> tuple[str, Path, CellStatus] | None:
        for night in earlier:
            try:
                found = history.read_state(night).cell(cell_id)
            except OrchError:
                continue
            if found is not None and found.outcome is not None:
                return night.name, night / cell_id, found.outcome.status
        return None

    summary = build_summary(night_dir, state, previous=previous, trend_nights=trend_nights, nights=earlier)
    return write_summary(night_dir, summary)
