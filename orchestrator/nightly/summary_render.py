"""The summary's renderings: `summary.md`, `junit.xml`, `summary.html` (self-contained, inline SVG trends).

Escaping is the house's: Markdown through `text.markdown_text`/`markdown_code` (the one Markdown
escaper), HTML through Jinja's autoescape in `templates/nightly/summary.html.j2` (as the report's page),
XML through ElementTree with `text.clean`. The SVG plots are numbers Python computes; no text from a
report ever reaches an attribute unescaped.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

from orchestrator.model.report import STAGES
from orchestrator.nightly.summary_model import CellSummary, NightSummary
from orchestrator.resources import nightly_templates_root, render_template
from orchestrator.text import clean, markdown_code, markdown_text, one_line

#: The matrix colour of a cell, by its first failing stage (or the outcome that stopped it).
COLOURS = {
    "passed": "#cdebd3",
    "image": "#f4b6b0",
    "host": "#f8cf9c",
    "device": "#d9c2ef",
    "sample": "#f7e79a",
    "timeout": "#c9d6e8",
    "environment": "#dddddd",
    "cancelled": "#dddddd",
    "pending-timeout": "#dddddd",
    "bad-input": "#f4b6b0",
    "error": "#f4b6b0",
    "failed": "#f4b6b0",
}


def _label(cell: CellSummary) -> str:
    if cell.status == "passed" or cell.first_failing in (None, cell.status):
        return cell.status
    return f"{cell.status}: {cell.first_failing}"


# -- Markdown -----------------------------------------------------------------------------------------


def render_markdown(summary: NightSummary) -> str:
    out = [
        f"# Night {markdown_text(summary.night)}",
        "",
        f"Plan {markdown_code(summary.plan)}, started {summary.started}, finished {summary.finished or 'not finished'}.",
        "",
        "Cells: " + ", ".join(f"{count} {status}" for status, count in summary.counts.items()) + ".",
        "",
        "## Matrix",
        "",
        "| dossier | " + " | ".join(markdown_code(target, cell=True) for target in summary.targets) + " |",
        "| --- |" + " --- |" * len(summary.targets),
    ]
    for row in summary.rows:
        cells = []
        for target in summary.targets:
            cell = summary.cell(row, target)
            cells.append("" if cell is None else markdown_text(_label(cell)).replace("|", "\\|"))
        out.append(f"| {markdown_code(row, cell=True)} | " + " | ".join(cells) + " |")
    failed = [cell for cell in summary.cells if cell.status != "passed"]
    if failed:
        out += ["", "## First errors", ""]
        for cell in failed:
            error = cell.first_error or "(no error recorded)"
            out.append(f"- {markdown_code(cell.cell_id)} ({markdown_text(_label(cell))}): {markdown_text(error)}")
    out += ["", "## What changed since the previous night", ""]
    changed = [cell for cell in summary.cells if cell.drift.changes or cell.drift.notes]
    if not changed:
        out.append("Nothing changed in any cell.")
    for cell in changed:
        since = cell.drift.previous_night or "no previous night"
        out.append(f"### {markdown_text(cell.cell_id)} (since {markdown_text(since)})")
        out.append("")
        out += [f"- {markdown_text(change.kind)}: {markdown_text(change.text)}" for change in cell.drift.changes]
        out += [f"- note: {markdown_text(note)}" for note in cell.drift.notes]
        if cell.drift.effect:
            out += ["", f"Effect: {markdown_text(cell.drift.effect)}."]
        out.append("")
    out += ["", "## Against the reference", ""]
    for cell in summary.cells:
        verdict = cell.drift.reference_verdict or "not compared"
        out.append(f"- {markdown_code(cell.cell_id)}: {markdown_text(verdict)}")
        out += [f"  - {markdown_text(line)}" for line in cell.drift.reference_lines]
    if summary.publish is not None:
        out += [
            "",
            "## Publishing",
            "",
            f"{markdown_text(summary.publish.status)}: {markdown_text(summary.publish.detail)}",
        ]
    return "\n".join(out).rstrip() + "\n"


# -- JUnit --------------------------------------------------------------------------------------------


def _stage_case(suite: ET.Element, cell: CellSummary, stage: str, report_stage: tuple[str, str | None] | None) -> str:
    case = ET.SubElement(suite, "testcase", {"classname": clean(f"nightly.{cell.cell_id}"), "name": stage, "time": "0"})
    message = one_line(cell.first_error or cell.status, 300)
    if report_stage is None:
        # No report: the cell stopped before its stages (environment, timeout, crash): the error is on `image`.
        if stage == "image":
            kind = "failure" if cell.status in ("failed", "timeout", "bad-input") else "error"
            ET.SubElement(case, kind, {"message": message, "type": cell.status}).text = clean(message)
            return kind
        ET.SubElement(case, "skipped", {"message": f"not run: the cell ended {cell.status}"})
        return "skipped"
    status, reason = report_stage
    if status == "failed":
        text = message if cell.first_failing == stage else f"stage {stage} failed"
        ET.SubElement(case, "failure", {"message": text, "type": "failed"}).text = clean(text)
        return "failure"
    if status in ("skipped", "not_run"):
        ET.SubElement(case, "skipped", {"message": clean(one_line(reason or status, 300))})
        return "skipped"
    return "passed"


def render_junit(summary: NightSummary) -> str:
    """One `<testsuite>` per cell, one `<testcase>` per stage; the first error on the first failing stage."""
    root = ET.Element("testsuites", {"name": clean(f"orch nightly {summary.night}")})
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for cell in summary.cells:
        suite = ET.SubElement(root, "testsuite", {"name": clean(cell.cell_id), "time": f"{cell.duration_s:.3f}"})
        stages = _stages(cell)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for stage in STAGES:
            kind = _stage_case(suite, cell, stage, stages.get(stage) if stages else None)
            counts["tests"] += 1
            if kind == "failure":
                counts["failures"] += 1
            elif kind == "error":
                counts["errors"] += 1
            elif kind == "skipped":
                counts["skipped"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _stages(cell: CellSummary) -> dict[str, tuple[str, str | None]]:
    return {stage.name: (stage.status, stage.reason) for stage in cell.facts.stages}


# -- HTML ---------------------------------------------------------------------------------------------

PLOT_W, PLOT_H, PAD = 160, 36, 3


@dataclass(frozen=True)
class Plot:
    title: str
    points: str  # SVG polyline points, numbers only
    dots: tuple[tuple[float, float], ...]
    first: str
    last: str


def _plot(title: str, values: list[float | None]) -> Plot | None:
    known = [(index, value) for index, value in enumerate(values) if value is not None and math.isfinite(value)]
    if not known:
        return None
    low = min(value for _, value in known)
    high = max(value for _, value in known)
    span = high - low
    step = (PLOT_W - 2 * PAD) / max(1, len(values) - 1)
    coords = tuple(
        (
            round(PAD + index * step, 1),
            round(PLOT_H - PAD - (value - low) / span * (PLOT_H - 2 * PAD), 1) if span else PLOT_H / 2,
        )
        for index, value in known
    )
    return Plot(
        title=title,
        points=" ".join(f"{x},{y}" for x, y in coords),
        dots=coords,
        first=f"{known[0][1]:.6g}",
        last=f"{known[-1][1]:.6g}",
    )


def _plots(cell: CellSummary) -> list[Plot]:
    plots = [_plot("build time (s)", [point.build_s for point in cell.trend])]
    names: list[str] = []
    for point in cell.trend:
        names += [name for name in point.criteria if name not in names]
    plots += [_plot(name, [point.criteria.get(name) for point in cell.trend]) for name in names]
    return [plot for plot in plots if plot is not None]


def html_view(summary: NightSummary) -> dict[str, Any]:
    matrix = []
    for row in summary.rows:
        entries = []
        for target in summary.targets:
            cell = summary.cell(row, target)
            entries.append(
                None
                if cell is None
                else {
                    "id": cell.cell_id,
                    "label": _label(cell),
                    "colour": COLOURS.get(cell.first_failing or "passed", "#eeeeee"),
                }
            )
        matrix.append({"row": row, "cells": entries})
    cells = [
        {
            "id": cell.cell_id,
            "label": _label(cell),
            "colour": COLOURS.get(cell.first_failing or "passed", "#eeeeee"),
            "first_error": cell.first_error,
            "duration": f"{cell.duration_s:.1f} s",
            "since": cell.drift.previous_night,
            "status_change": cell.drift.status_change,
            "effect": cell.drift.effect,
            "changes": [f"{change.kind}: {change.text}" for change in cell.drift.changes],
            "notes": list(cell.drift.notes),
            "reference_verdict": cell.drift.reference_verdict or "not compared",
            "reference_lines": list(cell.drift.reference_lines),
            "plots": _plots(cell),
            "nights": len(cell.trend),
        }
        for cell in summary.cells
    ]
    return {
        "night": summary.night,
        "plan": summary.plan,
        "started": summary.started,
        "finished": summary.finished or "not finished",
        "counts": summary.counts,
        "targets": list(summary.targets),
        "matrix": matrix,
        "cells": cells,
        "failed": [cell for cell in cells if cell["label"] != "passed"],
        "publish": summary.publish,
        "plot": {"w": PLOT_W, "h": PLOT_H},
        "legend": [
            (name, colour) for name, colour in COLOURS.items() if name in ("passed", *STAGES, "timeout", "environment")
        ],
    }


def render_html(summary: NightSummary) -> str:
    text = render_template(nightly_templates_root(), "summary.html.j2", autoescape=True, page=html_view(summary))
    return text.rstrip("\n") + "\n"
