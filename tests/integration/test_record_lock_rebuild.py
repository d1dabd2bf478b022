"""The front door end to end: a real reference run in a venv on this machine, `orch record`, `orch lock`,
`orch rebuild` passing all four stages. The recorded dossier is compared with the hand-written
tiny-embeddings one: they differ only where the draft asks a person to decide."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.engine import Engine
from orchestrator.stages.base_image import BaseOutcome
from tests.integration.helpers import orch
from tests.paths import EXAMPLES

TORCH_WHEELS = Path("/opt/wheels")
TINY = EXAMPLES / "tiny-embeddings"


@pytest.fixture(scope="module")
def reference_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference environment, a venv installed as a user would (the host's pip configuration, its wheel
    folder); made once for this module's tests."""
    if not any(TORCH_WHEELS.glob("torch-2.13.0+cpu-*.whl")):
        pytest.skip("this host has no local torch 2.13.0+cpu wheel (/opt/wheels); torch's index is not reachable")
    venv = tmp_path_factory.mktemp("reference") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0+cpu", "numpy"], check=True, timeout=900)
    return python


def _reference_run(tmp_path: Path, python: Path) -> tuple[Path, Path, Path, Path, str]:
    """The tiny-embeddings reference run in the reference venv: (python, app, data, outputs, command)."""
    app = tmp_path / "app"
    shutil.copytree(TINY / "app", app)
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(TINY / "sample" / "sample.jsonl", data / "sample.jsonl")
    outputs = tmp_path / "outputs"
    command = f"python embed.py --input {data}/sample.jsonl --output {outputs} --dim 16 --buckets 2048 --seed 0"
    subprocess.run([str(python), *command.split()[1:]], cwd=app, check=True, capture_output=True)
    return python, app, data, outputs, command


