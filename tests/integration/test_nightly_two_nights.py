"""Two real nights on the local engine (warm cache): history, drift of a code change, the summary.

Night 1 rebuilds a copy of examples/tiny-embeddings through the runner's API; then the app is changed
(alternate embedding columns scaled by 1.1: the cosine with the reference drops) and night 2 runs
through `orch nightly run` in a subprocess. Its summary must name the drop and the newly failing sample
stage, and both nights' pages stay. The cells run `orch rebuild` with the session's tag namespace and
labels (inherited), so the suite's housekeeping removes their images.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.engine import Engine
from orchestrator.nightly.plan import load_plan
from orchestrator.nightly.runner import run_night
from tests.integration.helpers import SESSION_TAG_NAMESPACE
from tests.nightly_local_target import LocalRebuildTarget
from tests.nightly_sample import write_plan
from tests.paths import REPO


def test_two_nights_on_the_local_engine(engine: Engine, tiny_example: Path, tmp_path: Path) -> None:
    plan_file = write_plan(
        tmp_path / "plan",
        f"""nightly: 1
dossiers:
  - path: {tiny_example / "dossier.yaml"}
    timeout_s: 600
targets:
  - name: local
    kind: docker
cache: warm
history: history
tag_namespace: {SESSION_TAG_NAMESPACE}
""",
    )
    plan = load_plan(plan_file)
    first = run_night(plan, {"local": LocalRebuildTarget("local")}, clock=lambda: datetime(2026, 12, 1, tzinfo=UTC))
    assert first.exit_code == 0, (first.night_dir / "tiny-embeddings@local" / "rebuild.log").read_text()[-3000:]
    cell = first.night_dir / "tiny-embeddings@local"
    assert {"build.json", "report.json", "report.html", "rebuild.log", "outcome.json"} <= {
        p.name for p in cell.iterdir()
    }

    app = tiny_example / "app" / "embed.py"
    source = app.read_text()
    original = "embeddings.numpy().astype(np.float32)"
    assert original in source
    changed = "(embeddings.numpy() * (1 + 0.1 * (np.arange(embeddings.shape[1]) % 2))).astype(np.float32)"
    app.write_text(source.replace(original, changed))

    environment = {
        **os.environ,
        "ORCH_NIGHTLY_TARGET_FACTORY": "tests.nightly_local_target:local_target",
        "PYTHONPATH": str(REPO),
    }
    run = subprocess.run(
        [sys.executable, "-m", "orchestrator", "nightly", "run", str(plan_file)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=900,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr[-3000:]
    assert "1 of 1 cells did not pass (tiny-embeddings@local)" in run.stderr
    nights = sorted(p.name for p in (tmp_path / "plan" / "history" / "nights").iterdir())
    assert nights[0] == "2026-12-01" and len(nights) == 2, nights
    second = tmp_path / "plan" / "history" / "nights" / nights[1]
    assert os.readlink(tmp_path / "plan" / "history" / "latest") == f"nights/{nights[1]}"
    assert (first.night_dir / "summary.html").is_file() and (second / "summary.html").is_file()

    summary = json.loads((second / "summary.json").read_text())
    (cell_summary,) = summary["cells"]
    assert cell_summary["status"] == "failed" and cell_summary["first_failing"] == "sample"
    drift = cell_summary["drift"]
    assert drift["previous_night"] == "2026-12-01" and drift["status_change"] == "newly failing"
    texts = [change["text"] for change in drift["changes"]]
    assert any(t.startswith("embeddings: cosine vs reference") and "(now FAILS)" in t for t in texts), texts
    assert not any(change["kind"] == "package" for change in drift["changes"]), "the lock did not change"
    assert len(cell_summary["trend"]) == 2
    markdown = (second / "summary.md").read_text()
    assert "newly failing" in markdown and "now FAILS" in markdown
    root = ET.parse(second / "junit.xml").getroot()
    assert root.get("failures") == "1" and root.find("testsuite/testcase[@name='sample']/failure") is not None
