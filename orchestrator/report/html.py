"""`report.html`: one self-contained page, the four layers at a glance, the detail below.

The template is a file (`templates/report/report.html.j2`, shipped as `orchestrator.templates`) read
through `orchestrator.resources`, like the Dockerfile templates. Unlike those, this environment
autoescapes: every value from the report can be a user string, and the template never marks one
safe. Python prepares plain view objects (`report.view.page_view`: flattened, cleaned, formatted; the
Markdown template lays out the same ones) so the template only lays them out; `StrictUndefined` turns a typo in it into an error rather than an empty cell.

Self-contained means: inline CSS, no script, no font, no image, no external URL; links are only
in-page anchors. The page opens from a CI artefact store, an e-mail or a file share, offline.
"""

from __future__ import annotations

from orchestrator.model.report import Report
from orchestrator.report.view import page_view
from orchestrator.resources import render_template, report_templates_root

TEMPLATE = "report.html.j2"


def render_html(report: Report) -> str:
    text = render_template(report_templates_root(), TEMPLATE, autoescape=True, page=page_view(report))
    return text.rstrip("\n") + "\n"
