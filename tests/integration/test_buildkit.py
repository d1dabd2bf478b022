"""BuildKit builds through the engine API, on the real engine: one environment with the classic builder, the
first error of a failed step, the context server gone afterwards, no wheel and no install script in any layer,
the wheels mounted from the wheels image, a forged wheels image stopped by the install step, and `orch
render`'s context built by plain `docker build` (BuildKit) to the same environment.

Cost: one classic cold build of tiny-embeddings (about a minute) and one small failing BuildKit build; the
BuildKit side is the session's warm tiny-embeddings build (`_warm_tiny_layers`, the engine's default builder).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import docker
import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import BuildRequest, Engine
from orchestrator.engine.build_log import build_failure
from orchestrator.engine.docker_engine import DockerEngine
from orchestrator.model.build_record import BuildRecord
from orchestrator.plan.builder import CONTEXT_SERVER_ROOT, context_server_spec
from orchestrator.plan.wheels_image import DOCKERFILE, WHEELS_DIGEST_LABEL, wheels_digest
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.build_context import served_context_tar
from orchestrator.stages.execute import run_build
from orchestrator.stages.inventory import probe_inventory
from tests.integration.helpers import SESSION_FILTER, SESSION_TAG_NAMESPACE, orch, session_containers
from tests.paths import EXAMPLES


@pytest.fixture(scope="module")
def classic(engine: Engine, tmp_path_factory: pytest.TempPathFactory, _warm_tiny_layers: BuildRecord) -> BuildRecord:
    out = tmp_path_factory.mktemp("classic") / "out"
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    options = BuildOptions(out=out, no_cache=True, tag=f"{SESSION_TAG_NAMESPACE}/classic:1", builder="classic")
    record = run_build(loaded, engine, options)
    assert record.status == "passed", record.failure
    return record


def test_the_engine_offers_buildkit_and_the_default_build_used_it(
    engine: Engine, _warm_tiny_layers: BuildRecord, warm_tiny_out: Path
) -> None:
    assert engine.info().builders[0] == "buildkit", "a Linux Docker engine with API >= 1.39 offers BuildKit"
    assert _warm_tiny_layers.context.builder == "buildkit" and _warm_tiny_layers.context.network == "none"
    dockerfile = (warm_tiny_out / "context" / "Dockerfile").read_text()
    assert "RUN --mount=type=bind,source=orch,target=/tmp/orch/bin" in dockerfile
    assert "sh /tmp/orch/bin/install-venv.sh python3.11 uv-" in dockerfile


def test_a_classic_and_a_buildkit_build_give_one_environment_digest(
    classic: BuildRecord, _warm_tiny_layers: BuildRecord
) -> None:
    warm = _warm_tiny_layers
    assert classic.context.builder == "classic" and classic.context.network == "wheel-feed"
    assert classic.image is not None and warm.image is not None and classic.image.id != warm.image.id
    assert classic.inventory is not None and warm.inventory is not None
    ours, theirs = classic.inventory.environment, warm.inventory.environment
    assert ours is not None and theirs is not None
    assert ours.files == theirs.files and ours.files > 20_000
    assert ours.digest == theirs.digest, "the classic feed build and the BuildKit build installed other bytes"


def test_no_wheel_lock_or_install_script_reaches_a_buildkit_layer(
    docker_client: docker.DockerClient, _warm_tiny_layers: BuildRecord
) -> None:
    assert _warm_tiny_layers.image is not None
    # BuildKit leaves the mount points (/tmp/orch/bin, wheels, work) as empty folders: no file in them.
    script = "find /tmp /opt -name '*.whl' -o -name requirements.lock -o -name install-venv.sh; find /tmp/orch -type f"
    listed = docker_client.containers.run(
        _warm_tiny_layers.image.id,
        ["sh", "-c", script],
        network_mode="none",
        labels={SESSION_FILTER.split("=")[0]: SESSION_FILTER.split("=")[1]},
        remove=True,
    )
    assert listed.decode().split() == [], "a file of the install step is in the image"


def test_a_failed_buildkit_step_names_itself_and_its_first_error_and_the_server_goes(
    engine: Engine, base_image: BaseOutcome, tmp_path: Path
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {base_image.ref}\n"
        "RUN echo installing && echo 'ERROR: No matching distribution found for torch==9.9' >&2 && exit 3\n"
    )
    before = session_containers()
    spec = context_server_spec("3.11", base_image.image_id)
    member = f"{CONTEXT_SERVER_ROOT}/0123456789abcdef/context.tar"
    lines: list[str] = []
    with served_context_tar(context, member) as served, engine.serve(spec, served) as server:
        assert server.url is not None and server.url.startswith("http://")
        outcome = engine.build(
            BuildRequest(
                context=None,
                tag=f"{SESSION_TAG_NAMESPACE}/failing:1",
                network="none",
                no_cache=True,
                on_line=lines.append,
                builder="buildkit",
                remote=server.url + member.partition("/")[2],
            )
        )
    assert outcome.image_id is None and outcome.error is not None and "exit code: 3" in outcome.error
    failure = build_failure(outcome.log, outcome.error)
    assert failure.step is not None and failure.step.startswith("RUN echo installing")
    assert failure.first_error == "ERROR: No matching distribution found for torch==9.9"
    assert "installing" in lines, "the step's output came live, line by line"
    assert session_containers() == before, "the context server is removed with the build"


def test_the_wheels_came_from_the_wheels_image_which_holds_exactly_the_collected_wheels(
    docker_client: docker.DockerClient, _warm_tiny_layers: BuildRecord, warm_tiny_out: Path
) -> None:
    warm = _warm_tiny_layers
    assert warm.context.wheels_image is not None
    tag, _, image_id = warm.context.wheels_image.partition("@")
    assert tag.startswith(f"{SESSION_TAG_NAMESPACE}/wheels:")
    image = docker_client.images.get(tag)
    assert image.id == image_id
    assert image.labels[WHEELS_DIGEST_LABEL] == wheels_digest((w.file, w.sha256) for w in warm.context.wheels)
    assert image.labels["io.orch.role"] == "wheels" and SESSION_FILTER.partition("=")[2] in image.labels.values()
    # One layer, FROM scratch: the wheels under /wheels, nothing else (the export's tar, read by name only).
    names = _layer_names(docker_client, tag)
    assert names == {"wheels", *(f"wheels/{w.file}" for w in warm.context.wheels)}
    dockerfile = (warm_tiny_out / "context" / "Dockerfile").read_text()
    assert f"--mount=type=bind,from={tag},source=/wheels,target=/tmp/orch/wheels" in dockerfile


def _layer_names(client: docker.DockerClient, tag: str) -> set[str]:
    """The paths in the image's layers (`docker save`, streamed; each layer tar read for its names)."""
    with tempfile.TemporaryFile() as saved:
        for chunk in client.images.get(tag).save(named=False):
            saved.write(chunk)
        saved.seek(0)
        names: set[str] = set()
        with tarfile.open(fileobj=saved) as outer:
            for member in outer.getmembers():
                if member.name.endswith("layer.tar") and (layer := outer.extractfile(member)) is not None:
                    with tarfile.open(fileobj=layer) as inner:
                        names |= {name.rstrip("/") for name in inner.getnames()}
        return names


