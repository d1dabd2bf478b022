"""`orch rebuild` and `orch probe` check before any pull, build or container (issue 24): a dossier whose GPU
stages cannot pass on this host, or whose files no longer match their fingerprints, stops in seconds with
the reason and what to do. This CI machine has no GPU and a real engine, so the CUDA case is the real one."""

from __future__ import annotations

import time
from pathlib import Path

import docker

from orchestrator.engine import Engine
from tests.integration.helpers import orch, session_containers
from tests.paths import EXAMPLES


def test_a_cuda_dossier_on_this_cpu_host_stops_within_five_seconds_naming_the_host_verdict(
    engine: Engine, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    images_before = {image.id for image in docker_client.images.list(all=True)}
    containers_before = session_containers()
    out = tmp_path / "out"
    started = time.monotonic()
    result = orch("rebuild", str(EXAMPLES / "tiny-embeddings" / "dossier-cuda.yaml"), "--out", str(out))
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert elapsed <= 5, f"took {elapsed:.1f} s"
    assert "error[host-cannot-run]" in result.stderr and "(no-driver)" in result.stderr
    assert "nothing was built or started" in result.stderr
    assert "--variant cpu" in result.stderr and "--no-preflight" in result.stderr and "orch build" in result.stderr
    assert not out.exists(), "no output folder: nothing ran"
    assert session_containers() == containers_before
    assert {image.id for image in docker_client.images.list(all=True)} == images_before, "nothing was pulled or built"


def test_a_changed_input_stops_a_rebuild_before_the_build_with_the_next_step(
    tiny_example: Path, tmp_path: Path
) -> None:
    sample = tiny_example / "sample" / "sample.jsonl"
    sample.write_text(sample.read_text() + "\n")
    out = tmp_path / "out"
    started = time.monotonic()
    result = orch("rebuild", str(tiny_example / "dossier.yaml"), "--out", str(out))
    assert time.monotonic() - started <= 5
    assert result.returncode == 2, result.stderr
    assert "[expect.inputs[0].sha256]" in result.stderr and "sample/sample.jsonl" in result.stderr
    assert "If the file changed on purpose, write the new sha256" in result.stderr
    assert not out.exists()
