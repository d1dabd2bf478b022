"""Golden files for the report's renderings of one realistic report (`tests.report_sample`).

Byte-for-byte: the renderings are deterministic, so any change in them is a change to review.
`make golden` (pytest --update-golden) rewrites them after an intended change; review the diff.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator.model.report import Report
from orchestrator.report.html import render_html
from orchestrator.report.junit import render_junit
from orchestrator.report.markdown import render_markdown
from tests.paths import GOLDEN
from tests.report_sample import sample_report

REPORT_GOLDEN = GOLDEN / "report"
RENDERINGS: dict[str, Callable[[Report], str]] = {
    "report.md": render_markdown,
    "report.html": render_html,
    "junit.xml": render_junit,
}


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_rendered_report_matches_golden(name: str, request: pytest.FixtureRequest) -> None:
    rendered = RENDERINGS[name](sample_report())
    golden = REPORT_GOLDEN / name
    if request.config.getoption("--update-golden"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        # newline="" keeps the bytes as rendered on every platform: the comparison is byte for byte.
        golden.write_text(rendered, encoding="utf-8", newline="")
    assert golden.exists(), f"no golden file report/{name}: run `make golden`"
    assert rendered.encode("utf-8") == golden.read_bytes(), f"report/{name} differs: run `make golden` and review"


def test_report_golden_files_have_no_orphans() -> None:
    present = {path.name for path in REPORT_GOLDEN.iterdir()} if REPORT_GOLDEN.exists() else set()
    assert present == set(RENDERINGS), f"orphan or missing golden files: {present ^ set(RENDERINGS)}"
