"""The nightly targets on real components: a second dockerd over TLS and a single-node Slurm cluster.

Both are started by `make nightly-services` (scripts/second-dockerd.sh, scripts/slurm.sh) before the suite,
as the engine is by `make engine`; without them these tests skip (fail under CI=true).

Cost. The second daemon belongs to the tests alone (no user's objects live on it), so its warm cell
builds under a stable label and tag namespace instead of the session's: tiny-embeddings is built there
once per machine (2-4.5 min on 2 cores) and reused by every later session. The Slurm job rebuilds on
the first daemon, warm from the session's own tiny-embeddings build (conftest `_warm_tiny_layers`). The
cold cell of the timeout test carries its own cell label and is swept by it; the other Slurm jobs sleep.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import docker.tls
import pytest

from orchestrator.engine import Engine
from orchestrator.engine.labels import ENV_VAR as LABELS_VAR
from orchestrator.engine.labels import TAG_NAMESPACE_VAR
from orchestrator.nightly.cell import CellOutcome, CellRequest
from orchestrator.nightly.target_specs import DockerTargetSpec, SlurmTargetSpec, TlsFiles
from orchestrator.nightly.targets import target_from_spec
from orchestrator.nightly.targets.docker_endpoint import CELL_LABEL, DockerTarget
from orchestrator.nightly.targets.slurm import SlurmTarget
from orchestrator.stages.base_image import BaseOutcome
from tests.integration.helpers import SESSION_ID, SESSION_TAG_NAMESPACE
from tests.integration.housekeeping import remove_containers, remove_images
from tests.paths import EXAMPLES, REPO

SECOND = REPO / "scripts" / "second-dockerd.sh"
SLURM = REPO / "scripts" / "slurm.sh"
TINY = EXAMPLES / "tiny-embeddings" / "dossier.yaml"
#: The second daemon's warm cache: the same label and namespace in every session (see the module's docstring).
WARM_LABELS = "io.orch.session=nightly-tests"
WARM_NAMESPACE = "orch-nightly-tests"


def _script_env(script: Path) -> dict[str, str]:
    """`script env` prints `export NAME=value` lines."""
    done = subprocess.run([str(script), "env"], capture_output=True, text=True, check=True)
    pairs = (line.removeprefix("export ").split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return {name: value for name, value in pairs}


def _first_daemon_env() -> dict[str, str]:
    """The scripts reach the first daemon (to copy the base image) as the docker CLI does by default."""
    return {name: value for name, value in os.environ.items() if not name.startswith("DOCKER_")}


def _missing(what: str) -> None:
    message = f"{what} does not answer; start it with `make nightly-services` (as root)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def second_daemon(engine: Engine, base_image: BaseOutcome) -> DockerTargetSpec:
    if subprocess.run([str(SECOND), "status"], capture_output=True, check=False).returncode != 0:
        _missing("the second Docker daemon")
    # Already running: `start` only loads the base image from the first daemon when it lacks it.
    subprocess.run([str(SECOND), "start"], capture_output=True, check=True, env=_first_daemon_env())
    client = Path(_script_env(SECOND)["DOCKER_CERT_PATH"])
    return DockerTargetSpec(
        name="second",
        docker_host=_script_env(SECOND)["DOCKER_HOST"],
        tls=TlsFiles(ca_cert=client / "ca.pem", client_cert=client / "cert.pem", client_key=client / "key.pem"),
    )


def _second_client() -> docker.DockerClient:
    """The suite's own look at the second daemon. A fixed API version (no version request at construction)
    and no environment for requests: REQUESTS_CA_BUNDLE would replace the daemon's CA (psf/requests#3829)."""
    env = _script_env(SECOND)
    certs = Path(env["DOCKER_CERT_PATH"])
    tls = docker.tls.TLSConfig(
        client_cert=(str(certs / "cert.pem"), str(certs / "key.pem")), ca_cert=str(certs / "ca.pem"), verify=True
    )
    client = docker.DockerClient(base_url=env["DOCKER_HOST"].replace("tcp://", "https://"), tls=tls, version="1.41")
    client.api.trust_env = False
    return client


