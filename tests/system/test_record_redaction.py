"""`orch record` on a real venv whose inventory holds a `file:///home/…` direct URL and an index URL with a
token: both are printed redacted and written nowhere; the reruns' spread is measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

TOKEN = "tok-8c1f0a9e77"
HOME_URL = "file:///home/alice/src/mylib"


def test_record_redacts_a_local_direct_url_and_an_index_token(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # An index with a token in the venv's pip configuration, and a package installed from a home folder.
    (venv / "pip.conf").write_text(f"[global]\nextra-index-url = https://alice:{TOKEN}@pypi.example.com/simple\n")
    site = next((venv / "lib").glob("python3.*/site-packages"))
    dist = site / "mylib-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mylib\nVersion: 0.1\n")
    (dist / "RECORD").write_text("")
    (dist / "INSTALLER").write_text("pip\n")
    (dist / "REQUESTED").write_text("")
    (dist / "direct_url.json").write_text(json.dumps({"url": HOME_URL, "dir_info": {"editable": True}}))
    app = tmp_path / "app"
    app.mkdir()
    (app / "run.py").write_text(
        "import json, sys\njson.dump([1.0, 2.0, 3.0], open(sys.argv[1] + '/values.json', 'w'))\n"
    )
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    subprocess.run([str(python), "run.py", str(outputs)], cwd=app, check=True)
    out = tmp_path / "draft"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "record", "--python", str(python), "--code", str(app),
         "--outputs", str(outputs), "--command", f"python run.py {outputs}", "--out", str(out), "--repeat", "2"],
        capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    printed = done.stdout
    assert "credential: environment > pip_config" in printed and "https://****@pypi.example.com/simple" in printed
    assert (
        "local path: environment > pip > inspect > installed > mylib > direct_url > url: file://<local path>" in printed
    )
    assert TOKEN not in printed + done.stderr and "/home/alice" not in printed + done.stderr
    assert "mylib 0.1 was installed from a direct URL or a local folder" in printed
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", "replace")
            assert TOKEN not in text and "/home/alice" not in text and str(tmp_path) not in text, path
    redactions = json.loads((out / "record" / "redactions.json").read_text())
    assert {item["kind"] for item in redactions} == {"credential", "local path"}
    freeze = (out / "record" / "pip-freeze.txt").read_text()
    assert "-e <local path>" in freeze
    requirements = (out / "requirements.in").read_text()
    assert "mylib" not in requirements and "pip==" in requirements
    draft = yaml.safe_load((out / "dossier.yaml").read_text())
    assert draft["expect"]["command"] == ["python", "run.py", "/orch/output"]
    output = draft["expect"]["outputs"][0]
    assert (
        output["compare"]["metric"] == "exact"
        and "2 rerun(s) on the reference host gave identical bytes" in (output["compare"]["justification"])
    )
    validated = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", str(out / "dossier.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    # No lock yet: validate says so (orch lock is the next step).
    assert validated.returncode == 2 and "requirements.lock" in validated.stderr
