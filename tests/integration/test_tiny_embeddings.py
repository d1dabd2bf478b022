"""The foundation end to end: render the CPU example, build it on an `orch base` image with the build's
network off, run the sample inside, and find the reference outputs reproduced."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from orchestrator.dossier.load import file_sha256, load_dossier
from orchestrator.engine import BuildRequest, Engine, Mount, RunSpec
from orchestrator.engine.build_log import build_failure
from orchestrator.plan.build import RUNTIME_UID, make_plan, with_stage_labels
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build_context import context_tar
from orchestrator.stages.context import write_context
from tests.integration.helpers import SESSION_ID
from tests.paths import EXAMPLES

TINY = EXAMPLES / "tiny-embeddings"
TAG = f"orch-test-{SESSION_ID}/tiny-embeddings:integration"


@pytest.fixture(scope="module")
def built_image(engine: Engine, base_image: BaseOutcome, tmp_path_factory: pytest.TempPathFactory) -> str:
    loaded = load_dossier(TINY / "dossier.yaml")
    plan = with_stage_labels(make_plan(loaded), engine.settings.labels)  # the session's label on every layer
    context = write_context(loaded, plan, tmp_path_factory.mktemp("ctx") / "context")
    assert {path.name for path in context.directory.iterdir()} >= {"Dockerfile", "requirements.lock", "app", "wheels"}
    # One wheel per lock line, plus uv's own when uv installs (it is unpacked in the builder, never installed).
    assert plan.uv is not None, "tiny-embeddings installs with the default installer, uv"
    assert len(context.wheels) == len(loaded.lock.requirements) + 1
    assert plan.uv.file_name in {wheel.file_name for wheel in context.wheels}
    # network=False: the wheelhouse build must not need the network at all.
    tar = context_tar(context.directory)
    with tar.file:
        outcome = engine.build(BuildRequest(tar.file, TAG, network="none"))
    assert outcome.image_id is not None, f"build failed: {build_failure(outcome.log, outcome.error)}"
    return outcome.image_id


def test_image_carries_identity_labels_and_runs_unprivileged(engine: Engine, built_image: str) -> None:
    image = engine.image(TAG)
    assert image is not None and image.id == built_image
    loaded = load_dossier(TINY / "dossier.yaml")
    assert image.labels["io.orch.dossier.identity"] == loaded.identity
    assert image.labels["io.orch.torch.version"] == "2.13.0+cpu"
    result = engine.run(
        RunSpec(
            image=TAG,
            command=["python", "-c", "import os, torch; print(os.getuid(), torch.__version__)"],
            timeout_s=120,
        )
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == [str(RUNTIME_UID), "2.13.0+cpu"]


def test_wheels_never_reach_the_final_image(engine: Engine, built_image: str) -> None:
    result = engine.run(
        RunSpec(image=TAG, command=["sh", "-c", "ls /tmp/orch 2>&1; ls /opt/venv/bin/python"], timeout_s=60)
    )
    assert "No such file or directory" in result.stdout
    assert "/opt/venv/bin/python" in result.stdout


def test_sample_runs_inside_and_reproduces_the_reference(
    engine: Engine, built_image: str, tmp_path: Path, no_leftover_containers: None
) -> None:
    loaded = load_dossier(TINY / "dossier.yaml")
    outputs = []
    for run in ("first", "second"):
        output = tmp_path / run
        output.mkdir()
        os.chown(output, RUNTIME_UID, RUNTIME_UID)
        result = engine.run(
            RunSpec(
                image=TAG,
                command=loaded.model.expect.command,
                mounts=[
                    Mount(TINY / "sample", "/orch/input/sample", read_only=True),
                    Mount(output, "/orch/output", read_only=False),
                ],
                timeout_s=loaded.model.expect.timeout_s,
            )
        )
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout.strip().splitlines()[-1]) == {"embedded": 12, "dim": 16, "torch": "2.13.0+cpu"}
        assert json.loads((output / "ids.json").read_text()) == json.loads((TINY / "sample" / "ids.json").read_text())
        outputs.append(output / "embeddings.npy")
    # Same image, same host, fixed seed, deterministic algorithms: the two runs give the same bytes.
    assert file_sha256(outputs[0]) == file_sha256(outputs[1])
    # Against the reference, made on another machine, only the dossier's own criterion holds: the same
    # packages do not promise the same bits on another CPU (avx2 vs avx512/amx kernels).
    observed, reference = np.load(outputs[0]), np.load(TINY / "reference" / "embeddings.npy")
    assert observed.shape == reference.shape and observed.dtype == reference.dtype
    cosine = (observed * reference).sum(axis=1) / (np.linalg.norm(observed, axis=1) * np.linalg.norm(reference, axis=1))
    criterion = loaded.model.expect.outputs[0].compare
    assert criterion is not None and criterion.metric == "cosine" and criterion.min is not None
    assert float(cosine.min()) >= criterion.min


def test_a_hanging_command_is_stopped_at_its_timeout(
    engine: Engine, built_image: str, no_leftover_containers: None
) -> None:
    result = engine.run(RunSpec(image=TAG, command=["sleep", "60"], timeout_s=2))
    assert result.timed_out and result.exit_code is None
    assert result.duration_s < 30


def test_containers_have_no_network_by_default(engine: Engine, built_image: str) -> None:
    result = engine.run(
        RunSpec(image=TAG, command=["python", "-c", "import socket; print(socket.if_nameindex())"], timeout_s=60)
    )
    assert result.exit_code == 0
    assert "eth0" not in result.stdout and "lo" in result.stdout
