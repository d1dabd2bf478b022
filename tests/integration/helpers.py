"""Helpers shared by the integration tests: run the CLI as a user would, find this session's objects.

The engine is shared (other users, other test runs, a nightly matrix): the suite touches only what it
made. Every image layer and container it creates carries the session label below, through orch's own
`ORCH_LABELS` (set by the `engine` fixture before anything connects, and inherited by every `orch`
subprocess); cleanup and leak checks filter on it and never prune.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import docker

from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.engine import Engine
from orchestrator.report.write import write_report
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.execute import run_build, run_probe
from orchestrator.stages.probe import ProbeOptions
from tests.paths import EXAMPLES

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


def rebuilt_private_copy(engine: Engine, root: Path, marker: str) -> tuple[LoadedDossier, Path]:
    """A private copy of tiny-embeddings (its own identity, from `marker`, so its image can be removed), built
    and probed into `root/rebuild` (cached layers: only its label layer is new)."""
    example = root / "tiny-embeddings"
    shutil.copytree(EXAMPLES / "tiny-embeddings", example)
    dossier = example / "dossier.yaml"
    dossier.write_text(dossier.read_text().replace("on the CPU.", f"on the CPU ({marker} {SESSION_ID})."))
    loaded = load_dossier(dossier)
    out = root / "rebuild"
    record = run_build(loaded, engine, BuildOptions(out=out))
    assert record.image is not None, record.failure
    report = run_probe(loaded, engine, ProbeOptions(out=out, image=record.image.tag))
    write_report(report, out)
    assert report.verdict == "passed", {n: s.first_error for n, s in report.stages.items()}
    return loaded, out
