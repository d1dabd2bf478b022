"""What every rendering of a report shows the same way: stage order, statuses, durations, one-line
summaries and flattened facts, and the `PageView` the HTML and Markdown templates both lay out. Pure
and deterministic, so Markdown, HTML and JUnit never disagree.

Nothing here escapes for a format: HTML is autoescaped, Markdown goes through the `md` and `code`
filters (both registered in orchestrator/resources.py), JUnit through ElementTree. What no format can
carry (control characters, lone surrogates) is handled by orchestrator/text.py, which this module
re-exports for its renderers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.model.checks import first_failure, mismatch
from orchestrator.model.recorded import Recorded
from orchestrator.model.report import STAGES, Report, StageName, StageResult
from orchestrator.text import MAX_LINE_CHARS, clean, one_line

# Complete, because `clean`, `one_line` and `MAX_LINE_CHARS` are re-exported: modules that read them from
# here (compare) keep working; their home is orchestrator/text.py, where new code imports them from.
__all__ = [
    "MAX_FACT_CHARS",
    "MAX_LINE_CHARS",
    "MAX_LIST_ITEMS",
    "STAGE_ORDER",
    "STATUS_LABEL",
    "CheckRow",
    "LayerRow",
    "PageView",
    "StageView",
    "checks_summary",
    "clean",
    "flatten_facts",
    "format_duration",
    "format_seconds",
    "headline",
    "one_line",
    "ordered_stages",
    "page_view",
    "scalar_text",
    "short_image_id",
]

#: A list longer than this shows its first items and a count of the rest.
MAX_LIST_ITEMS = 8
#: A fact string longer than this is cut, with a count; report.json keeps the whole value.
MAX_FACT_CHARS = 300
#: `STAGES`, typed as stage names: the order every rendering shows, whatever the order in `report.stages`.
STAGE_ORDER: tuple[StageName, ...] = STAGES

STATUS_LABEL = {"passed": "passed", "failed": "failed", "skipped": "skipped", "not_run": "not run"}


def ordered_stages(report: Report) -> list[StageResult]:
    """The four stages, always in `STAGES` order.

    A stage missing from `report.stages` (a report written by a run that stopped early) is shown as
    `not_run` rather than silently dropped: every rendering always has four layers.
    """
    return [report.stages.get(name) or _missing(name) for name in STAGE_ORDER]


def _missing(name: StageName) -> StageResult:
    return StageResult(name=name, status="not_run", reason="not recorded in this report")


def format_duration(stage: StageResult) -> str:
    """`0.21 s`, `7.9 s`, `2 min 05 s`; a dash for a stage that never ran (it has no duration)."""
    seconds = stage.duration_s
    if stage.status in ("skipped", "not_run") and seconds == 0:
        return "—"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def format_seconds(seconds: float) -> str:
    """A JUnit `time` attribute: plain seconds, three decimals, so the same report gives the same file."""
    return f"{seconds:.3f}"


def checks_summary(stage: StageResult) -> str:
    if not stage.checks:
        return "no checks"
    held = sum(check.passed for check in stage.checks)
    return f"{held}/{len(stage.checks)} checks held"


def headline(stage: StageResult) -> tuple[str | None, str]:
    """The one line that says why a stage has its status: `(step, text)`; `step` is None when there is none.

    Failed: the first error, else the first failed check. Skipped / not run: the reason. Passed: the
    count of checks that held. A reader scanning the four layers needs nothing else to know where to look.
    """
    if stage.status == "failed":
        if stage.first_error is not None:
            return one_line(stage.first_error.step, 60), one_line(stage.first_error.message)
        failed = first_failure(stage.checks)
        if failed is not None:
            return one_line(failed.name, 60), one_line(mismatch(failed))
        return None, "failed (no error recorded)"
    if stage.status in ("skipped", "not_run"):
        return None, one_line(stage.reason) if stage.reason else "no reason recorded"
    measured = measured_figures(stage)
    return None, checks_summary(stage) + (f" · {measured}" if measured else "")


def measured_figures(stage: StageResult) -> str:
    """What a passed stage measured, for its card: the sample's comparisons ("embeddings: max |Δ| = 0") and the
    image's inventory against the reference, so a reader sees the figures, not only that checks held."""
    shown = [
        f"{check.name.split(':', 1)[0]}: {check.observed}"
        for check in stage.checks
        if " vs " in check.name or check.name == "inventory matches the reference"
    ]
    return one_line("; ".join(shown[:3]), 160) if shown else ""


def scalar_text(value: Any) -> str:
    """A fact value as its JSON spelling (`null`, `true`, `3.12`), strings as they are."""
    if isinstance(value, str):
        return clean(value) if value else '""'
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    return clean(str(value))


def _cut(text: str) -> str:
    if len(text) <= MAX_FACT_CHARS:
        return text
    return f"{text[:MAX_FACT_CHARS]}… (+{len(text) - MAX_FACT_CHARS} chars)"


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, Mapping | list | tuple)


def flatten_facts(facts: Mapping[str, Any] | Recorded) -> list[tuple[str, str]]:
    """Nested facts as `(dotted.key, value)` rows, in the order the probe reported them.

    Dicts become dotted keys, lists of scalars one comma-separated value, lists of objects indexed
    keys (`gpus[0].name`); a list longer than `MAX_LIST_ITEMS` shows its head and `(+N more)`.
    """
    rows: list[tuple[str, str]] = []
    if isinstance(facts, Recorded):
        facts = facts.recorded()
    for key, value in facts.items():
        _flatten(clean(str(key)), value, rows)
    return rows