def test_a_forged_wheels_image_fails_the_install_step_by_name_and_makes_no_image(
    engine: Engine, docker_client: docker.DockerClient, _warm_tiny_layers: BuildRecord, tmp_path: Path
) -> None:
    """Another image under the wheels tag, with the very digest label orch looks for (whoever may tag images on
    a shared engine can make one): orch takes it (a tag is only a name), and the install step refuses its uv
    wheel before running anything of it. A namespace of its own, so the session's wheels image stays."""
    warm = _warm_tiny_layers
    assert warm.context.wheels_image is not None
    key = warm.context.wheels_image.partition("@")[0].rpartition(":")[2]
    namespace = f"{SESSION_TAG_NAMESPACE}-forged"
    forged = tmp_path / "forged"
    (forged / "wheels").mkdir(parents=True)
    for wheel in warm.context.wheels:
        (forged / "wheels" / wheel.file).write_bytes(b"not the pinned wheel\n")
    (forged / "Dockerfile").write_text(DOCKERFILE)
    session_key, _, session_value = SESSION_FILTER.partition("=")
    labels = {
        session_key: session_value,
        WHEELS_DIGEST_LABEL: wheels_digest((w.file, w.sha256) for w in warm.context.wheels),
    }
    docker_client.images.build(path=str(forged), tag=f"{namespace}/wheels:{key}", labels=labels, rm=True)

    other = DockerEngine(docker.from_env(), "the forged namespace", engine.settings.labels, namespace)
    try:
        loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
        record = run_build(loaded, other, BuildOptions(out=tmp_path / "out", no_cache=True))
        built = other.image(f"{namespace}/tiny-embeddings:{loaded.short_identity}")
    finally:
        other.close()
    executed = json.loads((tmp_path / "out" / "steps.json").read_text())["executed"]
    assert {step["name"]: step["status"] for step in executed}["wheels"] == "reused"
    assert record.status == "failed" and record.failure is not None and record.image is None
    assert record.failure.step is not None and record.failure.step.startswith("RUN --mount=type=bind,source=orch")
    uv = next(w for w in warm.context.wheels if w.file.startswith("uv-"))
    assert record.failure.first_error.startswith(f"error: sha256 differs for /tmp/orch/wheels/{uv.file} (expected")
    assert built is None


