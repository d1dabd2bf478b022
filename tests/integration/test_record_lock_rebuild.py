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


def _reference_run(tmp_path: Path) -> tuple[Path, Path, Path, Path, str]:
    """The tiny-embeddings reference run in a venv of its own: (python, app, data, outputs, command)."""
    if not any(TORCH_WHEELS.glob("torch-2.13.0+cpu-*.whl")):
        pytest.skip("this host has no local torch 2.13.0+cpu wheel (/opt/wheels); torch's index is not reachable")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # The reference environment, installed as a user would (the host's pip configuration, its wheel folder).
    subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0+cpu", "numpy"], check=True, timeout=900)
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
def test_vary_reruns_the_tiny_app_under_other_thread_counts(tmp_path: Path) -> None:
    python, app, data, outputs, command = _reference_run(tmp_path)
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
    # The seeded model gives the same numbers on every thread count: the proposal is the spread seen, 0.
    assert "the largest spread seen (0)" in justification and embeddings["compare"]["max"] == 0.0


@pytest.mark.slow
def test_recorded_reference_locks_and_rebuilds(engine: Engine, base_image: BaseOutcome, tmp_path: Path) -> None:
    python, app, data, outputs, command = _reference_run(tmp_path)

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
