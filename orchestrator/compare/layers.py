"""The layers of a comparison: the four stages' status and every number checked on both sides.

`compare_layers` is what `orch compare` shows under Stages and Numbers, and what `orch verify` judges a
replay by, so the two can never disagree about a layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from orchestrator.compare.diff import Intent
from orchestrator.compare.read import Side, device_facts, record_of
from orchestrator.model.checks import Check
from orchestrator.model.comparison import NumberComparison, StageComparison, Verdict
from orchestrator.model.report import STAGES, StageName, StageStatus
from orchestrator.report.view import one_line


@dataclass(frozen=True)
class Layers:
    """The stage and number rows of two sides, and what could not be compared."""

    stages: list[StageComparison]
    numbers: list[NumberComparison]
    not_compared: list[str]


def _stage_status(side: Side, stage: StageName) -> StageStatus | None:
    if side.report is not None:
        result = side.report.stages.get(stage)
        return result.status if result is not None else None
    if stage == "image":
        return record_of(side).status
    return None


def _stage_note(side: Side, stage: StageName) -> str | None:
    if side.report is None or stage not in side.report.stages:
        if stage == "image" and side.record is not None and side.record.failure is not None:
            failure = side.record.failure
            return one_line(f"{failure.step or 'build'}: {failure.first_error}")
        return None
    result = side.report.stages[stage]
    if result.status in ("passed", "skipped"):
        return None
    if result.first_error is not None:
        return one_line(f"{result.first_error.step}: {result.first_error.message}")
    return one_line(result.reason) if result.reason else None


def _stage_rows(a: Side, b: Side, not_compared: list[str]) -> list[StageComparison]:
    rows: list[StageComparison] = []
    for stage in STAGES:
        status_a, status_b = _stage_status(a, stage), _stage_status(b, stage)
        if status_a is None or status_b is None:
            if status_a is not None or status_b is not None:
                missing = "A" if status_a is None else "B"
                not_compared.append(
                    f"{stage} stage: {missing} has no report (a build record holds the image stage only)"
                )
            continue
        ok_a, ok_b = status_a in ("passed", "skipped"), status_b in ("passed", "skipped")
        verdict: Verdict
        if status_a == status_b:
            verdict = "same"
        elif ok_a and not ok_b:
            verdict = "regression"
        elif ok_b and not ok_a:
            verdict = "improved"
        else:
            verdict = "changed"
        rows.append(StageComparison(stage=stage, a=status_a, b=status_b, verdict=verdict, note=_stage_note(b, stage)))
    return rows


_COMPARISON_CHECK = re.compile(r"^(?P<output>.+?): (?:max_abs|allclose|cosine|exact) vs ")


def _check_key(name: str) -> str:
    """Sample checks match by name; a comparison with the reference by its output (a variant may change the metric)."""
    match = _COMPARISON_CHECK.match(name)
    return f"{match['output']}: comparison with the reference" if match else name


def _compute_checks(side: Side) -> list[Check] | None:
    """The device probe's compute results (matmul and conv2d against float64) as checks; None when absent."""
    facts = device_facts(side)
    compute = facts.compute if facts is not None else None
    if compute is None:
        return None
    checks: list[Check] = []
    for op, result in (("matmul", compute.matmul), ("conv2d", compute.conv2d)):
        if result is None:
            continue
        diff = result.max_abs_diff
        observed = (
            str(result.error)
            if result.error
            else f"max |Δ| = {diff:.3g} on {compute.device}"
            if diff is not None
            else f"no result on {compute.device}"
        )
        checks.append(
            Check(
                name=f"{op} vs float64",
                expected=f"|Δ| ≤ {compute.atol} + {compute.rtol}·|reference|",
                observed=observed,
                passed=result.ok,
            )
        )
    return checks


def _number_verdict(a: Check, b: Check) -> Verdict:
    if a.passed and b.passed:
        return "same" if a.observed == b.observed else "within_tolerance"
    if a.passed:
        return "regression"
    if b.passed:
        return "improved"
    return "same" if a.observed == b.observed else "changed"


def _match_checks(
    stage: Literal["device", "sample"], checks_a: list[Check], checks_b: list[Check], intent: Intent | None
) -> list[NumberComparison]:
    by_a = {_check_key(check.name): check for check in checks_a}
    by_b = {_check_key(check.name): check for check in checks_b}
    keys = list(by_a) + [key for key in by_b if key not in by_a]
    rows: list[NumberComparison] = []
    for key in keys:
        a, b = by_a.get(key), by_b.get(key)
        if a is not None and b is not None:
            notes = []
            if a.name != b.name:
                notes.append(f"A checked {a.name}")
            if a.expected != b.expected:
                notes.append(f"A expected {a.expected}")
            rows.append(
                NumberComparison(
                    stage=stage,
                    name=b.name,
                    a_observed=a.observed,
                    b_observed=b.observed,
                    expected=b.expected,
                    a_passed=a.passed,
                    b_passed=b.passed,
                    verdict=_number_verdict(a, b),
                    note="; ".join(notes) or None,
                )
            )
            continue
        present = a or b
        assert present is not None
        verdict: Verdict
        if key != present.name and intent is not None and intent.covers(frozenset({"compare"})):
            verdict, note = "intended", intent.label
        elif (a is not None and a.passed) or (b is not None and not b.passed):
            verdict, note = "regression", "not checked in B" if b is None else "checked in B only"
        else:
            verdict, note = "changed", "not checked in B" if b is None else "checked in B only"
        rows.append(
            NumberComparison(
                stage=stage,
                name=present.name,
                a_observed=a.observed if a else None,
                b_observed=b.observed if b else None,
                expected=present.expected,
                a_passed=a.passed if a else None,
                b_passed=b.passed if b else None,
                verdict=verdict,
                note=note,
            )
        )
    return rows


def _number_rows(a: Side, b: Side, intent: Intent | None, not_compared: list[str]) -> list[NumberComparison]:
    if a.report is None or b.report is None:
        if a.report is not None or b.report is not None:
            not_compared.append(f"numbers: {'A' if a.report is None else 'B'} has no report")
        return []
    rows: list[NumberComparison] = []
    compute_a, compute_b = _compute_checks(a), _compute_checks(b)
    if compute_a is not None and compute_b is not None:
        rows += _match_checks("device", compute_a, compute_b, intent)
    elif compute_a is not None or compute_b is not None:
        missing = "A" if compute_a is None else "B"
        not_compared.append(f"device compute: {missing}'s device probe ran no computation")
    sample_a, sample_b = a.report.stages.get("sample"), b.report.stages.get("sample")
    checks_a = sample_a.checks if sample_a else []
    checks_b = sample_b.checks if sample_b else []
    if checks_a and checks_b:
        rows += _match_checks("sample", checks_a, checks_b, intent)
    elif checks_a or checks_b:
        missing, result = ("A", sample_a) if not checks_a else ("B", sample_b)
        status = result.status if result else "not recorded"
        why = f": {one_line(result.reason, 120)}" if result and result.reason else ""
        not_compared.append(f"sample checks: {missing}'s sample stage has none ({status}{why})")
    return rows


def compare_layers(a: Side, b: Side, intent: Intent | None = None) -> Layers:
    """The four stages' status and every number of B against A: what `orch compare` and `orch verify` both judge."""
    not_compared: list[str] = []
    stages = _stage_rows(a, b, not_compared)
    numbers = _number_rows(a, b, intent, not_compared)
    return Layers(stages=stages, numbers=numbers, not_compared=not_compared)
