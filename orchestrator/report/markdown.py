"""`report.md`: the report as GitHub-flavoured Markdown, for a CI job summary, a PR comment or a terminal.

Laid out by `templates/report/report.md.j2` from the same view as the HTML page (`report.view.page_view`).
Every value from the report can be a user string, so nothing reaches the output unescaped: machine
values (expected, observed, facts) go in code spans, where Markdown and HTML mean nothing; prose
(reasons, errors, details) has every character with a Markdown meaning backslash-escaped, so `<script>`
renders as text and `*` stays a star. Both are the Jinja filters `code` and `md` (orchestrator/text.py,
registered in orchestrator/resources.py). Output is deterministic: the same report gives the same bytes.
"""

from __future__ import annotations

from orchestrator.model.report import Report
from orchestrator.report.view import page_view
from orchestrator.resources import render_template, report_templates_root

TEMPLATE = "report.md.j2"


def render_markdown(report: Report) -> str:
    return render_template(report_templates_root(), TEMPLATE, autoescape=False, page=page_view(report))
