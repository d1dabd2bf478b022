"""The report's renderings (Markdown, HTML, JUnit) and its folder (write / read): pure, escaped, in stage order."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from orchestrator.errors import BadInput
from orchestrator.model.checks import Check
from orchestrator.model.report import STAGES, Report, StageError, StageResult
from orchestrator.report.html import render_html
from orchestrator.report.junit import render_junit
from orchestrator.report.markdown import render_markdown
from orchestrator.report.view import MAX_LIST_ITEMS, flatten_facts, ordered_stages
from orchestrator.report.write import read_report, write_report
from orchestrator.resources import report_templates_root
from tests.report_sample import DEVICE_ERROR, HOSTILE, IDENTITY, PACKAGES, sample_report


@pytest.fixture
def report() -> Report:
    return sample_report()


def _with_stage(report: Report, stage: StageResult) -> Report:
    return report.model_copy(update={"stages": {**report.stages, stage.name: stage}})


# --- shared view --------------------------------------------------------------------------------------------


def test_flatten_facts_dots_nested_keys_and_truncates_long_lists() -> None:
    rows = dict(
        flatten_facts({"a": {"b": {"c": 1}}, "flag": True, "none": None, "items": list(range(20)), "empty": {}})
    )
    assert rows["a.b.c"] == "1"
    assert rows["flag"] == "true" and rows["none"] == "null" and rows["empty"] == "{}"
    assert rows["items"].endswith(f"… (+{20 - MAX_LIST_ITEMS} more)")
    assert rows["items"].startswith("0, 1, 2")


def test_flatten_facts_indexes_lists_of_objects() -> None:
    gpus = [{"name": f"gpu{i}"} for i in range(MAX_LIST_ITEMS + 3)]
    rows = flatten_facts({"gpus": gpus})
    assert rows[0] == ("gpus[0].name", "gpu0")
    assert rows[-1] == ("gpus[…]", "+3 more")
    assert len(rows) == MAX_LIST_ITEMS + 1


def test_a_stage_missing_from_the_report_is_shown_as_not_run(report: Report) -> None:
    partial = report.model_copy(update={"stages": {"host": report.stages["host"]}})
    stages = ordered_stages(partial)
    assert [stage.name for stage in stages] == list(STAGES)
    assert [stage.status for stage in stages] == ["not_run", "failed", "not_run", "not_run"]
    for render in (render_markdown, render_html, render_junit):
        text = render(partial)
        assert all(name in text for name in STAGES)


# --- Markdown -----------------------------------------------------------------------------------------------


def test_markdown_title_names_dossier_identity_image_and_verdict(report: Report) -> None:
    text = render_markdown(report)
    assert text.splitlines()[0] == "# orch report: tiny-embeddings — failed"
    assert IDENTITY[:12] in text and IDENTITY not in text
    assert "orch/tiny-embeddings:3f9a1c2b7d4e" in text


def test_markdown_stages_in_order_in_summary_and_sections(report: Report) -> None:
    # The report's dict order must not matter: reversed in, still image, host, device, sample out.
    shuffled = report.model_copy(update={"stages": dict(reversed(list(report.stages.items())))})
    text = render_markdown(shuffled)
    assert text == render_markdown(report)
    sections = [line.removeprefix("## ") for line in text.splitlines() if line.removeprefix("## ") in STAGES]
    assert sections == list(STAGES)
    summary_rows = [line for line in text.splitlines() if line.startswith("| [")]
    assert [re.match(r"\| \[(\w+)\]", row).group(1) for row in summary_rows] == list(STAGES)  # type: ignore[union-attr]


def test_markdown_shows_reason_first_error_and_check_marks(report: Report) -> None:
    text = render_markdown(report)
    device = text[text.index("\n## device\n") : text.index("\n## sample\n")]
    assert f"**First error:** at `torch.cuda`: {DEVICE_ERROR}" in device
    assert "| GPU visible to torch | `>= 1 CUDA device` | `0 devices` | ✗ |" in device
    sample = text[text.index("\n## sample\n") :]
    assert "**Reason:** device stage failed" in sample
    assert "not run" in sample
    assert "| torch imports |" in device and "✓" in device


def test_markdown_tables_escape_pipes(report: Report) -> None:
    text = render_markdown(report)
    assert "\\|" in text
    # Every row of a table has exactly as many unescaped pipes as its header: no user `|` split a cell.
    table: int | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            table = None
            continue
        count = len(re.findall(r"(?<!\\)\|", line))
        table = count if table is None else table
        assert count == table, line


def test_markdown_escapes_html_and_markup_in_prose(report: Report) -> None:
    text = render_markdown(report)
    # Outside code spans no raw `<` is left but the `<br>` we emit: user text is escaped as `\<`.
    for line in text.splitlines():
        unescaped = re.sub(r"\\.", "E", line)  # a backslash escape is one literal character
        outside_code = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", unescaped)
        assert "<" not in outside_code.replace("<br>", ""), line
    assert "\\<script\\>" in text
    assert "\\& Jerry" in text


def test_markdown_truncates_long_fact_lists_with_a_count(report: Report) -> None:
    text = render_markdown(report)
    assert f"(+{len(PACKAGES) - MAX_LIST_ITEMS} more)" in text
    assert PACKAGES[-1] not in text.split("### Facts (image)")[1].split("## host")[0]


def test_markdown_control_characters_are_made_visible() -> None:
    report = sample_report()
    noisy = _with_stage(report, StageResult(name="sample", status="not_run", reason="log said \x1b[31mred\x1b[0m"))
    text = render_markdown(noisy)
    assert "\x1b" not in text and "\\\\x1b\\[31m" in text


def test_markdown_is_deterministic(report: Report) -> None:
    assert render_markdown(report) == render_markdown(sample_report())


# --- HTML ---------------------------------------------------------------------------------------------------


class _Page(HTMLParser):
    """Collects what the tests look at, and checks that every non-void element is closed in order."""

    VOID = frozenset({"meta", "link", "br", "hr", "img", "input", "col", "wbr", "source", "area", "base"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.cards: list[tuple[str, str]] = []
        self.details: list[str] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.tags: list[str] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.attrs += [(tag, name, value) for name, value in attrs]
        self.tags.append(tag)
        if tag == "article" and "card" in (found.get("class") or ""):
            self.cards.append((found["data-stage"] or "", found["data-status"] or ""))
        if tag == "details" and found.get("class") == "stage":
            self.details.append(found.get("id") or "")
        self._in_title = tag == "title"
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()
        self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    assert page.stack == [], f"unclosed elements: {page.stack}"
    return page


def test_html_template_ships_as_a_package_resource() -> None:
    assert report_templates_root().joinpath("report.html.j2").is_file()


def test_html_has_four_cards_in_order_coloured_by_status(report: Report) -> None:
    page = _parse(render_html(report))
    assert page.cards == [("image", "passed"), ("host", "failed"), ("device", "failed"), ("sample", "not_run")]
    assert page.details == [f"stage-{name}" for name in STAGES]


def test_html_cards_carry_first_error_or_reason(report: Report) -> None:
    text = render_html(report)
    cards = {name: text[text.index(f'id="card-{name}"') :].split("</article>")[0] for name in STAGES}
    assert "<code>torch.cuda</code>: expected an NVIDIA GPU; torch 2.14.1 (CUDA 13.0) sees 0 devices" in cards["device"]
    assert "device stage failed" in cards["sample"] and "not run" in cards["sample"]
    assert "7.93 s" in cards["device"] and "—" in cards["sample"]
    assert "4/4 checks held" in cards["image"]


def test_html_title_names_dossier_and_verdict(report: Report) -> None:
    assert _parse(render_html(report)).title == "orch report: tiny-embeddings — failed"


def test_html_escapes_every_user_string(report: Report) -> None:
    text = render_html(report)
    assert "<script" not in text.lower()
    assert "&lt;script&gt;" in text
    assert "Tom &amp; Jerry" in text
    # Quotes are escaped too, so a value can never leave an attribute.
    assert "alert(&#34;pwned&#34;)" in text and "Jerry&#39;s" in text


def test_html_escapes_user_strings_in_attributes() -> None:
    report = sample_report()
    hostile = report.model_copy(update={"dossier": report.dossier.model_copy(update={"identity": '"><b onclick=x>'})})
    page = _parse(render_html(hostile))
    assert ("code", "title", '"><b onclick=x>') in page.attrs  # parsed back as one attribute value
    assert not any(name == "onclick" for _, name, _ in page.attrs)


def test_html_is_self_contained(report: Report) -> None:
    text = render_html(report)
    page = _parse(text)
    assert "http://" not in text and "https://" not in text
    assert not [attr for attr in page.attrs if attr[1] == "src"]
    assert all((value or "").startswith("#") for _, name, value in page.attrs if name == "href")
    assert "<link" not in text and "@import" not in text and "url(" not in text
    assert not {"script", "img", "iframe", "object", "link", "embed"} & set(page.tags)


def test_html_sections_are_open_so_they_print(report: Report) -> None:
    page = _parse(render_html(report))
    assert [value for tag, name, value in page.attrs if tag == "details" and name == "open"] == [None] * 4, (
        "the four stages open; the facts under each are folded"
    )


def test_html_is_deterministic(report: Report) -> None:
    assert render_html(report) == render_html(sample_report())


# --- JUnit --------------------------------------------------------------------------------------------------


def _suites(text: str) -> tuple[ET.Element, list[ET.Element]]:
    root = ET.fromstring(text)
    return root, root.findall("testsuite")


def test_junit_has_one_suite_per_stage_in_order(report: Report) -> None:
    root, suites = _suites(render_junit(report))
    assert root.tag == "testsuites"
    assert [suite.get("name") for suite in suites] == [f"orch.{name}" for name in STAGES]
    for suite, name in zip(suites, STAGES, strict=True):
        assert {case.get("classname") for case in suite.iter("testcase")} == {f"orch.tiny-embeddings.{name}"}


def test_junit_counts_parse_back_and_add_up(report: Report) -> None:
    root, suites = _suites(render_junit(report))
    for suite in suites:
        cases = suite.findall("testcase")
        assert int(suite.get("tests", "")) == len(cases)
        assert int(suite.get("failures", "")) == sum(case.find("failure") is not None for case in cases)
        assert int(suite.get("skipped", "")) == sum(case.find("skipped") is not None for case in cases)
        assert suite.get("errors") == "0"
    counts = {suite.get("name"): (suite.get("tests"), suite.get("failures"), suite.get("skipped")) for suite in suites}
    assert counts == {
        "orch.image": ("4", "0", "0"),
        "orch.host": ("2", "2", "0"),
        "orch.device": ("3", "2", "0"),  # two checks and the first error no check carries
        "orch.sample": ("1", "0", "1"),
    }
    assert (root.get("tests"), root.get("failures"), root.get("skipped"), root.get("errors")) == ("10", "4", "1", "0")


def test_junit_times_are_stage_durations(report: Report) -> None:
    root, suites = _suites(render_junit(report))
    assert [suite.get("time") for suite in suites] == ["3.420", "0.210", "7.930", "0.000"]
    assert root.get("time") == "11.560"
    assert {suite.get("timestamp") for suite in suites} == {report.created}


def test_junit_failures_carry_expected_observed_detail(report: Report) -> None:
    _, suites = _suites(render_junit(report))
    host = {case.get("name"): case for case in suites[1].findall("testcase")}
    failure = host["NVIDIA driver present"].find("failure")
    assert failure is not None and failure.get("type") == "check"
    assert "no NVIDIA driver found" in (failure.get("message") or "")
    body = failure.text or ""
    assert "expected: >= 580.65.06 (CUDA 13.0)" in body and "detail: nvidia-smi: not found" in body
    # The host's first error is the driver check's observation: carried by it, no extra testcase.
    assert "error: no NVIDIA driver found" in body and "first error" not in host


def test_junit_first_error_gets_its_own_case_when_no_check_carries_it(report: Report) -> None:
    _, suites = _suites(render_junit(report))
    device = {case.get("name"): case for case in suites[2].findall("testcase")}
    failure = device["first error"].find("failure")
    assert failure is not None
    assert failure.get("message") == f"torch.cuda: {DEVICE_ERROR}"


def test_junit_skipped_stage_cites_reason(report: Report) -> None:
    _, suites = _suites(render_junit(report))
    (case,) = suites[3].findall("testcase")
    assert case.get("name") == "sample"
    skipped = case.find("skipped")
    assert skipped is not None and skipped.get("message") == "device stage failed"


def test_junit_failed_stage_without_checks_fails_its_one_case(report: Report) -> None:
    stage = StageResult(name="sample", status="failed", first_error=StageError(step="run", message="exit 1"))
    _, suites = _suites(render_junit(_with_stage(report, stage)))
    (case,) = suites[3].findall("testcase")
    assert case.get("name") == "sample"
    failure = case.find("failure")
    assert failure is not None and failure.get("message") == "run: exit 1"


def test_junit_failed_stage_always_shows_a_failure(report: Report) -> None:
    held = [Check(name="ok", expected="a", observed="a", passed=True)]
    stage = StageResult(name="sample", status="failed", checks=held)
    _, suites = _suites(render_junit(_with_stage(report, stage)))
    assert suites[3].get("failures") == "1"


def test_junit_round_trips_user_strings_and_survives_control_characters(report: Report) -> None:
    _, suites = _suites(render_junit(report))
    entrypoint = next(case for case in suites[0].iter("testcase") if case.get("name") == "entrypoint")
    assert entrypoint is not None
    stage = StageResult(
        name="sample",
        status="failed",
        checks=[Check(name=f"a {HOSTILE}\x00", expected="\x1b[31m", observed="\x07\ud800", passed=False)],
    )
    _, suites = _suites(render_junit(_with_stage(report, stage)))  # parses: nothing XML cannot carry
    case = suites[3].find("testcase")
    assert case is not None and case.get("name") == f"a {HOSTILE}\\x00"


def test_junit_is_deterministic(report: Report) -> None:
    assert render_junit(report) == render_junit(sample_report())


# --- writing and reading ------------------------------------------------------------------------------------


def test_write_report_writes_four_files_and_round_trips(report: Report, tmp_path: Path) -> None:
    paths = write_report(report, tmp_path / "out")
    assert {kind: path.name for kind, path in paths.items()} == {
        "json": "report.json",
        "markdown": "report.md",
        "html": "report.html",
        "junit": "junit.xml",
    }
    assert read_report(paths["json"]) == report
    assert read_report(tmp_path / "out") == report
    assert paths["markdown"].read_text(encoding="utf-8") == render_markdown(report)
    assert paths["html"].read_text(encoding="utf-8") == render_html(report)
    assert paths["junit"].read_text(encoding="utf-8") == render_junit(report)
    assert json.loads(paths["json"].read_text(encoding="utf-8"))["format"] == "orch.report/1"
    assert not [path for path in (tmp_path / "out").iterdir() if path.name.endswith(".tmp")]


def test_read_report_refuses_missing_foreign_and_broken_files(report: Report, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"absent\.json: no such file; expected an orch report \(orch\.report/1\)"):
        read_report(tmp_path / "absent.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "orch.build/1"}))
    with pytest.raises(BadInput, match=r"other\.json: format 'orch\.build/1', expected an orch report"):
        read_report(tmp_path / "other.json")
    (tmp_path / "newer.json").write_text(json.dumps({"format": "orch.report/2"}))
    with pytest.raises(BadInput, match=r"format 'orch\.report/2'") as newer:
        read_report(tmp_path / "newer.json")
    assert newer.value.hint is not None and "another orch version" in newer.value.hint
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(BadInput, match=r"list\.json: a JSON list, expected an orch report"):
        read_report(tmp_path / "list.json")
    (tmp_path / "junk.json").write_text("{")
    with pytest.raises(BadInput, match=r"junk\.json: not JSON \("):
        read_report(tmp_path / "junk.json")
    broken = json.loads(report.model_dump_json())
    broken["stages"]["host"]["status"] = "exploded"
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(BadInput, match=r"stages\.host\.status"):
        read_report(tmp_path / "broken.json")


def test_a_damaged_build_record_is_bad_input_naming_file_and_field(tmp_path: Path) -> None:
    from orchestrator.stages.build import read_record

    path = tmp_path / "build.json"
    path.write_text(json.dumps({"format": "orch.build/1", "status": "built"}))
    with pytest.raises(BadInput, match=r"build\.json: invalid build record at "):
        read_record(path)
    path.write_text(json.dumps({"format": "orch.report/1"}))
    with pytest.raises(BadInput, match=r"format 'orch\.report/1', expected an orch build record \(orch\.build/1\)"):
        read_record(path)


def test_a_passed_card_shows_the_measured_figures_and_the_facts_are_folded() -> None:
    from orchestrator.model.checks import Check
    from orchestrator.model.report import StageResult
    from orchestrator.report.view import headline

    sample = StageResult(
        name="sample",
        status="passed",
        checks=[
            Check(name="embeddings: shape", expected="[36, 384]", observed="[36, 384]", passed=True),
            Check(name="embeddings: max_abs vs reference", expected="≤ 2e-07", observed="max |Δ| = 0", passed=True),
        ],
    )
    assert headline(sample) == (None, "2/2 checks held · embeddings: max |Δ| = 0")
    template = (Path(__file__).resolve().parents[2] / "templates" / "report" / "report.html.j2").read_text()
    assert '<details class="facts-fold">' in template and '<details class="facts-fold" open' not in template
