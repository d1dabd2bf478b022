"""The nightly runner with a fake target: dispatch, exit codes, history, interruption, resume, retention."""

from __future__ import annotations

import _thread
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.errors import NightBusy
from orchestrator.nightly import history
from orchestrator.nightly.plan import load_plan
from orchestrator.nightly.runner import run_night
from tests.compare_sample import Run
from tests.nightly_sample import FakeTarget, Script, Together, two_target_plan


def _clock(day: int) -> datetime:
    return datetime(2026, 12, day, 3, 0, tzinfo=UTC)


def _targets(**kwargs: FakeTarget) -> dict[str, FakeTarget]:
    return {"gpu-a": kwargs.get("a", FakeTarget("gpu-a", 2)), "gpu-b": kwargs.get("b", FakeTarget("gpu-b", 1))}


def test_a_night_where_every_cell_passes(tmp_path: Path) -> None:
    plan = load_plan(two_target_plan(tmp_path))
    targets = _targets()
    result = run_night(plan, targets, clock=lambda: _clock(2))
    assert result.exit_code == 0
    night = tmp_path / "history" / "nights" / "2026-12-02"
    assert result.night_dir == night
    state = json.loads((night / "night.json").read_text())
    assert state["status"] == "complete" and len(state["cells"]) == 4
    assert sorted(targets["gpu-a"].calls) == ["tiny-embeddings-cuda.cpu@gpu-a", "tiny-embeddings@gpu-a"]
    for cell in state["cells"]:
        folder = night / cell["cell_id"]
        assert (folder / "report.json").is_file() and (folder / "build.json").is_file()
        assert json.loads((folder / "outcome.json").read_text())["status"] == "passed"
    for name in ("summary.json", "summary.md", "summary.html", "junit.xml"):
        assert (night / name).is_file()
    assert os.readlink(tmp_path / "history" / "latest") == "nights/2026-12-02"


def test_per_target_concurrency_and_targets_in_parallel(tmp_path: Path) -> None:
    plan = load_plan(two_target_plan(tmp_path, extra="", concurrency=2))
    together = Together()
    a = FakeTarget("gpu-a", 2, delay_s=0.3, together=together)
    b = FakeTarget("gpu-b", 1, delay_s=0.3, together=together)
    run_night(plan, {"gpu-a": a, "gpu-b": b}, clock=lambda: _clock(2))
    assert a.most_at_once == 2 and b.most_at_once == 1
    # Both targets at once: gpu-a's two cells and one of gpu-b's were running together.
    assert together.most == 3


def test_exit_codes_say_which_kind_of_failure(tmp_path: Path) -> None:
    plan = load_plan(two_target_plan(tmp_path))
    environment_only = FakeTarget("gpu-b", default=Script(status="environment", run=None, first_error="daemon down"))
    assert run_night(plan, _targets(b=environment_only), clock=lambda: _clock(2)).exit_code == 3
    failing = FakeTarget("gpu-a", 2, scripts={"tiny-embeddings@gpu-a": Script(status="failed", first_error="x")})
    assert run_night(plan, _targets(a=failing, b=environment_only), clock=lambda: _clock(2)).exit_code == 1


def test_a_target_that_raises_is_an_error_cell_not_a_lost_night(tmp_path: Path) -> None:
    plan = load_plan(two_target_plan(tmp_path))
    broken = FakeTarget("gpu-b", default=Script(raises=RuntimeError("ssh: connection reset")))
    result = run_night(plan, _targets(b=broken), clock=lambda: _clock(2))
    assert result.exit_code == 1 and result.state.status == "complete"
    outcomes = {cell.cell_id: cell.outcome for cell in result.state.cells}
    bad = outcomes["tiny-embeddings@gpu-b"]
    assert bad is not None and bad.status == "error" and "connection reset" in (bad.first_error or "")


def test_one_night_never_overwrites_another(tmp_path: Path) -> None:
    plan = load_plan(two_target_plan(tmp_path))
    first = run_night(plan, _targets(), clock=lambda: _clock(2)).night_dir
    before = (first / "night.json").read_bytes()
    second = run_night(plan, _targets(), clock=lambda: _clock(2)).night_dir
    assert second.name == "2026-12-02.2"
    assert (first / "night.json").read_bytes() == before
    assert os.readlink(tmp_path / "history" / "latest") == "nights/2026-12-02.2"


