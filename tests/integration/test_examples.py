"""The real examples pass on the CPU, built and probed for real (`orch rebuild`); their own criteria bite."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from orchestrator.engine import Engine
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.environment import ENVIRONMENT_FILE, EnvironmentSummary
from orchestrator.report.write import read_report
from orchestrator.stages.base_image import BaseOutcome
from tests.integration.helpers import SESSION_TAG_NAMESPACE, orch, session_containers
from tests.paths import EXAMPLES

#: Examples whose venv is installed from tiny-embeddings' lock, byte for byte: their Dockerfiles differ from
#: tiny's only in the app they copy and the final labels (tests/golden/files/*.Dockerfile), so their venv
#: layers are tiny's (the build cache), and the property "two cold builds give one environment" is tiny's
#: cold pair (test_environment_equivalence.py, every run) plus the app copy checked file by file below.
TINY_LOCK_EXAMPLES = ["same-categories", "resume-training"]


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY_LOCK_EXAMPLES)
def test_example_on_tinys_lock_passes_all_four_stages_on_the_cpu_with_tinys_environment(
    engine: Engine, base_image: BaseOutcome, name: str, tmp_path: Path, warm_tiny_out: Path
) -> None:
    """Issue 22: no second cold build here (it installed the very lock tiny's cold pair installs). Instead:
    the lock is tiny's, the venv in the image is file for file the warm tiny image's (whose digest tiny's
    cold build meets), and /opt/app holds the example's app folder byte for byte."""
    dossier = EXAMPLES / name / "dossier.yaml"
    lock = EXAMPLES / name / "requirements-cpu.lock"
    assert lock.read_bytes() == (EXAMPLES / "tiny-embeddings" / "requirements-cpu.lock").read_bytes(), (
        f"examples/{name} no longer installs tiny-embeddings' lock: give it its own cold pair (docs/testing.md)"
    )
    before = session_containers()
    result = orch("rebuild", str(dossier), "--out", str(tmp_path / "out"))
    assert session_containers() == before
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = read_report(tmp_path / "out" / "report.json")
    assert [stage.status for stage in report.stages.values()] == ["passed"] * 4
    assert len(report.stage("sample").checks) >= 6
    files = _listed_files(tmp_path / "out")
    tiny = _listed_files(warm_tiny_out)
    venv = {path: value for path, value in files.items() if path.startswith("/opt/venv/")}
    assert len(venv) > 1000 and venv == {p: v for p, v in tiny.items() if p.startswith("/opt/venv/")}
    app = EXAMPLES / name / "app"
    sources = [path for path in app.rglob("*") if path.is_file() and "__pycache__" not in path.parts]
    assert sources
    for source in sources:
        listed = files.get(f"/opt/app/{source.relative_to(app).as_posix()}")
        assert listed == hashlib.sha256(source.read_bytes()).hexdigest(), source


@pytest.mark.slow
def test_minilm_passes_all_four_stages_on_the_cpu_and_two_cold_builds_give_one_environment(
    engine: Engine, base_image: BaseOutcome, tmp_path: Path
) -> None:
    """minilm has its own lock (transformers, tokenizers, a real model): its cold pair stays, beside tiny's.

    Issue 23: the pair's second build is the classic builder's (its wheel feed, its layers), so the pair also
    shows that both builders install one environment for this lock; tiny's cold pair is BuildKit's twice."""
    name = "minilm-embeddings"
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
        "--builder",
        "classic",
        "--tag",
        f"{SESSION_TAG_NAMESPACE}/{name}:again",
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    builders = [_builder(tmp_path / "out"), _builder(tmp_path / "again")]
    assert builders == ["buildkit", "classic"], builders
    first, second = _environment(tmp_path / "out"), _environment(tmp_path / "again")
    assert second.digest == first.digest, f"a BuildKit and a classic cold build of {name} installed different files"
    assert first.files == second.files and first.files > 1000


def _listed_files(out: Path) -> dict[str, str]:
    """environment.json's per-file list (path → sha256 of its bytes) of a build's --out folder."""
    listed: dict[str, str] = json.loads((out / ENVIRONMENT_FILE).read_text())["files"]
    return listed


def _builder(out: Path) -> str:
    return str(BuildRecord.model_validate_json((out / "build.json").read_text()).context.builder)


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