def _flatten(key: str, value: Any, rows: list[tuple[str, str]]) -> None:
    if isinstance(value, Mapping):
        if not value:
            rows.append((key, "{}"))
        for sub, item in value.items():
            _flatten(f"{key}.{clean(str(sub))}", item, rows)
        return
    if isinstance(value, list | tuple):
        _flatten_list(key, value, rows)
        return
    rows.append((key, _cut(scalar_text(value))))


def _flatten_list(key: str, items: Sequence[Any], rows: list[tuple[str, str]]) -> None:
    if not items:
        rows.append((key, "[]"))
        return
    shown, hidden = items[:MAX_LIST_ITEMS], len(items) - MAX_LIST_ITEMS
    more = f" … (+{hidden} more)" if hidden > 0 else ""
    if all(_is_scalar(item) for item in items):
        rows.append((key, _cut(", ".join(scalar_text(item) for item in shown)) + more))
        return
    for index, item in enumerate(shown):
        _flatten(f"{key}[{index}]", item, rows)
    if hidden > 0:
        rows.append((f"{key}[…]", f"+{hidden} more"))


def short_image_id(image_id: str) -> str:
    """`sha256:` and 12 hex digits, as `docker images` shows it."""
    algorithm, _, digest = image_id.rpartition(":")
    return f"{algorithm}:{digest[:12]}" if algorithm else image_id[:12]


# -- the view every template lays out -------------------------------------------------------------


@dataclass(frozen=True)
class CheckRow:
    name: str
    expected: str
    observed: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class LayerRow:
    """One row of the image's layer table: the base (its layers summed), each build step, or the total."""

    step: str
    size: str  # for people: "1.23 GB"
    share: str  # of the whole image: "42.0 %"


@dataclass(frozen=True)
class StageView:
    name: str
    status: str  # the JSON word, used as a CSS class
    label: str  # the word a reader sees
    duration: str
    step: str | None  # the card's one line: `step: text`, or just `text`
    line: str
    checks_summary: str
    reason: str | None
    warnings: list[str]
    first_warning: str | None  # the first warning on one line, for a summary table's cell
    error_step: str | None
    error_message: str | None
    checks: list[CheckRow]
    facts: list[tuple[str, str]]
    #: The image's layers (image stage, from build.json), in build order with the total last; [] when unknown.
    layers: list[LayerRow]


@dataclass(frozen=True)
class PageView:
    title: str
    name: str
    verdict: str
    path: str
    identity: str
    short_identity: str
    variant: str | None
    platform: str
    backend_version: str | None
    image_ref: str | None
    image_id: str | None
    short_image_id: str | None
    created: str
    orch_version: str
    format: str
    stages: list[StageView]
    notes: list[str]


def _stage_view(stage: StageResult) -> StageView:
    step, line = headline(stage)
    error = stage.first_error if stage.status == "failed" else None
    return StageView(
        name=stage.name,
        status=stage.status,
        label=STATUS_LABEL[stage.status],
        duration=format_duration(stage),
        step=step,
        line=line,
        checks_summary=checks_summary(stage),
        reason=clean(stage.reason) if stage.reason else None,
        warnings=[clean(warning) for warning in stage.warnings],
        first_warning=one_line(stage.warnings[0], 120) if stage.warnings else None,
        error_step=clean(error.step) if error else None,
        error_message=clean(error.message) if error else None,
        checks=[
            CheckRow(
                name=clean(check.name),
                expected=clean(check.expected),
                observed=clean(check.observed),
                passed=check.passed,
                detail=clean(check.detail or ""),
            )
            for check in stage.checks
        ],
        facts=[(key, value) for key, value in flatten_facts(stage.facts) if not key.startswith("layers[")],
        layers=layer_rows(stage),
    )


def format_bytes(size: int) -> str:
    """Decimal units, as `docker images` shows sizes."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} B"


def layer_rows(stage: StageResult) -> list[LayerRow]:
    """The base image as one row (its layers summed), then each step of the build that added a layer, then the
    total. Steps that added nothing (ENV, LABEL, …) are left out of the table; the total counts every layer."""
    layers = getattr(stage.facts, "layers", None) or []
    total = sum(layer.size_bytes for layer in layers)
    if not layers:
        return []

    def row(step: str, size: int) -> LayerRow:
        share = f"{100 * size / total:.1f} %" if total else "0.0 %"
        return LayerRow(step=clean(one_line(step, 160)), size=format_bytes(size), share=share)

    base = [layer for layer in layers if layer.step == "base image"]
    rows = [row(f"base image ({len(base)} layer{'s' if len(base) != 1 else ''})", sum(x.size_bytes for x in base))]
    rows += [row(layer.step, layer.size_bytes) for layer in layers if layer.step != "base image" and layer.size_bytes]
    return [*rows, row(f"total ({len(layers)} layers)", total)]


def page_view(report: Report) -> PageView:
    dossier, image = report.dossier, report.image
    name = clean(dossier.name)
    return PageView(
        title=f"orch report: {name} — {report.verdict}",
        name=name,
        verdict=report.verdict,
        path=clean(dossier.path),
        identity=clean(dossier.identity),
        short_identity=clean(dossier.identity[:12]),
        variant=clean(dossier.variant) if dossier.variant else None,
        platform=clean(dossier.platform),
        backend_version=clean(dossier.backend_version) if dossier.backend_version else None,
        image_ref=clean(image.ref) if image else None,
        image_id=clean(image.id) if image else None,
        short_image_id=clean(short_image_id(image.id)) if image else None,
        created=clean(report.created),
        orch_version=clean(report.orch_version),
        format=report.format,
        stages=[_stage_view(stage) for stage in ordered_stages(report)],
        notes=[clean(note) for note in report.notes],
    )