def test_plain_docker_build_of_orch_render_installs_the_environment_orch_build_installs(
    engine: Engine, _warm_tiny_layers: BuildRecord, tmp_path: Path
) -> None:
    """Issue 23, point 2: `orch render` writes BuildKit's one stage, readable (the install step is a named
    script in the context, no line of inline code), self-contained (the wheels mounted from the context,
    not from orch's wheels image); plain `DOCKER_BUILDKIT=1 docker build` of it, offline, installs the
    environment of the session's `orch build` of the same dossier (one environment digest)."""
    # Debian's 20.10 client builds with BuildKit without buildx (a newer client on PATH may lack buildx).
    docker_cli = "/usr/bin/docker" if Path("/usr/bin/docker").is_file() else shutil.which("docker")
    assert docker_cli is not None, "no docker client (Debian's docker.io installs /usr/bin/docker)"
    rendered = tmp_path / "rendered"
    result = orch("render", str(EXAMPLES / "tiny-embeddings" / "dossier.yaml"), "--out", str(rendered))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    dockerfile = (rendered / "Dockerfile").read_text()
    assert "--mount=type=bind,source=wheels,target=/tmp/orch/wheels" in dockerfile
    assert "from=" not in dockerfile and "python3.11 -c" not in dockerfile
    assert max(len(line) for line in dockerfile.splitlines()) < 200
    assert (rendered / "orch" / "install-venv.sh").is_file()
    tag = f"{SESSION_TAG_NAMESPACE}/rendered:plain"
    command = [docker_cli, "build", "--quiet", "--network", "none", "--label", SESSION_FILTER, "--tag", tag]
    built = subprocess.run(
        [*command, str(rendered)],
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        capture_output=True,
        text=True,
        check=False,
        timeout=1200,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    outcome = probe_inventory(engine, tag)
    assert outcome.error is None and outcome.inventory is not None, outcome.error
    warm = _warm_tiny_layers.inventory
    assert warm is not None and warm.environment is not None and outcome.inventory.environment is not None
    assert outcome.inventory.environment.digest == warm.environment.digest
    assert outcome.inventory.environment.files == warm.environment.files > 1000
