"""The real examples pass on the CPU, built and probed for real (`orch rebuild`); their own criteria bite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.engine import Engine
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.environment import EnvironmentSummary
from orchestrator.report.write import read_report
from orchestrator.stages.base_image import BaseOutcome
from tests.integration.helpers import SESSION_TAG_NAMESPACE, orch, session_containers
from tests.paths import EXAMPLES

EXAMPLE_DOSSIERS = ["same-categories", "resume-training", "minilm-embeddings"]


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLE_DOSSIERS)
def test_example_passes_all_four_stages_on_the_cpu_and_two_cold_builds_give_one_environment(
    engine: Engine, base_image: BaseOutcome, name: str, tmp_path: Path
) -> None:
    dossier = EXAMPLES / name / "dossier.yaml"
    if not dossier.is_file():
        pytest.fail(f"examples/{name}/dossier.yaml is missing")
    before = session_containers()
    result = orch("rebuild", str(dossier), "--out", str(tmp_path / "out"), "--no-cache")
    assert session_containers() == before
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = read_report(tmp_path / "out" / "report.json")
    assert [stage.status for stage in report.stages.values()] == ["passed"] * 4
    assert len(report.stage("sample").checks) >= 6
    # Issue 15: a second cold build, in its own process, installs the same files (one environment digest).
    again = orch(
        "build",
        str(dossier),
        "--out",
        str(tmp_path / "again"),
        "--no-cache",
        "--tag",
        f"{SESSION_TAG_NAMESPACE}/{name}:again",
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    first, second = _environment(tmp_path / "out"), _environment(tmp_path / "again")
    assert second.digest == first.digest, f"two cold builds of {name} installed different files"
    assert first.files == second.files and first.files > 1000


def _environment(out: Path) -> EnvironmentSummary:
    record = BuildRecord.model_validate_json((out / "build.json").read_text())
    assert not record.reused and record.cache.cached < record.cache.steps, "--no-cache built the venv again"
    assert record.inventory is not None and record.inventory.environment is not None
    return record.inventory.environment


def test_same_categories_fails_on_a_changed_reference_label(
    engine: Engine, base_image: BaseOutcome, tmp_path: Path
) -> None:
    example = tmp_path / "same-categories"
    shutil.copytree(EXAMPLES / "same-categories", example)
    labels_path = example / "reference" / "labels.json"
    labels = json.loads(labels_path.read_text())
    labels[3] = next(label for label in sorted(set(labels)) if label != labels[3])
    labels_path.write_text(json.dumps(labels))
    result = orch("rebuild", str(example / "dossier.yaml"), "--out", str(tmp_path / "out"))
    assert result.returncode == 1
    report = read_report(tmp_path / "out" / "report.json")
    failed = [check for check in report.stage("sample").checks if not check.passed]
    assert any("label equality" in check.name for check in failed), [c.name for c in failed]
    assert report.stage("device").status == "passed"


def test_resume_training_fails_when_the_reference_continuation_differs(
    engine: Engine, base_image: BaseOutcome, tmp_path: Path
) -> None:
    example = tmp_path / "resume-training"
    shutil.copytree(EXAMPLES / "resume-training", example)
    losses_path = example / "reference" / "losses.json"
    losses = json.loads(losses_path.read_text())
    losses[-1] = losses[-1] * 1.01
    losses_path.write_text(json.dumps(losses))
    result = orch("rebuild", str(example / "dossier.yaml"), "--out", str(tmp_path / "out"))
    assert result.returncode == 1
    sample = read_report(tmp_path / "out" / "report.json").stage("sample")
    assert sample.first_error is not None and "losses" in sample.first_error.step
    assert "allclose" in sample.first_error.step
