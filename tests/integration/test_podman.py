"""Rootless Podman as orch's second engine, for real: scripts/podman.sh's unprivileged user and its API socket.

- every CPU example rebuilt by `orch` run *as that user* (not root) against its rootless Podman: four stages;
- minilm's Podman hand-over verified on Docker, and a Docker hand-over verified on Podman: one environment;
- CDI mapping shown in real containers: a synthetic CDI spec of this test's own vendor, four devices (a
  device node, an environment variable and a mount each); orch's selection and mapping for `--gpus device=1`,
  `CUDA_VISIBLE_DEVICES=2,3` and `SLURM_JOB_GPUS=2,3` give the container exactly those devices;
- a night whose target is `kind: podman`.

A scope of its own under xdist (tests/conftest.py): another engine, so it runs beside the main Docker
session. Under CI=true a Podman that cannot be set up fails these tests; elsewhere they are skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.engine import Engine, connect
from orchestrator.errors import ContainerStartFailed
from orchestrator.host.docker_gpu import collect_docker_gpu
from orchestrator.model.host import HostFacts, NvidiaDriverFacts, NvidiaGpu
from orchestrator.plan.gpu_select import select_gpus
from orchestrator.plan.run import plan_gpu_mapping
from orchestrator.plan.specs import RunSpec
from tests.integration.helpers import SESSION_FILTER, SESSION_ID, SESSION_TAG_NAMESPACE, orch
from tests.paths import EXAMPLES, REPO

SCRIPT = REPO / "scripts" / "podman.sh"
#: orch as the unprivileged user: the system's Python of the venv's version, with the venv's packages (the
#: venv's own interpreter may live where the user cannot read, e.g. root's pyenv).
BOOT = "import site, sys; site.addsitedir(sys.argv.pop(1)); from orchestrator.cli.main import main; sys.argv[0] = 'orch'; main()"
CPU_EXAMPLES = ("tiny-embeddings", "same-categories", "resume-training", "cpp-extension")


@dataclass(frozen=True)
class Podman:
    user: str
    uid: int
    host: str  # DOCKER_HOST of the user's socket
    python: str
    #: A folder the user owns: the tests' outputs as that user.
    work: Path
    #: The wheel cache the user's orch reads (filled as root, readable by all).
    cache: Path

    def orch(self, *args: str, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
        """`orch ARGS` run as the user (no root, no docker group), against the user's rootless Podman."""
        site = sysconfig.get_paths()["purelib"]
        env = [
            f"ORCH_CACHE_DIR={self.cache}",
            f"ORCH_TAG_NAMESPACE={SESSION_TAG_NAMESPACE}",
            f"ORCH_LABELS={SESSION_FILTER}",
            "PYTHONDONTWRITEBYTECODE=1",
        ]
        command = ["bash", str(SCRIPT), "as-user", *env, self.python, "-c", BOOT, site, *args]
        return subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)


