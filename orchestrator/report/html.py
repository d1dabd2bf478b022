"""`report.html`: one self-contained page, the four layers at a glance, the detail below.

The template is a file (`templates/report/report.html.j2`, shipped as `orchestrator.templates`) read
through `orchestrator.resources`, like the Dockerfile templates. Unlike those, this environment
autoescapes: every value from the report can be a user string, and the template never marks one
safe. Python prepares plain view objects (already flattened, cleaned, formatted) so the template only
lays them out; `StrictUndefined` turns a typo in it into an error rather than an empty cell.

Self-contained means: inline CSS, no script, no font, no image, no external URL; links are only
in-page anchors. The page opens from a CI artefact store, an e-mail or a file share, offline.
"""

from __future__ import annotations

from dataclasses import dataclass

import jinja2

from orchestrator.errors import TemplateError
from orchestrator.model.report import Report, StageResult
from orchestrator.report.view import (
    STATUS_LABEL,
    checks_summary,
    flatten_facts,
    format_duration,
    headline,
    ordered_stages,
    short_image_id,
)
from orchestrator.resources import jinja_environment, report_templates_root
from orchestrator.text import clean

TEMPLATE = "report.html.j2"
_MARK = {"passed": "✓", "failed": "✗", "skipped": "⊘", "not_run": "○"}


@dataclass(frozen=True)
class CheckRow:
    name: str
    expected: str
    observed: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class StageView:
    name: str
    status: str  # the JSON word, used as a CSS class
    label: str  # the word a reader sees
    mark: str  # a symbol, so the status reads without colour (printed in black and white)
    duration: str
    step: str | None  # the card's one line: `step: text`, or just `text`
    line: str
    checks_summary: str
    reason: str | None
    warnings: list[str]
    error_step: str | None
    error_message: str | None
    checks: list[CheckRow]
    facts: list[tuple[str, str]]


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
        mark=_MARK[stage.status],
        duration=format_duration(stage),
        step=step,
        line=line,
        checks_summary=checks_summary(stage),
        reason=clean(stage.reason) if stage.reason else None,
        warnings=[clean(warning) for warning in stage.warnings],
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
        facts=flatten_facts(stage.facts),
    )


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


def render_html(report: Report) -> str:
    try:
        text = (
            jinja_environment(report_templates_root(), autoescape=True, trim=True)
            .get_template(TEMPLATE)
            .render(page=page_view(report))
        )
    except jinja2.TemplateError as exc:
        raise TemplateError(f"rendering {TEMPLATE} failed: {exc}") from None
    return text.rstrip("\n") + "\n"