def test_an_interrupted_night_is_incomplete_then_resumed(tmp_path: Path) -> None:
    plan = load_plan(two_target_plan(tmp_path))
    # gpu-b's second cell presses Ctrl-C (SIGINT reaches the runner's main thread) while it runs.
    interrupt = Script(before=_thread.interrupt_main, status="cancelled", run=None)
    b = FakeTarget("gpu-b", scripts={"tiny-embeddings-cuda.cpu@gpu-b": interrupt}, delay_s=0.2)
    a = FakeTarget("gpu-a", 1, delay_s=0.5)
    with pytest.raises(KeyboardInterrupt):
        run_night(plan, {"gpu-a": a, "gpu-b": b}, clock=lambda: _clock(2))
    night = tmp_path / "history" / "nights" / "2026-12-02"
    state = history.read_state(night)
    assert state.status == "incomplete" and state.reason == "interrupted (Ctrl-C)"
    assert not (night / "summary.json").exists(), "an incomplete night has no summary that looks final"
    assert not (tmp_path / "history" / "latest").exists()
    done = {cell.cell_id for cell in state.cells if cell.outcome is not None and cell.outcome.status != "cancelled"}
    assert "tiny-embeddings@gpu-b" in done
    assert len(done) < 4
    # --resume runs only what did not finish, in the same folder.
    a2, b2 = FakeTarget("gpu-a", 1), FakeTarget("gpu-b", 1)
    result = run_night(plan, {"gpu-a": a2, "gpu-b": b2}, resume=True, clock=lambda: _clock(3))
    assert result.night_dir == night and result.exit_code == 0
    assert set(a2.calls + b2.calls) == {cell.cell_id for cell in state.cells} - done
    assert history.read_state(night).status == "complete"
    assert (night / "summary.json").is_file()


def test_a_killed_runner_leaves_a_night_that_reads_incomplete(tmp_path: Path) -> None:
    plan = load_plan(two_target_plan(tmp_path))
    night = run_night(plan, _targets(), clock=lambda: _clock(2)).night_dir
    state = history.read_state(night)
    # What a SIGKILL leaves: `running` in the file, and nobody holding the lock; one cell half-done.
    cells = tuple(replace_cell(cell) if cell.cell_id.endswith("gpu-b") else cell for cell in state.cells)
    history.write_state(night, state.model_copy(update={"status": "running", "cells": cells}))
    (night / "tiny-embeddings@gpu-b" / "half-written").write_text("x")
    assert history.effective_status(night, history.read_state(night)) == "incomplete"
    b = FakeTarget("gpu-b")
    result = run_night(plan, {"gpu-a": FakeTarget("gpu-a"), "gpu-b": b}, resume=True, clock=lambda: _clock(2))
    assert sorted(b.calls) == ["tiny-embeddings-cuda.cpu@gpu-b", "tiny-embeddings@gpu-b"]
    assert not (night / "tiny-embeddings@gpu-b" / "half-written").exists(), "an unfinished cell restarts clean"
    assert result.state.status == "complete"


def replace_cell(cell: history.CellState) -> history.CellState:
    return cell.model_copy(update={"state": "running", "outcome": None})


def test_resume_with_nothing_to_resume_is_refused(tmp_path: Path) -> None:
    plan = load_plan(two_target_plan(tmp_path))
    run_night(plan, _targets(), clock=lambda: _clock(2))
    with pytest.raises(NightBusy, match="no incomplete night to resume"):
        run_night(plan, _targets(), resume=True, clock=lambda: _clock(3))


def test_retention_removes_whole_old_nights_only(tmp_path: Path) -> None:
    plan = load_plan(two_target_plan(tmp_path, extra="retention_nights: 2\n"))
    nights = [run_night(plan, _targets(), clock=lambda day=day: _clock(day)).night_dir for day in (1, 2)]  # type: ignore[misc]
    (nights[0] / "KEEP").write_text("the night the reference was taken\n")
    third = run_night(plan, _targets(), clock=lambda: _clock(3))
    assert third.removed_nights == [], "a KEEP night is never removed"
    (nights[0] / "KEEP").unlink()
    fourth = run_night(plan, _targets(), clock=lambda: _clock(4))
    assert fourth.removed_nights == ["2026-12-01", "2026-12-02"]
    remaining = [night.name for night in history.list_nights(tmp_path / "history")]
    assert remaining == ["2026-12-03", "2026-12-04"]
    assert not any(entry.name.startswith(".removing") for entry in (tmp_path / "history").iterdir())


def test_second_night_sees_a_bumped_package_and_its_effect(tmp_path: Path) -> None:
    plan = load_plan(two_target_plan(tmp_path))
    run_night(plan, _targets(), clock=lambda: _clock(1))
    bumped = Run(freeze=tuple("numpy==2.4.7" if p.startswith("numpy==") else p for p in Run().freeze), cosine=0.9998)
    a = FakeTarget(
        "gpu-a", 2, scripts={"tiny-embeddings@gpu-a": Script(status="failed", run=bumped, first_error="cos")}
    )
    result = run_night(plan, _targets(a=a), clock=lambda: _clock(2))
    summary = json.loads((result.night_dir / "summary.json").read_text())
    cell = next(c for c in summary["cells"] if c["cell_id"] == "tiny-embeddings@gpu-a")
    assert cell["drift"]["previous_night"] == "2026-12-01"
    assert cell["drift"]["status_change"] == "newly failing"
    texts = [change["text"] for change in cell["drift"]["changes"]]
    assert "numpy 2.4.6 → 2.4.7" in texts
    assert any(
        text.startswith("embeddings: cosine vs reference") and "→ 0.9998 (Δ" in text and "(now FAILS)" in text
        for text in texts
    ), texts
    assert cell["drift"]["effect"].startswith("the cell now fails; stage sample: passed → failed; embeddings: cosine")
    untouched = next(c for c in summary["cells"] if c["cell_id"] == "tiny-embeddings@gpu-b")
    assert untouched["drift"]["changes"] == [] and untouched["drift"]["status_change"] == "still passing"
    assert [point["night"] for point in cell["trend"]] == ["2026-12-01", "2026-12-02"]