def _warm_environ() -> dict[str, str]:
    return {**os.environ, LABELS_VAR: WARM_LABELS}


@pytest.fixture(scope="module")
def tls_cell(second_daemon: DockerTargetSpec, tmp_path_factory: pytest.TempPathFactory) -> CellOutcome:
    """tiny-embeddings rebuilt on the second daemon through its TLS endpoint (warm: see the docstring)."""
    target = DockerTarget(second_daemon, environ=_warm_environ())
    request = CellRequest(
        cell_id="tiny-embeddings@second",
        dossier=TINY,
        out=tmp_path_factory.mktemp("night") / "tiny-embeddings@second",
        cache="warm",
        timeout_s=900,
        tag_namespace=WARM_NAMESPACE,
    )
    return target.run_cell(request)


def test_a_cell_on_the_second_daemon_over_tls(tls_cell: CellOutcome, engine: Engine) -> None:
    assert tls_cell.status == "passed", tls_cell
    assert tls_cell.exit_code == 0 and tls_cell.first_error is None
    # The image is on the second daemon, not on the first: the rebuild went through the endpoint.
    client = _second_client()
    try:
        tagged = [tag for image in client.images.list(name=f"{WARM_NAMESPACE}/tiny-embeddings") for tag in image.tags]
    finally:
        client.close()
    assert tagged, "no tiny-embeddings image on the second daemon"
    assert engine.image(tagged[0]) is None


def test_a_stopped_daemon_is_an_environment_failure(tmp_path: Path, engine: Engine) -> None:
    """A daemon of its own (the shared second one stays up), started, then stopped; its cell says why, fast."""
    # Short: containerd's sockets live under it (a unix socket path has at most 107 bytes).
    folder = Path(tempfile.mkdtemp(prefix="orch-d9-", dir="/tmp"))
    own = {
        **_first_daemon_env(),
        "ORCH_DOCKERD2_DIR": str(folder),
        "ORCH_DOCKERD2_PORT": "23779",
        "ORCH_DOCKERD2_BRIDGE": "orch-br9",
        "ORCH_DOCKERD2_BRIDGE_CIDR": "172.28.9.1/24",
        "ORCH_BASE_IMAGE": "orch-test/absent:none",  # nothing to load: this daemon only has to answer, then stop
    }
    started = subprocess.run([str(SECOND), "start"], capture_output=True, text=True, check=False, env=own)
    try:
        assert started.returncode == 0, started.stderr
        certs = folder / "certs" / "client"
        spec = DockerTargetSpec(
            name="stopped",
            docker_host="tcp://127.0.0.1:23779",
            tls=TlsFiles(ca_cert=certs / "ca.pem", client_cert=certs / "cert.pem", client_key=certs / "key.pem"),
        )
        target = target_from_spec(spec)
        request = CellRequest(cell_id="tiny@stopped", dossier=TINY, out=tmp_path / "cell", timeout_s=600)
        alive = target.run_cell(request.model_copy(update={"dossier": tmp_path / "absent.yaml"}))
        assert alive.status == "bad-input", alive  # it answered: the rebuild ran and found no dossier
        subprocess.run([str(SECOND), "stop"], capture_output=True, check=True, env=own)
        outcome = target.run_cell(request)
    finally:
        subprocess.run([str(SECOND), "purge"], capture_output=True, check=True, env=own)
    assert outcome.status == "environment"
    assert outcome.first_error is not None
    assert "endpoint stopped does not answer" in outcome.first_error and "127.0.0.1:23779" in outcome.first_error
    assert "refused" in outcome.first_error.lower(), outcome.first_error
    assert outcome.duration_s < 30


