"""The device probe keeps torch's warnings and stderr; the device stage explains them with the failure catalogue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import RunOutcome
from orchestrator.model.host import CompatVerdict
from orchestrator.plan.run import GpuMapping, make_run_plan
from orchestrator.plan.specs import RunSpec
from orchestrator.stages.device_stage import device_stage
from tests.paths import EXAMPLES
from tests.probe_outputs import device_output

VERDICT = CompatVerdict(status="not-applicable", explanation="CPU")
IMAGE_ID = "sha256:" + "2" * 64


class _Runs:
    def __init__(self, stdout: str, stderr: str = "", exit_code: int = 0) -> None:
        self.outcome = RunOutcome(exit_code=exit_code, stdout=stdout, stderr=stderr, timed_out=False, duration_s=0.1)

    def run(self, spec: RunSpec) -> RunOutcome:
        return self.outcome


def _stage(engine: Any) -> Any:
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    return device_stage(engine, loaded, make_run_plan(loaded, IMAGE_ID, GpuMapping(), Path("out")), VERDICT)


def test_torch_warnings_reach_the_report_explained() -> None:
    warning = (
        "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 11040). "
        "Please update your GPU driver"
    )
    result = _stage(_Runs(json.dumps(device_output(warnings=[warning], stderr=""))))
    facts = result.model_dump(mode="json")["facts"]
    assert facts["warnings"] == [warning]
    assert [e["id"] for e in facts["explanations"]] == ["torch-driver-too-old"]
    assert "found version 11040 = CUDA 11.4" in facts["explanations"][0]["cause"]


def test_a_probe_that_died_is_explained_from_its_stderr() -> None:
    stderr = "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!\n"
    result = _stage(_Runs("", stderr=stderr, exit_code=134))
    assert result.status == "failed" and result.first_error is not None
    assert (
        "Known cause: The ROCm build has no code object for the gfx target of a GPU it was given"
        in result.first_error.message
    )
    assert result.model_dump(mode="json")["facts"]["explanations"][0]["id"] == "hip-no-binary-for-gpu"


def test_the_driver_too_old_explanation_names_only_the_version_found() -> None:
    warning = "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 12020)."
    cause = _stage(_Runs(json.dumps(device_output(warnings=[warning], stderr="")))).model_dump(mode="json")["facts"][
        "explanations"
    ][0]["cause"]
    assert "found version 12020 = CUDA 12.2" in cause and "11040" not in cause and "11.4" not in cause


def test_a_probe_that_died_with_an_unknown_message_says_orch_does_not_know_it() -> None:
    stderr = "Traceback (most recent call last):\nRuntimeError: frobnicator refused the quantum flux\n"
    result = _stage(_Runs("", stderr=stderr, exit_code=1))
    assert result.first_error is not None
    message = result.first_error.message
    assert "orch does not know this message (seen at probe, layer device)" in message
    assert "orch doctor --capture" in message
    (entry,) = result.model_dump(mode="json")["facts"]["explanations"]
    assert entry["id"] == "unknown" and entry["layer"] == "device"
    assert "frobnicator refused the quantum flux" in entry["message"]


def test_a_cuda_error_the_catalogue_does_not_know_is_named_as_unknown_with_its_text() -> None:
    output = device_output(stderr="")
    output["cuda_error"] = "CUDA error: the launch timed out and was terminated by the watchdog of a new kind"
    facts = _stage(_Runs(json.dumps(output))).model_dump(mode="json")["facts"]
    (entry,) = facts["explanations"]
    assert entry["id"] == "unknown" and "watchdog of a new kind" in entry["message"]


class _Refuses:
    """The daemon refusing the device container, in its real words (CDI not enabled, Docker 20.10 to 27)."""

    def run(self, spec: RunSpec) -> RunOutcome:
        from orchestrator.engine.docker_containers import start_failure

        raise start_failure(spec.image, 'could not select device driver "cdi" with capabilities: []')


def test_a_device_container_that_does_not_start_fails_the_device_stage_with_the_cause() -> None:
    result = _stage(_Refuses())
    assert result.status == "failed" and result.first_error is not None
    assert result.first_error.step == "container start"
    assert "[host] Docker has no `cdi` device driver" in result.first_error.message
    (entry,) = result.model_dump(mode="json")["facts"]["explanations"]
    assert (entry["id"], entry["seen_in"]) == ("cdi-driver-not-enabled", "container start")
    assert '"features": {"cdi": true}' in entry["next_step"]
