"""The morning summary: JUnit structure, escaping of untrusted text, a self-contained page, re-rendering."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.nightly.drift import cell_drift, first_number
from orchestrator.nightly.plan import load_plan
from orchestrator.nightly.runner import run_night
from orchestrator.nightly.summary import resummarise
from tests.compare_sample import Run, write_run
from tests.nightly_sample import FakeTarget, Script, two_target_plan
from tests.report_sample import HOSTILE

#: The common JUnit XSD (Jenkins / Ant's junit-10 schema), as far as dashboards read it: element → required
#: and allowed attributes, and the children each may hold.
JUNIT = {
    "testsuites": ({"name", "tests", "failures", "errors", "skipped", "time"}, set(), {"testsuite"}),
    "testsuite": ({"name", "tests", "failures", "errors", "skipped", "time"}, {"name", "tests"}, {"testcase"}),
    "testcase": ({"name", "classname", "time"}, {"name", "classname"}, {"failure", "error", "skipped"}),
    "failure": ({"message", "type"}, set(), set()),
    "error": ({"message", "type"}, set(), set()),
    "skipped": ({"message"}, set(), set()),
}


def _check_junit(element: ET.Element) -> None:
    allowed, required, children = JUNIT[element.tag]
    assert set(element.attrib) <= allowed, (element.tag, element.attrib)
    assert required <= set(element.attrib), (element.tag, element.attrib)
    for child in element:
        assert child.tag in children, (element.tag, child.tag)
        _check_junit(child)


def _night(tmp_path: Path, hostile: bool = True) -> Path:
    plan = load_plan(two_target_plan(tmp_path))
    failing = Run(cosine=0.5)
    a = FakeTarget(
        "gpu-a",
        2,
        scripts={"tiny-embeddings@gpu-a": Script(status="failed", run=failing, first_error=f"sample: {HOSTILE}")},
    )
    b = FakeTarget(
        "gpu-b", scripts={"tiny-embeddings@gpu-b": Script(status="environment", run=None, first_error="down")}
    )
    return run_night(plan, {"gpu-a": a, "gpu-b": b}, clock=lambda: datetime(2026, 12, 2, tzinfo=UTC)).night_dir


def test_junit_is_one_testcase_per_cell_and_stage(tmp_path: Path) -> None:
    night = _night(tmp_path)
    root = ET.parse(night / "junit.xml").getroot()
    _check_junit(root)
    suites = root.findall("testsuite")
    assert [suite.get("name") for suite in suites] == [
        "tiny-embeddings@gpu-a",
        "tiny-embeddings@gpu-b",
        "tiny-embeddings-cuda.cpu@gpu-a",
        "tiny-embeddings-cuda.cpu@gpu-b",
    ]
    for suite in suites:
        assert [case.get("name") for case in suite.findall("testcase")] == ["image", "host", "device", "sample"]
    failed = suites[0].find("testcase[@name='sample']/failure")
    assert failed is not None and failed.get("message") == f"sample: {HOSTILE}", "the first error, escaped by XML only"
    environment = suites[1].find("testcase[@name='image']/error")
    assert environment is not None and environment.get("message") == "down"
    assert suites[1].find("testcase[@name='sample']/skipped") is not None
    assert root.get("tests") == "16" and root.get("failures") == "1" and root.get("errors") == "1"
    assert sum(int(suite.get("tests", "0")) for suite in suites) == 16


def test_untrusted_text_is_escaped_in_markdown_and_html(tmp_path: Path) -> None:
    night = _night(tmp_path)
    html = (night / "summary.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in html
    markdown = (night / "summary.md").read_text()
    assert "<script>" not in markdown and r"\<script\>" in markdown
    assert "| `tiny-embeddings` | failed: sample | environment |" in markdown


def test_the_page_is_self_contained(tmp_path: Path) -> None:
    html = (_night(tmp_path) / "summary.html").read_text()
    for forbidden in ("<script", "<link", "<img", "src=", "@import", "url("):
        assert forbidden not in html, forbidden
    # The only URL is the SVG namespace (a name, never fetched).
    assert set(re.findall(r"https?://[^\s\"'<>]+", html)) == {"http://www.w3.org/2000/svg"}
    assert html.count('<svg class="trend"') >= 4
    # The matrix is coloured by the first failing stage.
    assert 'style="background: #f7e79a"><a href="#cell-tiny-embeddings@gpu-a">failed: sample</a>' in html


def test_summary_rerenders_from_the_night_files(tmp_path: Path) -> None:
    night = _night(tmp_path)
    before = json.loads((night / "summary.json").read_text())
    (night / "summary.html").unlink()
    resummarise(night)
    assert (night / "summary.html").is_file()
    assert json.loads((night / "summary.json").read_text()) == before


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("min cosine = 0.99999994 (row 'a')", 0.99999994),
        ("max |Δ| = 3.1e-06", 3.1e-06),
        ("0.75 (3/4)", 0.75),
        ("clean", None),
        ("min cosine = 1 (1 - 4.4e-16) (row 's09')", 1.0 - 4.4e-16),
    ],
)
def test_criteria_numbers_are_read_from_observations(text: str, value: float | None) -> None:
    assert first_number(text) == value


def test_drift_against_a_reference_run_uses_orch_compare(tmp_path: Path) -> None:
    reference = write_run(Run(), tmp_path / "reference")
    tonight = write_run(Run(freeze=(*Run().freeze, "six==1.17.0")), tmp_path / "tonight")
    drift = cell_drift("c@t", tonight, "passed", None, reference_run=reference)
    assert drift.status_change == "new"
    assert drift.reference_verdict == "regressed"
    assert any("six" in line for line in drift.reference_lines), drift.reference_lines
    without = cell_drift("c@t", tonight, "passed", None)
    assert without.reference_verdict == "held"
    assert any(line.startswith("embeddings: cosine vs reference") for line in without.reference_lines)


def test_drift_names_base_image_build_time_and_size(tmp_path: Path) -> None:
    before = write_run(Run(), tmp_path / "n1")
    after = write_run(Run(), tmp_path / "n2")
    record = json.loads((after / "build.json").read_text())
    record["base_image"]["digest"] = "sha256:" + "ab" * 32
    record["durations_s"]["total"] = 40.0
    record["image"]["size_bytes"] = 1_500_000_000
    (after / "build.json").write_text(json.dumps(record))
    drift = cell_drift("c@t", after, "passed", ("2026-12-01", before, "failed"))
    kinds = {change.kind: change.text for change in drift.changes}
    assert drift.status_change == "fixed"
    assert kinds["base-image"].endswith("sha256:" + "ab" * 32)
    assert kinds["build-time"].startswith("build time 4 s → 40 s")
    assert kinds["image-size"] == "image size 1204.3 MB → 1500.0 MB"


def test_the_effect_names_the_verdict_then_what_moved() -> None:
    from orchestrator.nightly.drift import Change, effect_of

    package = Change(kind="package", text="typing-extensions 4.16.0 → 4.15.0")
    slower = Change(kind="build-time", text="build time 375 s → 481 s")
    assert effect_of("still passing", [package]) == "the cell still passes; no criterion moved"
    assert effect_of("still passing", [package, slower]) == (
        "the cell still passes; no criterion moved; build time 375 s → 481 s"
    )
    number = Change(kind="number", text="e: cosine vs r: 1 → 0.5 (Δ -0.5) (now FAILS)")
    assert (
        effect_of("newly failing", [package, number])
        == "the cell now fails; e: cosine vs r: 1 → 0.5 (Δ -0.5) (now FAILS)"
    )
    assert effect_of("new", [package]) is None and effect_of("still passing", []) is None