def _unavailable(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and rootless Podman cannot be used: {message}")
    pytest.skip(message)


@pytest.fixture(scope="module")
def podman(engine: Engine, base_image: object) -> Iterator[Podman]:
    """The user's Podman, started by scripts/podman.sh (as `make test` does), with the base image in its store."""
    if os.geteuid() != 0:
        _unavailable("setting up a user's rootless Podman needs root (scripts/podman.sh start)")
    started = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, check=False, timeout=900)
    if started.returncode != 0:
        _unavailable(f"scripts/podman.sh start: {started.stderr.strip()[-600:]}")
    env = dict(
        line.removeprefix("export ").split("=", 1)
        for line in subprocess.run(
            ["bash", str(SCRIPT), "env"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.splitlines()
    )
    user = env["ORCH_PODMAN_USER"]
    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not Path(python).exists():
        _unavailable(f"{python} (the venv's Python version, for the unprivileged user) is not installed")
    uid = int(subprocess.run(["id", "-u", user], capture_output=True, text=True, check=True).stdout)
    work = Path(f"/var/tmp/orch-podman-test-{SESSION_ID}")
    cache = work / "cache"
    cache.mkdir(parents=True)
    shutil.chown(work, user, user)
    foreign = _foreign_objects(env["DOCKER_HOST"])
    before = _tags(env["DOCKER_HOST"])
    yield Podman(user, uid, env["DOCKER_HOST"], python, work / "user", cache)
    _remove_session_images(env["DOCKER_HOST"], before)
    client = docker.DockerClient(base_url=env["DOCKER_HOST"])
    try:
        assert FOREIGN_TAG in _tags(env["DOCKER_HOST"]), "another user's image in the Podman store was removed"
        assert client.containers.get(foreign).id == foreign, "another user's container was removed"
    finally:
        client.close()
    shutil.rmtree(work, ignore_errors=True)  # as root: the files the containers wrote as sub-ids too


#: Another team's objects in the user's store, as on a shared server: the tests must leave them alone.
FOREIGN_TAG = "localhost/another-team/podman-app:1"


def _foreign_objects(host: str) -> str:
    """A tagged image and a created container of someone else in the store (made once); the container's id."""
    client = docker.DockerClient(base_url=host)
    try:
        if FOREIGN_TAG not in _tags(host):
            client.images.get("orch/debian-python:bookworm").tag("localhost/another-team/podman-app", "1")
        try:
            return str(client.containers.get("another-team-keep").id)
        except docker.errors.NotFound:
            return str(client.containers.create(FOREIGN_TAG, ["true"], name="another-team-keep").id)
    finally:
        client.close()


def _tags(host: str) -> set[str]:
    client = docker.DockerClient(base_url=host)
    try:
        return {tag for image in client.images.list() for tag in image.tags}
    finally:
        client.close()


def _remove_session_images(host: str, before: set[str]) -> None:
    """The tags made since `before` in the user's store (the session's namespace, the names `orch verify` gave):
    untagged, so the images go unless another name keeps them; then the dangling layers Buildah kept as its
    cache, each checked to carry the session's label (an APIError: a layer another image still uses). Whatever else the user has stays. An example's image is
    1-1.6 GB in the store: each test's go when it ends, or the disk the Docker suite needs runs short."""
    client = docker.DockerClient(base_url=host)
    try:
        for tag in sorted(_tags(host) - before):
            if SESSION_TAG_NAMESPACE in tag or "orch-handover:" in tag:
                with contextlib.suppress(docker.errors.NotFound):
                    client.images.remove(tag)
        # Not a prune: each dangling image is removed by id, and only when it carries this session's label itself.
        key, value = SESSION_FILTER.split("=", 1)
        for image in client.images.list(filters={"dangling": True, "label": SESSION_FILTER}):
            if (image.labels or {}).get(key) == value:
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    client.images.remove(str(image.id))
    finally:
        client.close()


@pytest.fixture(autouse=True)
def _podman_images_removed(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test's images in the user's store go when it ends (after the `podman` fixture is set up)."""
    if "podman" not in request.fixturenames:
        yield
        return
    podman: Podman = request.getfixturevalue("podman")
    before = _tags(podman.host)
    yield
    _remove_session_images(podman.host, before)


@pytest.fixture(scope="module")
def user_work(podman: Podman) -> Path:
    """The user's own folder, and the wheel cache its orch reads, filled by root's orch for every example."""
    podman.work.mkdir()
    shutil.chown(podman.work, podman.user, podman.user)
    for name in ("minilm-embeddings", *CPU_EXAMPLES):
        # `orch render` collects the locked wheels into the cache (hash-checked); the user's builds read them.
        rendered = orch(
            "render",
            str(EXAMPLES / name / "dossier.yaml"),
            "--out",
            str(podman.cache.parent / name),
            "--builder",
            "classic",
            env={"ORCH_CACHE_DIR": str(podman.cache)},
        )
        assert rendered.returncode == 0, rendered.stderr
    subprocess.run(["chmod", "-R", "a+rX", str(podman.cache)], check=True)
    return podman.work


@pytest.fixture
def open_tmp(podman: Podman, request: pytest.FixtureRequest) -> Path:
    """A root-owned folder the rootless engine can reach (pytest's tmp_path is private to root: the user's
    runtime could not bind-mount a sample's folders from under it)."""
    folder = podman.work.parent / "root" / request.node.name.replace("/", "_")[:80]
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    folder.parent.chmod(0o755)
    return Path(folder)


@pytest.fixture(scope="module")
def podman_engine(podman: Podman) -> Iterator[Engine]:
    with connect(podman.host) as opened:
        yield opened


def _report(folder: Path) -> Any:
    return json.loads((folder / "report.json").read_text(encoding="utf-8"))


def _environment(report: Any) -> str:
    digest = report["stages"]["image"]["facts"]["environment"]["digest"]
    assert isinstance(digest, str) and digest.startswith("sha256:")
    return digest


def test_minilm_passes_its_four_stages_as_a_user_on_rootless_podman_and_its_hand_over_verifies_on_docker(
    podman: Podman, user_work: Path, tmp_path: Path
) -> None:
    out, handover = user_work / "minilm", user_work / "minilm-handover"
    done = podman.orch(
        "rebuild", str(EXAMPLES / "minilm-embeddings" / "dossier.yaml"), "--out", str(out), "--handover", str(handover)
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = _report(out)
    assert report["verdict"] == "passed" and all(s["status"] == "passed" for s in report["stages"].values())
    docker_facts = report["stages"]["host"]["facts"]["docker"]
    assert docker_facts["engine_kind"] == "podman" and docker_facts["rootless"] is True
    build = json.loads((out / "build.json").read_text(encoding="utf-8"))
    assert build["engine"]["kind"] == "podman" and build["engine"]["rootless"] is True
    assert build["context"]["builder"] == "classic" and build["context"]["network"] == "none"
    assert (out / "report.json").stat().st_uid == podman.uid, "orch ran as the unprivileged user"

    # Docker (root's daemon) replays the user's hand-over: the same environment, four stages reproduced.
    verified = orch("verify", str(handover), "--out", str(tmp_path / "replayed"))
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    assert f"same environment ({_environment(report)})" in verified.stdout


@pytest.mark.parametrize("example", CPU_EXAMPLES)
def test_every_cpu_example_passes_its_four_stages_as_a_user_on_rootless_podman(
    podman: Podman, user_work: Path, example: str
) -> None:
    out = user_work / example
    done = podman.orch("rebuild", str(EXAMPLES / example / "dossier.yaml"), "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = _report(out)
    assert report["verdict"] == "passed", report["stages"]


def test_a_docker_hand_over_verifies_on_podman_with_the_same_environment(podman: Podman, open_tmp: Path) -> None:
    tmp_path = open_tmp
    out, handover = tmp_path / "out", tmp_path / "handover"
    made = orch(
        "rebuild", str(EXAMPLES / "tiny-embeddings" / "dossier.yaml"), "--out", str(out), "--handover", str(handover)
    )
    assert made.returncode == 0, made.stderr[-3000:]
    verified = orch("verify", str(handover), "--out", str(tmp_path / "replayed"), env={"DOCKER_HOST": podman.host})
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    assert f"same environment ({_environment(_report(out))})" in verified.stdout
    replayed = _report(tmp_path / "replayed")
    assert replayed["stages"]["host"]["facts"]["docker"]["engine_kind"] == "podman"


# -- CDI in real containers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticCdi:
    kind: str
    root: Path


@pytest.fixture
def synthetic_cdi() -> Iterator[SyntheticCdi]:
    """A CDI spec of four devices of this test's own vendor in /etc/cdi, each a device node (a char device made
    with mknod, 1:3 like /dev/null), an environment variable and a read-only mount; removed afterwards."""
    vendor = f"t{uuid.uuid4().hex[:8]}.orch-test.example"
    kind = f"{vendor}/gpu"
    root = Path(f"/var/tmp/orch-cdi-{vendor}")
    spec_file = Path("/etc/cdi") / f"{vendor}.yaml"
    lines = ['cdiVersion: "0.5.0"', f"kind: {kind}", "devices:"]
    for index in range(4):
        node, mount = root / "dev" / f"gpu{index}", root / "mnt" / f"gpu{index}"
        node.parent.mkdir(parents=True, exist_ok=True)
        mount.mkdir(parents=True)
        (mount / "id").write_text(f"gpu {index}\n", encoding="utf-8")
        os.mknod(node, 0o20666, os.makedev(1, 3))
        os.chmod(node, 0o666)
        # In a rootless container a device node is bind-mounted from the host at its own path.
        lines += [
            f'  - name: "{index}"',
            "    containerEdits:",
            f"      deviceNodes: [{{path: {node}}}]",
            f"      env: [ORCHTEST_GPU_{index}=present]",
            f"      mounts: [{{hostPath: {mount}, containerPath: /orchtest/gpu{index}, options: [ro, bind]}}]",
        ]
    subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True)
    spec_file.parent.mkdir(parents=True, exist_ok=True)
    spec_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        yield SyntheticCdi(kind, root)
    finally:
        spec_file.unlink(missing_ok=True)
        shutil.rmtree(root, ignore_errors=True)


def _four_gpu_host(engine: Engine) -> HostFacts:
    """This machine's engine facts as orch reads them (the real /etc/cdi), with four NVIDIA GPUs it does not have:
    the GPU count is what `--gpus` is checked against; the devices themselves come from the synthetic spec."""
    info = engine.info()
    docker_facts, _ = collect_docker_gpu(info.runtimes, info.cdi_spec_dirs, Path("/"), info.kind)
    gpus = [NvidiaGpu(index=i, name="synthetic", uuid=f"GPU-{i}") for i in range(4)]
    return HostFacts(
        kernel="synthetic",
        nvidia=NvidiaDriverFacts(source="nvidia-smi", driver_version="570.86.15", gpus=gpus),
        amd=None,
        docker=docker_facts,
    )


LIST = (
    "for n in /var/tmp/orch-cdi-*/dev/gpu*; do [ -e $n ] && echo node ${n##*/}; done; "
    "ls /orchtest 2>/dev/null | sed 's/^/mount /'; env | grep '^ORCHTEST_GPU_' | sed 's/^/env /' | sort; true"
)


def _arrived(engine: Engine, image: str, cdi: SyntheticCdi, gpus: str | None, environ: dict[str, str]) -> list[str]:
    host = _four_gpu_host(engine)
    mapping = plan_gpu_mapping("cuda", host, select_gpus(gpus, host, environ), cdi_kind=cdi.kind)
    assert mapping.mechanism == "cdi", mapping.description
    outcome = engine.run(
        RunSpec(image=image, command=["sh", "-c", LIST], cdi_devices=mapping.cdi_devices, timeout_s=120)
    )
    assert outcome.exit_code == 0, outcome.stderr
    return sorted(outcome.stdout.split("\n")[:-1])


@pytest.mark.parametrize("engine_kind", ["podman", "docker"])
def test_exactly_the_selected_gpus_of_a_synthetic_cdi_spec_arrive_in_a_real_container(
    engine_kind: str, engine: Engine, podman: Podman, podman_engine: Engine, synthetic_cdi: SyntheticCdi
) -> None:
    """The same test on every engine at hand that resolves CDI: Podman always; Docker with CDI on (≥ 25)."""
    target = podman_engine if engine_kind == "podman" else engine
    facts = _four_gpu_host(target).docker
    if facts is None or not facts.cdi_enabled:
        pytest.skip(f"this {engine_kind} ({target.info().server_version}) does not resolve CDI")
    image = "orch/debian-python:bookworm"
    one = _arrived(target, image, synthetic_cdi, "device=1", {})
    assert one == ["env ORCHTEST_GPU_1=present", "mount gpu1", "node gpu1"]
    for allocation in ({"CUDA_VISIBLE_DEVICES": "2,3"}, {"SLURM_JOB_GPUS": "2,3"}):
        both = _arrived(target, image, synthetic_cdi, None, allocation)
        assert both == [
            "env ORCHTEST_GPU_2=present",
            "env ORCHTEST_GPU_3=present",
            "mount gpu2",
            "mount gpu3",
            "node gpu2",
            "node gpu3",
        ], allocation


def test_a_gpu_the_cdi_spec_lacks_is_refused_before_any_container(
    podman_engine: Engine, synthetic_cdi: SyntheticCdi
) -> None:
    host = _four_gpu_host(podman_engine)
    assert host.docker is not None
    kept = [name for name in host.docker.cdi_devices if name != f"{synthetic_cdi.kind}=3"]
    gone = host.model_copy(update={"docker": host.docker.model_copy(update={"cdi_devices": kept})})
    mapping = plan_gpu_mapping("cuda", gone, select_gpus("device=3", gone, {}), cdi_kind=synthetic_cdi.kind)
    assert not mapping.maps_nvidia and f"the CDI specs name no {synthetic_cdi.kind}=3" in mapping.description


def test_a_cdi_name_no_spec_defines_stops_the_start_with_its_cause(podman: Podman, podman_engine: Engine) -> None:
    """Podman's own words at the start ("unresolvable CDI devices …"), explained by the failure catalogue."""
    spec = RunSpec(
        image="orch/debian-python:bookworm",
        command=["true"],
        cdi_devices=[f"t{uuid.uuid4().hex[:8]}.orch-test.example/gpu=0"],
        labels={"purpose": "cdi-refused"},
    )
    with pytest.raises(ContainerStartFailed) as caught:
        podman_engine.run(spec)
    assert "unresolvable CDI devices" in caught.value.message
    assert "is in no CDI spec the runtime read" in caught.value.message
    assert caught.value.hint is not None and "nvidia-ctk cdi generate" in caught.value.hint
    client = docker.DockerClient(base_url=podman.host)
    try:
        assert not client.containers.list(all=True, filters={"label": "purpose=cdi-refused"}), "none left behind"
    finally:
        client.close()


# -- a night on Podman ---------------------------------------------------------------------------------------


def _night_said(history: Path) -> str:
    """The night's summary and its cells' rebuild logs (the last 2000 characters of each)."""
    said = "".join(p.read_text(encoding="utf-8") for p in history.rglob("summary.md"))
    return said + "".join(p.read_text(encoding="utf-8")[-2000:] for p in history.rglob("rebuild.std*"))


def test_a_night_runs_its_cell_on_a_podman_target(podman: Podman, user_work: Path, open_tmp: Path) -> None:
    tmp_path = open_tmp
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "nightly: 1\n"
        f"dossiers: [{{path: {EXAMPLES / 'tiny-embeddings' / 'dossier.yaml'}}}]\n"
        f"targets: [{{name: pod, kind: podman, podman_host: '{podman.host}'}}]\n"
        # The session's namespace: the cell's image is then this session's, removed when the test ends.
        f"tag_namespace: {SESSION_TAG_NAMESPACE}\n"
        "history: history\n",
        encoding="utf-8",
    )
    night = orch("nightly", "run", str(plan), env={"ORCH_CACHE_DIR": str(podman.cache)})
    assert night.returncode == 0, _night_said(tmp_path / "history")
    reports = list((tmp_path / "history").rglob("report.json"))
    assert len(reports) == 1 and _report(reports[0].parent)["verdict"] == "passed"
    assert _report(reports[0].parent)["stages"]["host"]["facts"]["docker"]["engine_kind"] == "podman"


def test_a_podman_target_that_answers_as_docker_fails_its_cell_as_environment(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "nightly: 1\n"
        f"dossiers: [{{path: {EXAMPLES / 'tiny-embeddings' / 'dossier.yaml'}}}]\n"
        "targets: [{name: pod, kind: podman, podman_host: 'unix:///var/run/docker.sock'}]\n"
        "history: history\n",
        encoding="utf-8",
    )
    night = orch("nightly", "run", str(plan))
    assert night.returncode == 3, night.stderr  # only the environment failed
    said = _night_said(tmp_path / "history")
    assert "answers as Docker" in said and "not Podman" in said, said[-3000:]
