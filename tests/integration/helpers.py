"""Helpers shared by the integration tests: run the CLI as a user would, find this session's objects.

The engine is shared (other users, other test runs, a nightly matrix): the suite touches only what it
made. Every image layer and container it creates carries the session label below, through orch's own
`ORCH_LABELS` (set by the `engine` fixture before anything connects, and inherited by every `orch`
subprocess); cleanup and leak checks filter on it and never prune.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import docker

SESSION_KEY = "io.orch.test-session"
SESSION_ID = uuid.uuid4().hex[:16]
SESSION_FILTER = f"{SESSION_KEY}={SESSION_ID}"
#: The session's own tag namespace (`ORCH_TAG_NAMESPACE`): the default tag of a dossier another user also
#: builds on this engine (`orch/<name>:<identity>`) is never re-pointed or removed by the suite.
SESSION_TAG_NAMESPACE = f"orch-test-{SESSION_ID}"


def orch(*args: str, env: dict[str, str] | None = None, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    """`python -m orchestrator ARGS` in a subprocess, with extra environment variables."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def session_containers() -> set[str]:
    """This session's containers, running or not: orch's probes and the steps of its builds.

    Build steps carry the label too: a container inherits its image's labels, and every layer of a
    build opens with the session label. Other people's containers on the engine are never counted.
    """
    client = docker.from_env()
    try:
        return {str(c.id) for c in client.containers.list(all=True, filters={"label": SESSION_FILTER})}
    finally:
        client.close()
