"""The sample started with the device probe (plan/program.py `sample_runs_alongside`, stages/alongside.py).

The plan decides it (CPU platform, not `orch verify`), and a sample so started is stopped — its container
removed by the label only it carries — when the device stage fails or the program stops early. The
engine below is a stand-in whose `run` blocks until its container is removed: the coordination is the
logic under test; tests/integration/test_probe_alongside.py does the same on the real engine.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.engine import RemoveContainers, RunOutcome
from orchestrator.plan.program import DeviceStage, ProbeFacts, probe_program, sample_runs_alongside
from orchestrator.plan.run import GpuMapping, RunPlan, make_run_plan
from orchestrator.plan.specs import RunSpec
from orchestrator.stages import alongside
from tests.paths import EXAMPLES
from tests.unit.test_program import CPU_HOST


@pytest.mark.parametrize(
    ("platform", "stop_after_failure", "expected"),
    [("cpu", False, True), ("cpu", True, False), ("cuda", False, False), ("rocm", False, False)],
)
def test_only_a_cpu_probe_that_is_not_a_replay_starts_the_sample_with_the_device_probe(
    platform: str, stop_after_failure: bool, expected: bool
) -> None:
    assert sample_runs_alongside(platform, stop_after_failure) is expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "expected"), [("dossier.yaml", True), ("dossier-cuda.yaml", False)])
def test_the_program_carries_the_decision_in_its_device_step(name: str, expected: bool) -> None:
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / name)
    facts = ProbeFacts(host=CPU_HOST, image_id="sha256:" + "a" * 64, image_ref="x:y", selection=None, host_notes=())
    for stop_after_failure, alongside_expected in ((False, expected), (True, False)):
        program = probe_program(loaded, Path("/tmp/out"), facts, stop_after_failure=stop_after_failure)
        device = next(step for step in program if isinstance(step, DeviceStage))
        assert device.sample_alongside is alongside_expected


class _BlockingEngine:
    """`run` blocks until `remove(RemoveContainers(label))` names the label its spec carries."""

    def __init__(self) -> None:
        self.removed: list[str] = []
        self.started = threading.Event()
        self._gone = threading.Event()
        self._label: str | None = None

    def run(self, spec: RunSpec, copy: object = None) -> RunOutcome:
        self._label = f"{alongside.ALONGSIDE_LABEL}={spec.labels[alongside.ALONGSIDE_LABEL]}"
        self.started.set()
        assert self._gone.wait(30), "the container was never removed"
        return RunOutcome(exit_code=137, stdout="", stderr="", timed_out=False, duration_s=0.0)

    def remove(self, target: RemoveContainers) -> list[str]:
        self.removed.append(target.label)
        if target.label == self._label:
            self._gone.set()
        return [target.label]


def _tiny_plan(tmp_path: Path) -> tuple[LoadedDossier, RunPlan]:
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    return loaded, make_run_plan(loaded, "sha256:" + "b" * 64, GpuMapping(), tmp_path)


def test_stopping_removes_the_running_sample_by_its_own_label_and_waits_for_it(tmp_path: Path) -> None:
    loaded, plan = _tiny_plan(tmp_path)
    engine = _BlockingEngine()
    started = alongside.start_alongside(engine, loaded, plan)  # type: ignore[arg-type]
    assert engine.started.wait(30), "the sample's container never started"
    assert not started.future.done()
    begun = time.monotonic()
    alongside.stop(engine, started)  # type: ignore[arg-type]
    assert started.future.done()
    assert time.monotonic() - begun < 10
    assert engine.removed and set(engine.removed) == {started.label}
    assert started.label.startswith(f"{alongside.ALONGSIDE_LABEL}=") and len(started.label.split("=")[1]) == 32


def test_two_runs_label_their_samples_apart(tmp_path: Path) -> None:
    # Each run has its own output folder, as two real runs would: two samples preparing one folder at once
    # race on it (one's rmtree against the other's mkdir), which a CI run once saw as a sample that never started.
    plans = [_tiny_plan(tmp_path / name) for name in ("first", "second")]
    engines = [_BlockingEngine(), _BlockingEngine()]
    runs = [
        alongside.start_alongside(engine, loaded, plan)  # type: ignore[arg-type]
        for engine, (loaded, plan) in zip(engines, plans, strict=True)
    ]
    assert runs[0].label != runs[1].label
    for engine, started in zip(engines, runs, strict=True):
        if not engine.started.wait(30):
            pytest.fail(f"the sample never started: {started.future.exception(timeout=1)!r}")
        alongside.stop(engine, started)  # type: ignore[arg-type]
        assert engine.removed == [started.label]
