"""`orch verify` judges a replay by `orch compare`'s own rows, so the two cannot disagree about a layer.

Before, verify had its own `compare_layers` (status equality) and `number_differences` (checks of the
same name whose observed text differs): a number checked in the shipped report and missing from the
replay went unseen, and a report without one of the stages was a KeyError. Both cases are below, with
the old code kept here to show what it said.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.compare.read import Side
from orchestrator.compare.verdict import compare_sides
from orchestrator.model.comparison import UNINTENDED
from orchestrator.model.report import STAGES, Report
from orchestrator.stages.verify import judge_replay
from tests.compare_sample import Run, make_report

FOLDER = Path("/handover")


def _old_verify(shipped: Report, replayed: Report) -> tuple[bool, list[tuple[str, str, str]]]:
    """verify.py's own comparison before it called compare's (verbatim, but for the return shape)."""
    reproduced = all(shipped.stage(name).status == replayed.stage(name).status for name in STAGES)
    out = []
    for name in ("device", "sample"):
        before = {check.name: check.observed for check in shipped.stage(name).checks}
        for check in replayed.stage(name).checks:
            if check.name in before and before[check.name] != check.observed:
                out.append((check.name, before[check.name], check.observed))
    return reproduced, out


def _agree(shipped: Report, replayed: Report) -> dict[str, str]:
    """Verify's verdict per layer, after checking it is what compare's rows say for that layer."""
    layers, _ = judge_replay(FOLDER, shipped, replayed)
    comparison = compare_sides(Side(path=FOLDER / "a", report=shipped), Side(path=FOLDER / "b", report=replayed))
    stage_rows = {row.stage: row.verdict for row in comparison.stages}
    broken = {row.stage for row in comparison.numbers if row.verdict in UNINTENDED}
    for layer in layers:
        by_compare = stage_rows.get(layer.stage) == "same" and layer.stage not in broken
        assert (layer.verdict == "reproduced") == by_compare, (layer, comparison.stages, comparison.numbers)
    return {layer.stage: layer.verdict for layer in layers}


def _without_check(report: Report, stage: str, prefix: str) -> Report:
    result = report.stages[stage]  # type: ignore[index]
    kept = [check for check in result.checks if not check.name.startswith(prefix)]
    return report.model_copy(update={"stages": {**report.stages, stage: result.model_copy(update={"checks": kept})}})


def test_a_number_missing_from_the_replay_is_a_difference_for_both() -> None:
    shipped = make_report(Run())
    replayed = _without_check(shipped, "sample", "embeddings: cosine")
    assert replayed.stage("sample").status == "passed"

    assert _old_verify(shipped, replayed) == (True, []), "the old verify called this reproduced, silently"
    assert _agree(shipped, replayed)["sample"] == "differs"
    comparison = compare_sides(Side(path=FOLDER / "a", report=shipped), Side(path=FOLDER / "b", report=replayed))
    assert comparison.verdict == "regressed" and "not checked" in comparison.unintended[0]
    _, numbers = judge_replay(FOLDER, shipped, replayed)
    assert [name for name, _, after in numbers if after == "not checked"] == [
        "embeddings: cosine vs reference/embeddings.npy"
    ]


def test_a_report_without_a_stage_is_a_difference_not_a_crash() -> None:
    shipped = make_report(Run())
    replayed = shipped.model_copy(update={"stages": {k: v for k, v in shipped.stages.items() if k != "sample"}})
    with pytest.raises(KeyError):
        _old_verify(shipped, replayed)
    layers, _ = judge_replay(FOLDER, shipped, replayed)
    assert {layer.stage: (layer.replayed, layer.verdict) for layer in layers}["sample"] == ("not recorded", "differs")


@pytest.mark.parametrize(
    "replayed_run",
    [
        Run(),
        Run(matmul_diff=2.2e-05, cosine=0.9999991),  # numbers differ within tolerance: reproduced, listed
        Run(cosine=0.5),  # a number out of tolerance: the sample stage fails
        Run(devices=("NVIDIA H100",), nvidia_driver="550.54.15"),  # another host
    ],
    ids=["same", "within-tolerance", "out-of-tolerance", "another-host"],
)
def test_verify_and_compare_agree_layer_by_layer(replayed_run: Run) -> None:
    shipped, replayed = make_report(Run()), make_report(replayed_run)
    verdicts = _agree(shipped, replayed)
    _, numbers = judge_replay(FOLDER, shipped, replayed)
    if replayed_run == Run():
        assert set(verdicts.values()) == {"reproduced"} and numbers == []
    if replayed_run.cosine == 0.5:
        assert verdicts["sample"] == "differs"
    if replayed_run.matmul_diff != Run().matmul_diff:
        assert verdicts["device"] == "reproduced"
        assert any(name == "matmul vs float64" for name, _, _ in numbers)
