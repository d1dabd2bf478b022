"""`--dry-run` prints the whole plan and exits 0 without an engine (DOCKER_HOST points at nothing)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import EXAMPLES

NO_ENGINE = {
    **{k: v for k, v in os.environ.items() if k != "ORCH_TAG_NAMESPACE"},
    "DOCKER_HOST": "unix:///nonexistent",
    "ORCH_LABELS": "io.orch.test-session=dry",
}


def _orch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        env={**NO_ENGINE, **(env or {})},
        check=False,
    )


@pytest.mark.parametrize("command", ["build", "probe", "rebuild"])
def test_dry_run_needs_no_engine(command: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _orch(command, str(EXAMPLES / "tiny-embeddings" / "dossier.yaml"), "--out", str(out), "--dry-run")
    assert result.returncode == 0, result.stderr
    # At least one container is planned: the inventory probe (build) or the device probe (probe, rebuild).
    assert re.search(r"\[engine\] (inventory|device): run the", result.stdout), result.stdout
    assert "label: io.orch.test-session=dry" in result.stdout, "ORCH_LABELS reach every planned container"
    assert not out.exists(), "a dry run writes nothing"


def test_the_same_command_without_dry_run_needs_the_engine(tmp_path: Path) -> None:
    """The control: without --dry-run, this environment has no engine (exit 3)."""
    result = _orch("build", str(EXAMPLES / "tiny-embeddings" / "dossier.yaml"), "--out", str(tmp_path / "o"))
    assert result.returncode == 3, result.stderr
    assert "nonexistent" in result.stderr


def test_rebuild_dry_run_names_the_built_image_as_a_placeholder(tmp_path: Path) -> None:
    result = _orch("rebuild", str(EXAMPLES / "tiny-embeddings" / "dossier.yaml"), "--out", str(tmp_path), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "\n4. [engine] build: build image orch/tiny-embeddings:" in result.stdout
    assert "image: <image built by step build>" in result.stdout
    assert "command: python -I -c <probes/device.py>" in result.stdout


@pytest.mark.parametrize("command", ["build", "probe"])
def test_the_tag_namespace_names_the_default_tag(command: str, tmp_path: Path) -> None:
    """Two users of one engine rebuilding one dossier: each gets the tag of their own namespace."""
    dossier = str(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    plain = _orch(command, dossier, "--out", str(tmp_path / "a"), "--dry-run")
    bob = _orch(command, dossier, "--out", str(tmp_path / "b"), "--dry-run", env={"ORCH_TAG_NAMESPACE": "orch-bob"})
    assert plain.returncode == 0 and bob.returncode == 0, plain.stderr + bob.stderr
    assert "orch/tiny-embeddings:" in plain.stdout and "orch-bob/" not in plain.stdout
    assert "orch-bob/tiny-embeddings:" in bob.stdout and "orch/tiny-embeddings:" not in bob.stdout


def test_a_bad_tag_namespace_is_bad_input(tmp_path: Path) -> None:
    result = _orch(
        "build",
        str(EXAMPLES / "tiny-embeddings" / "dossier.yaml"),
        "--out",
        str(tmp_path / "o"),
        "--dry-run",
        env={"ORCH_TAG_NAMESPACE": "Not A Namespace"},
    )
    assert result.returncode == 2, result.stderr
    assert "ORCH_TAG_NAMESPACE" in result.stderr and "Traceback" not in result.stderr
