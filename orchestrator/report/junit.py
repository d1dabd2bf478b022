"""`junit.xml`: the report for CI dashboards (Jenkins, GitLab, GitHub test reporters).

One `<testsuite>` per stage (`orch.<stage>`), one `<testcase>` per check, so a dashboard shows which
expectation broke in which layer. Mapping rules, chosen so every failed stage shows at least one
failure and every stage at least one test:

* a stage with no checks has one testcase named after the stage; when the stage failed, it carries
  the first error;
* a skipped or not-run stage's testcases are `<skipped message="reason">`: they did not run, they
  did not fail;
* a failed stage's first error is shown on the failed check that carries it; when no check does, on
  an extra testcase named `first error` (a probe that crashed after its checks held, say).

Checks have no duration of their own: a stage's time is its suite's `time`, and its testcases
report 0, except the single testcase standing for a check-less stage. Built with ElementTree, so
escaping is the library's; text is cleaned of characters XML 1.0 cannot carry. The only timestamp is
`report.created`: the same report gives the same bytes.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from orchestrator.model.checks import Check
from orchestrator.model.report import Report, StageError, StageResult
from orchestrator.report.view import format_seconds, ordered_stages
from orchestrator.text import clean, one_line

FIRST_ERROR_CASE = "first error"


def _carries(check: Check, error: StageError) -> bool:
    """Does this failed check already say what the stage's first error says?

    Steps are named after the check (`image check: pip check`) or the error is the check's observation.
    """
    if check.passed:
        return False
    step = error.step.strip()
    return step == check.name or step.endswith(f": {check.name}") or error.message in (check.observed, check.detail)


def _check_text(check: Check) -> str:
    lines = [f"expected: {check.expected}", f"observed: {check.observed}"]
    if check.detail:
        lines.append(f"detail: {check.detail}")
    return clean("\n".join(lines))


def _error_text(error: StageError) -> str:
    return clean(f"step: {error.step}\nerror: {error.message}")


def _testcase(parent: ET.Element, classname: str, name: str, seconds: float) -> ET.Element:
    return ET.SubElement(
        parent, "testcase", {"classname": classname, "name": clean(name), "time": format_seconds(seconds)}
    )


def _fail(case: ET.Element, message: str, kind: str, text: str) -> None:
    ET.SubElement(case, "failure", {"message": one_line(message), "type": kind}).text = text


def _stage_suite(parent: ET.Element, report: Report, stage: StageResult) -> ET.Element:
    suite = ET.SubElement(parent, "testsuite", {"name": f"orch.{stage.name}"})
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("status", stage.status),
        ("reason", stage.reason),
        ("dossier", report.dossier.name),
        ("identity", report.dossier.identity),
        ("image", report.image.ref if report.image else None),
    ):
        if value is not None:
            ET.SubElement(properties, "property", {"name": f"orch.{name}", "value": clean(value)})

    classname = clean(f"orch.{report.dossier.name}.{stage.name}")
    did_not_run = stage.status in ("skipped", "not_run")
    error = stage.first_error if stage.status == "failed" else None
    error_shown = False

    cases: list[tuple[ET.Element, Check | None]] = []
    if stage.checks:
        cases = [(_testcase(suite, classname, check.name, 0.0), check) for check in stage.checks]
    else:
        cases = [(_testcase(suite, classname, stage.name, stage.duration_s), None)]

    for case, check in cases:
        if did_not_run:
            reason = stage.reason or f"stage {stage.status.replace('_', ' ')}"
            ET.SubElement(case, "skipped", {"message": one_line(reason)}).text = clean(f"{stage.status}: {reason}")
        elif check is not None and not check.passed:
            text = _check_text(check)
            if error is not None and not error_shown and _carries(check, error):
                text += "\n" + _error_text(error)
                error_shown = True
            _fail(case, f"expected {check.expected}, observed {check.observed}", "check", text)
        elif check is None and stage.status == "failed":
            # The check-less stage's own testcase stands for the stage: it carries the first error.
            if error is not None:
                _fail(case, f"{error.step}: {error.message}", "first_error", _error_text(error))
                error_shown = True
            else:
                _fail(case, "the stage failed without recording an error", "stage", f"status: {stage.status}")

    if stage.status == "failed" and stage.checks and not error_shown:
        if error is not None:
            case = _testcase(suite, classname, FIRST_ERROR_CASE, 0.0)
            _fail(case, f"{error.step}: {error.message}", "first_error", _error_text(error))
        elif all(check.passed for check in stage.checks):
            # Failed, every check held, no error recorded: still one failure, or CI would show green.
            case = _testcase(suite, classname, stage.name, 0.0)
            _fail(case, "the stage failed without recording an error", "stage", f"status: {stage.status}")

    facts = stage.facts.recorded()
    if facts:
        out = ET.SubElement(suite, "system-out")
        out.text = clean(json.dumps(facts, indent=2, ensure_ascii=False, default=str))

    testcases = suite.findall("testcase")
    suite.attrib.update(
        {
            "tests": str(len(testcases)),
            "failures": str(sum(case.find("failure") is not None for case in testcases)),
            "errors": "0",
            "skipped": str(sum(case.find("skipped") is not None for case in testcases)),
            "time": format_seconds(stage.duration_s),
            "timestamp": clean(report.created),
        }
    )
    return suite


def render_junit(report: Report) -> str:
    root = ET.Element("testsuites", {"name": clean(f"orch {report.dossier.name}")})
    suites = [_stage_suite(root, report, stage) for stage in ordered_stages(report)]
    # Totals are summed from the suites as built, so they cannot disagree with them.
    for attribute in ("tests", "failures", "errors", "skipped"):
        root.set(attribute, str(sum(int(suite.get(attribute, "0")) for suite in suites)))
    # The total is the sum of the suites' times as written, so a dashboard adding them up agrees to the digit.
    root.set("time", format_seconds(sum(float(suite.get("time", "0")) for suite in suites)))
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