@pytest.mark.slow
def test_vary_reruns_the_tiny_app_under_other_thread_counts(reference_python: Path, tmp_path: Path) -> None:
    python, app, data, outputs, command = _reference_run(tmp_path, reference_python)
    draft = tmp_path / "draft"
    recorded = orch(
        "record", "--python", str(python), "--code", str(app), "--data", str(data / "sample.jsonl"),
        "--outputs", str(outputs), "--command", command, "--out", str(draft), "--repeat", "1",
        "--vary", "OMP_NUM_THREADS=1,2", "--base-image", "orch/debian-python:bookworm",
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr + recorded.stdout
    embeddings = next(o for o in yaml.safe_load((draft / "dossier.yaml").read_text())["expect"]["outputs"])
    justification = embeddings["compare"]["justification"]
    assert justification.startswith("TO CONFIRM: measured, 1 rerun(s)")
    for threads in ("1", "2"):
        assert f"with OMP_NUM_THREADS={threads}: " in justification
    # The seeded model gives the same numbers on every thread count: the spread seen is 0, so the proposal is
    # the floor (8 float32 ulps at the output's scale), said in words.
    assert (
        "above the largest spread seen (0)" in justification and "units in the last place of float32" in justification
    )
    assert 0.0 < embeddings["compare"]["max"] < 1e-5


@pytest.mark.slow
def test_recorded_reference_locks_and_rebuilds(
    engine: Engine, base_image: BaseOutcome, reference_python: Path, tmp_path: Path
) -> None:
    python, app, data, outputs, command = _reference_run(tmp_path, reference_python)

    draft = tmp_path / "draft"
    recorded = orch(
        "record", "--python", str(python), "--code", str(app), "--data", str(data / "sample.jsonl"),
        "--outputs", str(outputs), "--command", command, "--out", str(draft), "--repeat", "1",
        "--base-image", "orch/debian-python:bookworm", "--name", "recorded-tiny",
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr + recorded.stdout
    assert "1 rerun" in (draft / "dossier.yaml").read_text()

    locked = orch("lock", str(draft / "dossier.yaml"), "--skip-unreachable", "--find-links", str(TORCH_WHEELS))
    assert locked.returncode == 0, locked.stderr + locked.stdout
    validated = orch("validate", str(draft / "dossier.yaml"))
    assert validated.returncode == 0, validated.stderr
    assert "still marked TO CONFIRM: description, expect.outputs[0].compare.justification" in validated.stdout

    mine = yaml.safe_load((draft / "dossier.yaml").read_text())
    theirs = yaml.safe_load((TINY / "dossier.yaml").read_text())
    assert mine["expect"]["command"] == theirs["expect"]["command"]
    assert mine["expect"]["inputs"] == theirs["expect"]["inputs"]
    for key in ("version", "install", "indexes"):
        assert mine["python"][key] == theirs["python"][key], key
    assert mine["system"] == theirs["system"]
    ours, hand = mine["expect"]["outputs"][0], theirs["expect"]["outputs"][0]
    assert {k: ours[k] for k in ("name", "file", "format", "shape", "dtype", "finite")} == {
        k: hand[k] for k in ("name", "file", "format", "shape", "dtype", "finite")
    }
    assert ours["ids"]["file"] == hand["ids"]["file"]
    # Where they differ, the draft says so: the tolerance is the measured spread, marked for a person.
    assert ours["compare"]["justification"].startswith("TO CONFIRM: measured, 1 rerun(s)")

    rebuilt = orch("rebuild", str(draft / "dossier.yaml"), "--out", str(tmp_path / "rebuild"))
    assert rebuilt.returncode == 0, rebuilt.stdout[-3000:] + rebuilt.stderr
    for stage in ("image", "host", "device", "sample"):
        assert any(line.split()[:2] == [stage, "passed"] for line in rebuilt.stdout.splitlines()), stage


FOLDER_APP = Path(__file__).resolve().parents[1] / "fixtures" / "folder-app"


@pytest.mark.slow
def test_an_app_reading_a_model_folder_a_data_folder_and_a_file_rebuilds_from_the_draft_with_no_hand_edit(
    engine: Engine, base_image: BaseOutcome, reference_python: Path, tmp_path: Path
) -> None:
    """Issue 24: record → lock → validate → rebuild of an app whose command takes a model folder, a data folder
    and an input file; the recorded dossier rebuilds and passes as written."""
    app = tmp_path / "app"
    shutil.copytree(FOLDER_APP, app)
    model = tmp_path / "model"
    (model / "tokenizer").mkdir(parents=True)
    (model / "config.json").write_text('{"dim": 8, "seed": 3}')
    (model / "tokenizer" / "vocab.txt").write_text("alpha beta gamma delta epsilon\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in (("a", "alpha beta"), ("b", "gamma delta gamma"), ("c", "epsilon alpha zeta")):
        (docs / f"{name}.txt").write_text(text)
    query = tmp_path / "query.txt"
    query.write_text("alpha gamma")
    outputs = tmp_path / "outputs"
    command = f"python score.py --model {model} --data {docs} --query {query} --out {outputs}"
    subprocess.run([str(reference_python), *command.split()[1:]], cwd=app, check=True, capture_output=True)

    draft = tmp_path / "draft"
    recorded = orch(
        "record", "--python", str(reference_python), "--code", str(app), "--weights", str(model),
        "--data", str(docs), "--data", str(query), "--outputs", str(outputs), "--command", command,
        "--out", str(draft), "--repeat", "1", "--base-image", "orch/debian-python:bookworm", "--name", "folder-app",
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr + recorded.stdout
    document = yaml.safe_load((draft / "dossier.yaml").read_text())
    assert document["expect"]["command"] == [
        "python", "score.py", "--model", "/orch/weights/model", "--data", "/orch/input/sample/docs",
        "--query", "/orch/input/sample/query.txt", "--out", "/orch/output",
    ]  # fmt: skip
    assert [(w["name"], w["path"]) for w in document["weights"]] == [("model", "weights/model")], "one item"
    assert [i["path"] for i in document["expect"]["inputs"]] == ["sample/docs", "sample/query.txt"]
    pinned = [line.split("==")[0] for line in (draft / "requirements.in").read_text().splitlines() if "==" in line]
    assert "torch" in pinned and "numpy" in pinned and "sympy" not in pinned, pinned

    locked = orch("lock", str(draft / "dossier.yaml"), "--skip-unreachable", "--find-links", str(TORCH_WHEELS))
    assert locked.returncode == 0, locked.stderr + locked.stdout
    freeze = dict(
        line.split("==") for line in (draft / "record" / "pip-freeze.txt").read_text().splitlines() if "==" in line
    )
    lock_text = (draft / "requirements.lock").read_text()
    assert f"sympy=={freeze['sympy']}" in lock_text, "the first lock prefers the reference's versions"
    validated = orch("validate", str(draft / "dossier.yaml"))
    assert validated.returncode == 0, validated.stderr

    rebuilt = orch("rebuild", str(draft / "dossier.yaml"), "--out", str(tmp_path / "rebuild"))
    assert rebuilt.returncode == 0, rebuilt.stdout[-3000:] + rebuilt.stderr
    for stage in ("image", "host", "device", "sample"):
        assert any(line.split()[:2] == [stage, "passed"] for line in rebuilt.stdout.splitlines()), stage
