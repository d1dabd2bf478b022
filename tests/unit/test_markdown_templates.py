"""Markdown comes from templates with one escaping helper: the `md` and `code` filters, registered once."""

from __future__ import annotations

import re

from orchestrator.resources import handover_templates_root, jinja_environment, report_templates_root
from orchestrator.text import markdown_code, markdown_text
from tests.paths import REPO

# In report.md.j2 these are orch's own words (stage names, statuses, durations, counts): written bare.
_ORCH_WORDS = {
    "page.verdict",
    "mark[page.verdict]",
    "mark[stage.status]",
    "stage.name",
    "stage.label",
    "stage.duration",
    "stage.checks_summary",
    "why(stage)",
    '"✓" if check.passed else "✗"',
    # The `why` macro joins parts it escaped itself.
    '(said ~ "<br>" ~ warned) if said and warned else said ~ warned',
}
_COMMENT = re.compile(r"\{#.*?#\}", re.DOTALL)
_EXPRESSION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")


def test_the_escaping_filters_are_registered_once_for_every_template_folder() -> None:
    for root in (report_templates_root(), handover_templates_root()):
        filters = jinja_environment(root, autoescape=False).filters
        assert filters["md"] is markdown_text and filters["code"] is markdown_code
    registering = [
        str(path.relative_to(REPO))
        for path in (REPO / "orchestrator").rglob("*.py")
        if 'filters["md"]' in path.read_text(encoding="utf-8")
    ]
    assert registering == ["orchestrator/resources.py"]


def test_every_report_value_in_the_markdown_template_is_escaped() -> None:
    text = report_templates_root().joinpath("report.md.j2").read_text(encoding="utf-8")
    expressions = _EXPRESSION.findall(_COMMENT.sub("", text))
    assert len(expressions) > 25, expressions
    bare = [
        expression
        for expression in expressions
        if expression not in _ORCH_WORDS and not re.search(r"\|\s*(md|code)\b", expression)
    ]
    assert not bare, f"report.md.j2 writes these unescaped: {bare}"


def test_markdown_escaping_keeps_user_text_literal() -> None:
    assert markdown_text("<script>*x*</script>\nnext") == r"\<script\>\*x\*\</script\><br>next"
    assert markdown_code("a|b", cell=True) == r"`a\|b`"
    assert markdown_code("``x`") == "``` ``x` ```"
    assert markdown_code("") == "*(empty)*"


def test_a_template_that_fails_is_one_template_error() -> None:
    import pytest

    from orchestrator.errors import TemplateError
    from orchestrator.resources import render_template

    with pytest.raises(TemplateError) as caught:
        render_template(report_templates_root(), "report.md.j2", autoescape=False)  # no `page`: StrictUndefined
    assert caught.value.exit_code == 3 and "rendering report.md.j2 failed" in str(caught.value)