def test_a_hanging_cell_times_out_and_its_containers_are_removed(
    second_daemon: DockerTargetSpec, tmp_path: Path
) -> None:
    """A cold rebuild stopped at the cell's timeout: nothing of it keeps running.

    The copy's app sleeps before it reads anything, so the cell hangs for sure, on any machine: the timeout
    falls in its cold build where that build is slow (the classic builder took 2-4.5 min here), or in its
    sample where the build is fast (BuildKit builds tiny in about 15 s). Both must leave nothing behind.
    """
    cell_id = f"hang-{SESSION_ID}@second"
    example = tmp_path / "tiny-embeddings"
    shutil.copytree(TINY.parent, example)
    app = example / "app" / "embed.py"
    app.write_text(app.read_text().replace("import zlib\n", "import zlib\nimport time\n\ntime.sleep(3600)\n", 1))
    assert "time.sleep(3600)" in app.read_text()
    target = DockerTarget(second_daemon, grace_s=10)
    request = CellRequest(
        cell_id=cell_id,
        dossier=example / "dossier.yaml",
        out=tmp_path / "cell",
        cache="cold",
        timeout_s=25,
        tag_namespace=WARM_NAMESPACE,
    )
    outcome = target.run_cell(request)
    assert outcome.status == "timeout"
    assert outcome.first_error is not None and "timeout of 25s" in outcome.first_error
    assert outcome.duration_s < 25 + 10 + 120  # timeout, grace for SIGINT, the sweep's deadline
    client = _second_client()
    try:
        mine = [
            container
            for container in client.containers.list(all=True, filters={"label": CELL_LABEL})
            if _this_cell(container.labels, cell_id)
        ]
        # The stopped build's layers: this daemon's own housekeeping, children first and retried while a
        # loaded daemon still holds them (issue 22: `409 Conflict … image has dependent child images` when a
        # parent came before its child). Only this cell's layers, found by its own label value.
        remove_containers(client, {"label": CELL_LABEL}, mine=lambda c: _this_cell(c.labels, cell_id))
        left = remove_images(client, lambda: _cell_images(client, cell_id))
    finally:
        client.close()
    assert mine == [], f"the stopped cell left containers: {[c.short_id for c in mine]}"
    assert not left, f"the stopped cell's layers could not be removed: {sorted(left)}"


def _this_cell(labels: dict[str, str] | None, cell_id: str) -> bool:
    return (labels or {}).get(CELL_LABEL, "").startswith(cell_id + ".")


def _cell_images(client: docker.DockerClient, cell_id: str) -> set[str]:
    images = client.images.list(all=True, filters={"label": CELL_LABEL})
    return {str(image.id) for image in images if _this_cell(image.labels, cell_id)}


# -- Slurm ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm_conf() -> Iterator[str]:
    conf = _script_env(SLURM)["SLURM_CONF"]
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    if subprocess.run([str(SLURM), "status"], capture_output=True, check=False).returncode != 0:
        _missing("the Slurm cluster")
    yield conf
    if before is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = before


def _slurm_spec(tmp_path: Path, **changes: object) -> SlurmTargetSpec:
    fields: dict[str, object] = {"name": "slurm", "partition": "orch", "shared_dir": tmp_path / "shared"}
    fields.update(changes)
    return SlurmTargetSpec.model_validate(fields)


def test_a_slurm_job_runs_a_real_rebuild(slurm_conf: str, engine: Engine, tmp_path: Path) -> None:
    """sbatch → the node runs `orch rebuild` against its own daemon (here the first one, whose cache the
    session's warm tiny-embeddings build filled) → the outcome and outputs are collected."""
    target = SlurmTarget(_slurm_spec(tmp_path), poll_s=1)
    out = tmp_path / "night" / "tiny-embeddings@slurm"
    request = CellRequest(
        cell_id="tiny-embeddings@slurm",
        dossier=TINY,
        out=out,
        cache="warm",
        timeout_s=600,
        tag_namespace=SESSION_TAG_NAMESPACE,
    )
    outcome = target.run_cell(request)
    stderr = out / "logs" / "rebuild.stderr"
    assert outcome.status == "passed", (outcome, stderr.read_text(errors="replace")[-2000:] if stderr.exists() else "")
    assert outcome.handle is not None and outcome.handle.startswith("slurm job ")
    assert (out / "report.json").is_file() and (out / "build.json").is_file()
    script = (out / "logs" / "sbatch-job.sh").read_text(encoding="utf-8")
    assert f"export {TAG_NAMESPACE_VAR}={SESSION_TAG_NAMESPACE}" in script and "--gpus" not in script
    assert list(out.joinpath("logs").glob("slurm-*.out")), "Slurm's own output is collected"
    assert not list((tmp_path / "shared").iterdir()), "the job folder on the shared folder is removed once collected"


