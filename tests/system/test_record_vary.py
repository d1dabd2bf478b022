"""`orch record --vary NAME=v1,v2`: reruns under other settings, the spread per setting next to `--repeat`'s,
and a proposed tolerance that states the largest spread seen and stays marked for a person."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# Like a reduction whose order follows the thread count: the result moves with OMP_NUM_THREADS.
APP = """\
import os, sys
import numpy as np
threads = int(os.environ.get("OMP_NUM_THREADS", "0"))
values = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32) + np.float32(1e-3 * threads)
np.save(sys.argv[1] + "/values.npy", values)
"""


def _orch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, check=False, env=env
    )


def test_vary_measures_the_spread_per_setting_and_proposes_the_largest(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    env["COLUMNS"] = "300"
    app = tmp_path / "app"
    app.mkdir()
    (app / "run.py").write_text(APP)
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    subprocess.run([sys.executable, "run.py", str(outputs)], cwd=app, check=True, env=env)
    out = tmp_path / "draft"
    done = _orch(
        "record", "--python", sys.executable, "--code", str(app), "--outputs", str(outputs),
        "--command", f"python run.py {outputs}", "--out", str(out), "--repeat", "1",
        "--vary", "OMP_NUM_THREADS=1,2", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    assert "with OMP_NUM_THREADS=2: {" in done.stdout
    (observed,) = json.loads((out / "record" / "outputs.json").read_text())
    assert observed["spread"]["identical"] is True and observed["spread"]["runs"] == 1
    assert set(observed["varied"]) == {"OMP_NUM_THREADS=1", "OMP_NUM_THREADS=2"}
    one, two = observed["varied"]["OMP_NUM_THREADS=1"], observed["varied"]["OMP_NUM_THREADS=2"]
    assert one["max_abs"] == pytest.approx(1e-3, rel=1e-3) and two["max_abs"] == pytest.approx(2e-3, rel=1e-3)
    runs = json.loads((out / "record" / "runs.json").read_text())
    assert runs["reruns"] == 1 and set(runs["varied_seconds"]) == set(observed["varied"])
    draft = yaml.safe_load((out / "dossier.yaml").read_text())
    compare = draft["expect"]["outputs"][0]["compare"]
    assert compare["metric"] == "max_abs"
    assert compare["max"] == two["max_abs"] > one["max_abs"]  # the largest spread seen, as measured
    justification = compare["justification"]
    assert justification.startswith("TO CONFIRM: measured, 1 rerun(s) on the reference host gave identical bytes; ")
    assert "with OMP_NUM_THREADS=1: max |a-b| = 0.001" in justification
    assert "with OMP_NUM_THREADS=2: max |a-b| = 0.002" in justification
    assert "the largest spread seen (0.002)" in justification


def test_a_malformed_vary_is_one_line_naming_the_option(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "outputs").mkdir()
    done = _orch(
        "record", "--python", sys.executable, "--code", str(tmp_path / "app"), "--outputs", str(tmp_path / "outputs"),
        "--command", "python run.py", "--out", str(tmp_path / "draft"), "--vary", "OMP_NUM_THREADS", env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 2
    assert "--vary 'OMP_NUM_THREADS': give NAME=VALUE" in done.stderr and "Traceback" not in done.stderr
