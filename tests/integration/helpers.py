"""Helpers shared by the integration tests: run the CLI as a user would, count the engine's containers."""

from __future__ import annotations

import os
import subprocess
import sys

import docker


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


def all_containers() -> set[str]:
    """Every container the engine has, running or not, labelled by orch or not (build steps are not)."""
    client = docker.from_env()
    try:
        return {str(c.id) for c in client.containers.list(all=True)}
    finally:
        client.close()
