"""Every catalogued cause is recognised at each place it can appear (its `appears_in`), through the code that reads
that place: a container's start error (engine/docker_containers.py `start_failure`), a probe that died (the device
stage), and a captured command's failed output (`orch doctor --from`). The messages are the corpus's real ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.checks.failures import FailureCause, Seen, catalogue
from orchestrator.dossier.load import load_dossier
from orchestrator.engine import RunOutcome
from orchestrator.engine.docker_containers import start_failure
from orchestrator.host.capture import read_capture
from orchestrator.model.host import CompatVerdict
from orchestrator.pipeline.doctor import capture_explanations
from orchestrator.plan.run import GpuMapping, make_run_plan
from orchestrator.plan.specs import RunSpec
from orchestrator.stages.device_stage import device_stage
from tests.paths import EXAMPLES

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def _messages() -> dict[str, list[tuple[str, str]]]:
    """Cause id → its corpus messages, each with where the report saw it ("container-start", "probe", …)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for entry in sorted(CORPUS.iterdir()):
        expected_file = entry / "expected.json"
        message_file = entry / "logs" / "message.txt"
        if not (expected_file.is_file() and message_file.is_file()):
            continue
        expected = json.loads(expected_file.read_text(encoding="utf-8"))
        found.setdefault(expected["catalogue"], []).append(
            (message_file.read_text(encoding="utf-8"), expected.get("seen_at", ""))
        )
    return found


MESSAGES = _messages()
CASES = [(cause, seen) for cause in catalogue() for seen in cause.appears_in]


def _message(cause: FailureCause, seen: Seen) -> str:
    candidates = MESSAGES.get(cause.id, [])
    assert candidates, f"{cause.id}: no real message in tests/corpus"
    return next((text for text, at in candidates if at == seen), candidates[0][0])


class _Died:
    def __init__(self, stderr: str) -> None:
        self.stderr = stderr

    def run(self, spec: RunSpec) -> RunOutcome:
        return RunOutcome(exit_code=1, stdout="", stderr=self.stderr, timed_out=False, duration_s=0.1)


def _probe(stderr: str) -> list[dict[str, Any]]:
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    plan = make_run_plan(loaded, "sha256:" + "3" * 64, GpuMapping(), Path("out"))
    result = device_stage(_Died(stderr), loaded, plan, CompatVerdict(status="not-applicable", explanation="CPU"))  # type: ignore[arg-type]
    explanations: list[dict[str, Any]] = result.model_dump(mode="json")["facts"]["explanations"]
    return explanations


def _captured(tmp_path: Path, output: str) -> list[dict[str, str]]:
    (tmp_path / "commands").mkdir()
    (tmp_path / "commands" / "00-tool.txt").write_text(output, encoding="utf-8")
    manifest = {
        "format": "orch-host-capture/1",
        "commands": [{"argv": ["nvidia-smi"], "returncode": 1, "stdout": "commands/00-tool.txt"}],
        "files": [],
        "devices": [],
        "env": {},
        "logs": [],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return capture_explanations(read_capture(tmp_path))


@pytest.mark.parametrize(("cause", "seen"), CASES, ids=[f"{cause.id}@{seen}" for cause, seen in CASES])
def test_each_cause_is_explained_where_it_appears(cause: FailureCause, seen: Seen, tmp_path: Path) -> None:
    message = _message(cause, seen)
    if seen == "container-start":
        error = start_failure("orch/app:1", message)
        assert f"[{cause.layers}] {cause.cause}" in error.message, error.message
        assert error.hint == f"next: {cause.next_step}"
    elif seen == "probe":
        assert _probe(message)[0]["id"] == cause.id
    else:
        assert _captured(tmp_path, message)[0]["id"] == cause.id


def test_an_unknown_start_error_is_named_by_its_layer_with_the_daemons_words() -> None:
    error = start_failure("orch/app:1", "OCI runtime create failed: the gremlin ate the cgroup: unknown")
    assert "orch does not know this message (seen at container start, layer host)" in error.message
    assert "the gremlin ate the cgroup" in error.message and error.hint is not None
    assert "orch doctor --capture" in error.hint