def _job_id_of(name: str, deadline_s: float = 60) -> str:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        done = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i|%T"], capture_output=True, text=True, check=False)
        for line in done.stdout.splitlines():
            job_id, _, state = line.partition("|")
            if state == "RUNNING":
                return job_id
        time.sleep(0.5)
    raise AssertionError(f"no running job named {name}")


def test_a_job_cancelled_with_scancel_is_cancelled(slurm_conf: str, tmp_path: Path) -> None:
    target = SlurmTarget(_slurm_spec(tmp_path), job_command=lambda request, job_dir: ["sleep", "300"], poll_s=0.5)
    request = CellRequest(cell_id=f"sleep-{SESSION_ID}@slurm", dossier=TINY, out=tmp_path / "cell", timeout_s=600)
    result: list[CellOutcome] = []
    runner = threading.Thread(target=lambda: result.append(target.run_cell(request)))
    runner.start()
    job_id = _job_id_of(f"orch-{request.cell_id}")
    subprocess.run(["scancel", job_id], check=True)
    runner.join(timeout=60)
    assert result and result[0].status == "cancelled", result
    assert result[0].handle == f"slurm job {job_id}"
    assert "scancel" in (result[0].first_error or "")


def test_a_job_past_its_time_limit_is_a_timeout(slurm_conf: str, tmp_path: Path) -> None:
    """`--time=1` and a job that sleeps longer: Slurm ends it TIMEOUT (after its ~30 s check and KillWait)."""
    target = SlurmTarget(
        _slurm_spec(tmp_path, time_limit_min=1), job_command=lambda request, job_dir: ["sleep", "300"], poll_s=1
    )
    request = CellRequest(cell_id=f"limit-{SESSION_ID}@slurm", dossier=TINY, out=tmp_path / "cell", timeout_s=60)
    outcome = target.run_cell(request)
    assert outcome.status == "timeout", outcome
    assert "time limit (TIMEOUT)" in (outcome.first_error or "")
    assert "CANCELLED AT" in "".join(p.read_text() for p in (tmp_path / "cell" / "logs").glob("slurm-*.out"))


def test_a_job_pending_too_long_is_cancelled_as_pending_timeout(slurm_conf: str, tmp_path: Path) -> None:
    spec = _slurm_spec(tmp_path, pending_timeout_s=3, sbatch_args=("--begin=now+1hour",))
    target = SlurmTarget(spec, job_command=lambda request, job_dir: ["true"], poll_s=0.5)
    request = CellRequest(cell_id=f"later-{SESSION_ID}@slurm", dossier=TINY, out=tmp_path / "cell", timeout_s=60)
    outcome = target.run_cell(request)
    assert outcome.status == "pending-timeout", outcome
    assert outcome.duration_s < 30


def test_a_partition_that_does_not_exist_is_an_environment_failure(slurm_conf: str, tmp_path: Path) -> None:
    target = SlurmTarget(_slurm_spec(tmp_path, partition="no-such-partition"))
    request = CellRequest(cell_id="x@slurm", dossier=TINY, out=tmp_path / "cell", timeout_s=60)
    outcome = target.run_cell(request)
    assert outcome.status == "environment"
    assert "sbatch refused the job" in (outcome.first_error or "") and "partition" in (outcome.first_error or "")
