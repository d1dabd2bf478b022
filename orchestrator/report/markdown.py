"""`report.md`: the report as GitHub-flavoured Markdown, for a CI job summary, a PR comment or a terminal.

Every value from the report can be a user string, so nothing reaches the output unescaped: machine
values (expected, observed, facts, check names' keys) go in code spans, where Markdown and HTML mean
nothing; prose (reasons, errors, details) has every character with a Markdown meaning backslash-escaped,
so `<script>` renders as text and `*` stays a star. In table cells `|` is escaped as `\\|`, which GFM
honours inside code spans too. Output is deterministic: the same report gives the same bytes.
"""

from __future__ import annotations

import re

from orchestrator.model.checks import Check
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
from orchestrator.text import clean, one_line

_STATUS_MARK = {"passed": "✅", "failed": "❌", "skipped": "⏭️", "not_run": "⏸️"}

# Characters with a Markdown (or inline HTML / entity) meaning inside a line. `#`, `-`, `+` and `1.`
# only mean something at the start of a line, and prose here never starts one.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>&|~])")
_NEWLINES = re.compile(r"\r\n|\r|\n")
_BACKTICKS = re.compile(r"`+")


def _text(value: str) -> str:
    """Prose, escaped: it renders exactly as written. Line breaks become `<br>` (the only raw HTML we emit)."""
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", clean(value))
    return _NEWLINES.sub("<br>", escaped)


def _code(value: str, *, cell: bool = False) -> str:
    """A code span: literal text, whatever it contains.

    The fence is one backtick longer than the longest run inside; a value that starts or ends with a
    backtick is padded with spaces (CommonMark strips one on each side). A newline would end a table
    row, so it is shown as ⏎. In a table cell `|` must still be escaped: GFM splits cells first.
    """
    value = _NEWLINES.sub(" ⏎ ", clean(value))
    if not value:
        return "*(empty)*"
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(value)), default=0) + 1)
    padded = f" {value} " if value.startswith("`") or value.endswith("`") else value
    span = f"{fence}{padded}{fence}"
    return span.replace("|", r"\|") if cell else span


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_markdown(report: Report) -> str:
    stages = ordered_stages(report)
    lines: list[str] = [
        f"# orch report: {_text(report.dossier.name)} — {report.verdict}",
        "",
        *_identity(report),
        "",
        "## Summary",
        "",
        _row(["Stage", "Status", "Duration", "Checks", "Why"]),
        _row(["---", "---", "--:", "---", "---"]),
    ]
    for stage in stages:
        step, line = headline(stage)
        why = f"{_code(step, cell=True)}: {_text(line)}" if step else _text(line)
        if stage.status == "passed":
            why = ""  # the Checks column already says it; the column is for what needs reading
        if stage.warnings:
            warned = f"⚠️ {_text(one_line(stage.warnings[0], 120))}"
            why = f"{why}<br>{warned}" if why else warned
        status = f"{_STATUS_MARK[stage.status]} {STATUS_LABEL[stage.status]}"
        lines.append(
            _row([f"[{stage.name}](#{stage.name})", status, format_duration(stage), checks_summary(stage), why])
        )
    for stage in stages:
        lines += ["", *_stage_section(stage)]
    if report.notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {_text(note)}" for note in report.notes]
    return "\n".join(lines) + "\n"


def _identity(report: Report) -> list[str]:
    dossier = report.dossier
    image = (
        f"{_code(report.image.ref)} ({_code(short_image_id(report.image.id))})"
        if report.image is not None
        else "none (no image was built)"
    )
    backend = f" {_code(dossier.backend_version)}" if dossier.backend_version else ""
    variant = f", variant {_code(dossier.variant)}" if dossier.variant else ""
    return [
        f"- **Verdict:** {_STATUS_MARK[report.verdict]} **{report.verdict}**",
        f"- **Dossier:** {_code(dossier.name)} from {_code(dossier.path)}{variant}",
        f"- **Identity:** {_code(dossier.identity[:12])}",
        f"- **Platform:** {_code(dossier.platform)}{backend}",
        f"- **Image:** {image}",
        f"- **Created:** {_text(report.created)} by orch {_text(report.orch_version)} ({_code(report.format)})",
    ]


def _stage_section(stage: StageResult) -> list[str]:
    # The heading is the bare stage name so the summary table's `#image` links land on it.
    lines = [
        f"## {stage.name}",
        "",
        f"- **Status:** {_STATUS_MARK[stage.status]} {STATUS_LABEL[stage.status]}",
        f"- **Duration:** {format_duration(stage)}",
    ]
    if stage.reason:
        lines.append(f"- **Reason:** {_text(stage.reason)}")
    if stage.status == "failed" and stage.first_error is not None:
        lines.append(f"- **First error:** at {_code(stage.first_error.step)}: {_text(stage.first_error.message)}")
    lines += [f"- ⚠️ **Warning:** {_text(warning)}" for warning in stage.warnings]
    lines += ["", f"### Checks ({stage.name})", ""]
    if stage.checks:
        lines += [_row(["Check", "Expected", "Observed", "", "Detail"]), _row(["---", "---", "---", ":-:", "---"])]
        lines += [_check_row(check) for check in stage.checks]
    else:
        lines.append("No checks.")
    lines += ["", f"### Facts ({stage.name})", ""]
    facts = flatten_facts(stage.facts)
    if facts:
        lines += [f"- {_code(key)}: {_code(value)}" for key, value in facts]
    else:
        lines.append("No facts recorded.")
    return lines


def _check_row(check: Check) -> str:
    return _row(
        [
            _text(check.name),
            _code(check.expected, cell=True),
            _code(check.observed, cell=True),
            "✓" if check.passed else "✗",
            _text(check.detail) if check.detail else "",
        ]
    )
