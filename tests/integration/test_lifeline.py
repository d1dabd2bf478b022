"""`kill -9` of `orch build` leaves no file server running (issue 25, point 6), on the real engine.

The wheel feed (classic builder) and BuildKit's context server are created with an open stdin that the engine
closes when orch's attachment goes (probes/serve_files.py exits on its end of file), so a killed orch's server
stops by itself; the next `serve` of the same user on the same host removes it, and never another user's.
Each case kills a cold build of tiny while its server is up and watches every container that carries the
build's own label (the server and, for the classic builder, its step container).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container

from orchestrator.engine.docker_containers import OWNER_LABEL, ROLE_LABEL, owner, sweep_stopped_services
from orchestrator.model.build_record import BuildRecord
from orchestrator.stages.base_image import BaseOutcome
from tests.integration.helpers import SESSION_FILTER, SESSION_ID, SESSION_KEY, SESSION_TAG_NAMESPACE
from tests.paths import EXAMPLES

#: Issue 25: "no container of that build is running 2 minutes later".
GRACE_S = 120


def _running(client: docker.DockerClient, label: str) -> list[str]:
    return [str(c.id) for c in client.containers.list(filters={"label": label})]


@pytest.mark.parametrize(("builder", "role"), [("buildkit", "context-server"), ("classic", "wheel-feed")])
def test_a_build_killed_while_its_server_is_up_leaves_nothing_running(
    builder: str,
    role: str,
    docker_client: docker.DockerClient,
    base_image: BaseOutcome,
    _warm_tiny_layers: BuildRecord,
    tmp_path: Path,
) -> None:
    example = tmp_path / "tiny-embeddings"
    shutil.copytree(EXAMPLES / "tiny-embeddings", example)
    mark = f"lifeline-test={uuid.uuid4().hex}"
    env = {**os.environ, "ORCH_LABELS": f"{SESSION_FILTER},{mark}"}
    command = [sys.executable, "-m", "orchestrator", "build", str(example / "dossier.yaml"), "--out", str(tmp_path)]
    command += ["--builder", builder, "--no-cache", "--tag", f"{SESSION_TAG_NAMESPACE}/lifeline-{builder}:1"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        server: list[Container] = []
        while not server:
            assert process.poll() is None, f"the build ended (exit {process.returncode}) before its {role} was seen"
            assert time.monotonic() < deadline, f"no {role} within 300 s"
            server = docker_client.containers.list(filters={"label": [mark, f"{ROLE_LABEL}={role}"]})
            time.sleep(0.1)
        assert server[0].labels[OWNER_LABEL] == owner()
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        killed = time.monotonic()
        while _running(docker_client, mark):
            assert time.monotonic() - killed < GRACE_S, (
                f"still running {GRACE_S}s after kill -9: {_running(docker_client, mark)}"
            )
            time.sleep(0.5)
        stopped_after = time.monotonic() - killed
    finally:
        if process.poll() is None:
            process.kill()
    assert stopped_after < 30, (
        f"the {role} took {stopped_after:.0f}s to stop after kill -9 (its lifeline closes at once)"
    )
    # The next serve (any orch build of this user on this host) removes the stopped server.
    assert server[0].id in sweep_stopped_services(docker_client)
    assert docker_client.containers.list(all=True, filters={"label": [mark, f"{ROLE_LABEL}={role}"]}) == []


def test_the_sweep_leaves_another_users_stopped_server_and_any_running_one(
    docker_client: docker.DockerClient, base_image: BaseOutcome
) -> None:
    labels = {SESSION_KEY: SESSION_ID, "io.orch.managed": "true", ROLE_LABEL: "wheel-feed"}
    others = docker_client.containers.create(
        base_image.image_id, ["true"], labels={**labels, OWNER_LABEL: "4242@elsewhere"}
    )
    mine_running = docker_client.containers.create(
        base_image.image_id, ["sleep", "60"], labels={**labels, OWNER_LABEL: owner()}
    )
    try:
        others.start()
        others.wait(timeout=30)
        mine_running.start()
        swept = sweep_stopped_services(docker_client)
        assert others.id not in swept and mine_running.id not in swept
        others.reload()
        mine_running.reload()
        assert others.status == "exited" and mine_running.status == "running"
    finally:
        for container in (others, mine_running):
            container.remove(force=True)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_probe_stopped_by_kill_or_ctrl_c_removes_every_container_it_started(
    signum: signal.Signals,
    docker_client: docker.DockerClient,
    _warm_tiny_layers: BuildRecord,
    tmp_path: Path,
) -> None:
    """`kill PID` (SIGTERM) ends orch like Ctrl-C: its `finally` blocks remove the probe's containers (exit 130)."""
    assert _warm_tiny_layers.image is not None
    mark = f"terminate-test={uuid.uuid4().hex}"
    env = {**os.environ, "ORCH_LABELS": f"{SESSION_FILTER},{mark}"}
    command = [sys.executable, "-m", "orchestrator", "probe", str(EXAMPLES / "tiny-embeddings" / "dossier.yaml")]
    command += ["--image", _warm_tiny_layers.image.id, "--out", str(tmp_path / "out"), "--no-preflight"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not _running(docker_client, mark):
            assert process.poll() is None, f"the probe ended (exit {process.returncode}) before a container ran"
            assert time.monotonic() < deadline, "no probe container within 300 s"
            time.sleep(0.05)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "Interrupted; orch removed the containers it had started." in stderr
    assert docker_client.containers.list(all=True, filters={"label": mark}) == [], "no container left, running or not"
