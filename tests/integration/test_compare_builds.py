"""`orch compare` on two real builds: a rebuild with one package changed names exactly that package."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import Engine
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.execute import run_build


def test_one_changed_package_is_named_exactly(
    engine: Engine, base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    reference = run_build(load_dossier(tiny_example / "dossier.yaml"), engine, BuildOptions(out=tmp_path / "a"))
    assert reference.status == "passed", reference.failure

    # The rebuild pins typing-extensions 4.15.0 instead of 4.16.0 (torch accepts >= 4.10): fetch its hash.
    download = tmp_path / "download"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(download),
            "typing-extensions==4.15.0",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(download.glob("typing_extensions-4.15.0-*.whl"))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = tiny_example / "requirements-cpu.lock"
    lines = [line for line in lock.read_text().splitlines() if not line.startswith("typing-extensions==")]
    lock.write_text("\n".join([*lines, f"typing-extensions==4.15.0 --hash=sha256:{digest}"]) + "\n")
    # An intended change: the reference inventory is updated with it, as the inventory check's hint says.
    freeze = tiny_example / "reference" / "pip-freeze.txt"
    freeze.write_text(freeze.read_text().replace("typing_extensions==4.16.0", "typing_extensions==4.15.0"))
    rebuild = run_build(load_dossier(tiny_example / "dossier.yaml"), engine, BuildOptions(out=tmp_path / "b"))
    assert rebuild.status == "passed", rebuild.failure

    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    comparison = json.loads(result.stdout)
    packages = comparison["packages"]
    assert packages["added"] == [] and packages["removed"] == []
    assert [(c["name"], c["reference"], c["observed"]) for c in packages["changed"]] == [
        ("typing-extensions", "4.16.0", "4.15.0")
    ]
    assert "typing-extensions" in result.stderr