def test_cli_runs_a_night_through_a_target_factory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli.main import main

    monkeypatch.setenv("ORCH_NIGHTLY_TARGET_FACTORY", "tests.unit.test_nightly_runner:failing_factory")
    with pytest.raises(SystemExit) as exited:
        main(["nightly", "run", str(two_target_plan(tmp_path))])
    assert exited.value.code == 1
    captured = capsys.readouterr()
    assert "4 failed" in captured.out and "summary.html" in captured.out
    assert "4 of 4 cells did not pass" in captured.err and "summary.md" in captured.err


def failing_factory(spec: object) -> FakeTarget:
    return FakeTarget(getattr(spec, "name"), default=Script(status="failed", first_error="sample: cosine"))  # noqa: B009


def test_publishing_failure_is_recorded_and_the_night_still_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.nightly import publish
    from orchestrator.nightly.publish import PublishedCell, PublishRecord

    pushed: list[list[str]] = []

    def publish_passed(spec: object, night_dir: Path, passed: list[object], **_: object) -> PublishRecord:
        # The record nightly/publish.py returns when the registry refused every push (it never raises).
        cells = [getattr(outcome, "cell_id") for outcome in passed]  # noqa: B009
        pushed.append(cells)
        reason = "registry 127.0.0.1:5000 refused the connection"
        images = tuple(PublishedCell(cell_id=cell, status="failed", reason=reason) for cell in cells)
        return PublishRecord(
            created="2026-12-02T00:00:00Z",
            registry="127.0.0.1:5000",
            repository="team/nightly",
            status="failed",
            images=images,
        )

    monkeypatch.setattr(publish, "publish_passed", publish_passed)
    extra = "publish: {registry: 127.0.0.1:5000, repository: team/nightly, password_env: REG_TOKEN}\n"
    plan = load_plan(two_target_plan(tmp_path, extra=extra))
    failing = FakeTarget("gpu-b", default=Script(status="failed", first_error="x"))
    result = run_night(plan, _targets(b=failing), clock=lambda: _clock(2))
    assert pushed == [["tiny-embeddings@gpu-a", "tiny-embeddings-cuda.cpu@gpu-a"]], "only passing cells"
    assert result.state.status == "complete"
    assert result.state.publish is not None and result.state.publish.status == "failed"
    summary = json.loads((result.night_dir / "summary.json").read_text())
    assert "refused the connection" in summary["publish"]["detail"]
    assert "refused the connection" in (result.night_dir / "summary.md").read_text()


def test_a_crash_after_the_cells_leaves_the_night_incomplete_and_resume_only_summarises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.nightly import runner

    plan = load_plan(two_target_plan(tmp_path))
    real = runner.build_summary

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("disk went away")

    monkeypatch.setattr(runner, "build_summary", broken)
    with pytest.raises(RuntimeError):
        run_night(plan, _targets(), clock=lambda: _clock(2))
    night = tmp_path / "history" / "nights" / "2026-12-02"
    state = history.read_state(night)
    assert state.status == "incomplete" and state.reason == "RuntimeError: disk went away"
    assert all(cell.state == "done" for cell in state.cells), "every cell's outcome was kept"
    monkeypatch.setattr(runner, "build_summary", real)
    a, b = FakeTarget("gpu-a"), FakeTarget("gpu-b")
    result = run_night(plan, {"gpu-a": a, "gpu-b": b}, resume=True, clock=lambda: _clock(2))
    assert a.calls == [] and b.calls == [], "nothing ran again"
    assert result.exit_code == 0 and (night / "summary.json").is_file()


def test_publishing_takes_each_image_from_the_engine_of_the_target_that_built_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell built on gpu-b lives on gpu-b's daemon: the push must go through that endpoint, not the local one."""
    from orchestrator.engine import Connection
    from orchestrator.engine.fake import FakeEngine
    from orchestrator.nightly import runner

    calls: list[tuple[str | None, object, str | None]] = []
    opened: list[FakeEngine] = []

    def connect(base_url: str | None = None, tls_files: object = None, context: str | None = None) -> Connection:
        calls.append((base_url, tls_files, context))
        opened.append(FakeEngine())
        return opened[-1].connection()

    monkeypatch.setattr(runner, "connect", connect)
    engines = runner._TargetEngines(load_plan(two_target_plan(tmp_path)))
    first = engines("tiny-embeddings@gpu-b")
    assert engines("tiny-embeddings-cuda.cpu@gpu-b") is first, "one connection per target"
    engines("tiny-embeddings@gpu-a")
    engines.close()
    assert len(opened) == 2 and all(engine.closed for engine in opened), "every connection is closed"
    assert calls == [("tcp://127.0.0.1:23760", None, None), ("unix:///var/run/docker.sock", None, None)]
