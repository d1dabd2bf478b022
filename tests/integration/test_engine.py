"""The engine adapter and `orch base` against the real engine: reuse, failures, unreachable daemons."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.engine import BuildRequest, Engine, connect
from orchestrator.engine.build_log import build_failure
from orchestrator.errors import EngineUnavailable
from orchestrator.stages.base_image import LABEL, BaseOutcome, BaseRecipe, ensure_base_image
from orchestrator.stages.build_context import context_tar
from tests.integration.helpers import SESSION_FILTER, SESSION_ID


def test_base_image_is_labelled_and_reused(engine: Engine, base_image: BaseOutcome) -> None:
    image = engine.image(base_image.ref)
    assert image is not None
    assert image.labels[f"{LABEL}.suite"] == "bookworm"
    assert image.labels[f"{LABEL}.python"] == "3.11"
    assert image.labels[f"{LABEL}.recipe"] == BaseRecipe().fingerprint()
    again = ensure_base_image(engine, BaseRecipe())
    assert again.reused and again.image_id == image.id


def test_orch_base_cli_reuses_the_tag(base_image: BaseOutcome) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "base"], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "reused orch/debian-python:bookworm" in result.stdout


def test_unreachable_daemon_is_exit_3_with_what_was_tried(tmp_path: Path) -> None:
    socket = f"unix://{tmp_path}/no-such-docker.sock"
    with pytest.raises(EngineUnavailable, match=r"no-such-docker\.sock"):
        connect(socket)
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "base"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"DOCKER_HOST": socket, "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 3
    assert "error[engine-unreachable]" in result.stderr and "no-such-docker.sock" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_failing_build_names_the_step_and_first_error(
    engine: Engine, base_image: BaseOutcome, tmp_path: Path
) -> None:
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_image.ref}\nLABEL {SESSION_FILTER}\n"  # its layers are this session's (helpers.py)
        "RUN echo preparing\nRUN python3 -c 'import no_such_module'\nRUN echo never\n"
    )
    tar = context_tar(tmp_path)
    with tar.file:
        outcome = engine.build(BuildRequest(tar.file, f"orch-test-{SESSION_ID}/failing:latest", network="none"))
    assert outcome.image_id is None and outcome.error is not None, "the engine's own words come back"
    failure = build_failure(outcome.log, outcome.error)
    assert failure.step == "RUN python3 -c 'import no_such_module'"
    assert "ModuleNotFoundError" in failure.first_error
    assert "Step 5/5" not in outcome.log, "the build stops at the failing step"


def test_docker_contexts_are_respected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With DOCKER_HOST unset, the Docker CLI's current context decides which engine orch talks to."""
    from docker.context import ContextAPI

    config = tmp_path / "docker-config"
    config.mkdir()
    (config / "config.json").write_text("{}")
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    ContextAPI.create_context("orch-nowhere", host=f"unix://{tmp_path}/nowhere.sock")
    ContextAPI.create_context("orch-local", host="unix:///var/run/docker.sock")
    env = {"DOCKER_CONFIG": str(config), "DOCKER_HOST": ""}
    for name, code in (("orch-nowhere", 3), ("orch-local", 0)):
        ContextAPI.set_current_context(name)
        result = subprocess.run(
            [sys.executable, "-m", "orchestrator", "doctor", "--json"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            env={k: v for k, v in {**os.environ, **env}.items() if v},
        )
        assert result.returncode == code, (name, result.stderr)
        if code == 3:
            assert "nowhere.sock" in result.stderr
