"""Podman as an engine kind, its pure parts: telling it from Docker, its builds, its containers' SpecGenerator,
and GPU mapping through CDI. The real engine is exercised in tests/integration/test_podman.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.engine.docker_build import builders
from orchestrator.engine.docker_engine import engine_kind
from orchestrator.engine.podman import spec_generator
from orchestrator.host.docker_gpu import collect_docker_gpu
from orchestrator.model.host import DockerGpuFacts, HostFacts, NvidiaDriverFacts, NvidiaGpu
from orchestrator.plan.gpu_select import select_gpus
from orchestrator.plan.run import plan_gpu_mapping
from orchestrator.plan.specs import Mount, RunSpec
from orchestrator.stages.image_tar import familiar_name
from tests.unit.test_wheel_feed import TINY, _steps

#: `/version` of Podman 4.3.1's API service (Debian 12's podman, rootless), as it answered here (trimmed).
PODMAN_VERSION = {
    "Platform": {"Name": "linux/amd64/debian-12"},
    "Components": [
        {"Name": "Podman Engine", "Version": "4.3.1", "Details": {"APIVersion": "4.3.1", "MinAPIVersion": "4.0.0"}},
        {"Name": "Conmon", "Version": "conmon version 2.1.6, commit: unknown"},
        {"Name": "OCI Runtime (runc)", "Version": "runc version 1.1.5+ds1"},
    ],
    "Version": "4.3.1",
    "ApiVersion": "1.41",
    "MinAPIVersion": "1.24",
    "Os": "linux",
}
DOCKER_VERSION = {
    "Components": [{"Name": "Engine", "Version": "20.10.24+dfsg1"}, {"Name": "containerd", "Version": "1.6.20"}],
    "Version": "20.10.24+dfsg1",
    "ApiVersion": "1.41",
}


def test_podman_is_told_from_docker_by_its_components() -> None:
    assert engine_kind(PODMAN_VERSION) == "podman"
    assert engine_kind(DOCKER_VERSION) == "docker"
    assert engine_kind({"Version": "28.0.1"}) == "docker", "an engine that lists no components is Docker's"


def test_podman_builds_with_the_classic_api_only() -> None:
    assert builders("linux", "1.41", "podman") == ("classic",)
    assert builders("linux", "1.41", "docker") == ("buildkit", "classic")


def test_on_podman_the_wheels_travel_in_the_context_not_through_the_feed() -> None:
    docker = _steps(TINY / "dossier.yaml")
    podman = _steps(TINY / "dossier.yaml", wheel_feed=False)
    assert docker.network == "wheel-feed" and docker.feed is not None
    assert podman.network == "none" and podman.feed is None and not podman.plan.wheel_feed


def test_the_spec_generator_confines_a_container_as_docker_does(tmp_path: Path) -> None:
    spec = RunSpec(
        image="sha256:" + "a" * 64,
        command=["python", "-c", "print(1)"],
        mounts=[Mount(tmp_path / "in", "/orch/input"), Mount(tmp_path / "out", "/orch/output", read_only=False)],
        environment={"A": "1"},
        mem_limit="512m",
        pids_limit=64,
        labels={"io.orch.probe": "sample"},
        cdi_devices=["nvidia.com/gpu=1"],
        devices=["/dev/kfd"],
        group_add=["44"],
        shm_size="1g",
    )
    # The caller merges the engine's and the spec's labels (docker_containers.run), as for Docker's create.
    generated = spec_generator(spec, {"team": "ml", **spec.labels})
    assert generated["labels"] == {"team": "ml", "io.orch.probe": "sample", "io.orch.managed": "true"}
    assert generated["cap_drop"] == ["ALL"] and generated["no_new_privileges"] is True
    assert generated["privileged"] is False and generated["read_only_filesystem"] is False
    assert generated["resource_limits"] == {"memory": {"limit": 512 << 20, "swap": 512 << 20}, "pids": {"limit": 64}}
    assert generated["netns"] == {"nsmode": "none"}
    assert generated["mounts"] == [
        {"destination": "/orch/input", "source": str(tmp_path / "in"), "type": "bind", "options": ["rbind", "ro"]},
        {"destination": "/orch/output", "source": str(tmp_path / "out"), "type": "bind", "options": ["rbind", "rw"]},
    ]
    assert generated["devices"] == [{"path": "nvidia.com/gpu=1"}, {"path": "/dev/kfd"}]
    assert generated["groups"] == ["44"] and generated["shm_size"] == 1 << 30
    assert generated["env"] == {"A": "1"} and generated["command"] == ["python", "-c", "print(1)"]


def test_the_nvidia_runtime_request_is_refused_on_podman() -> None:
    with pytest.raises(ValueError, match="CDI"):
        spec_generator(RunSpec(image="x", command=["true"], nvidia_gpus=True), {})


def _host(devices: list[str], *, kind: str = "podman", runtime: bool = False) -> HostFacts:
    gpus = [NvidiaGpu(index=i, name="NVIDIA H100", uuid=f"GPU-{i}aaa") for i in range(4)]
    return HostFacts(
        kernel="6.8",
        nvidia=NvidiaDriverFacts(source="nvidia-smi", driver_version="570.86.15", gpus=gpus),
        amd=None,
        docker=DockerGpuFacts(
            runtimes=["nvidia", "runc"] if runtime else ["runc"],
            nvidia_runtime=runtime,
            cdi_devices=devices,
            engine_kind=kind,  # type: ignore[arg-type]
            cdi_enabled=True,
        ),
    )


ALL_FOUR = [f"nvidia.com/gpu={name}" for name in ("0", "1", "2", "3", "all", "GPU-2aaa")]


def test_the_selected_gpus_are_mapped_as_their_cdi_names() -> None:
    host = _host(ALL_FOUR)
    one = plan_gpu_mapping("cuda", host, select_gpus("device=1", host, {}))
    assert one.cdi_devices == ("nvidia.com/gpu=1",) and one.mechanism == "cdi" and not one.nvidia_gpus
    allocated = plan_gpu_mapping("cuda", host, select_gpus(None, host, {"SLURM_JOB_GPUS": "2,3"}))
    assert allocated.cdi_devices == ("nvidia.com/gpu=2", "nvidia.com/gpu=3")
    assert "SLURM_JOB_GPUS=2,3" in allocated.description
    by_uuid = plan_gpu_mapping("cuda", host, select_gpus("GPU-2aaa", host, {}))
    assert by_uuid.cdi_devices == ("nvidia.com/gpu=2",), "a UUID is mapped by the index the host gives it"
    uuid_named = _host(["nvidia.com/gpu=GPU-1aaa", "nvidia.com/gpu=all"])
    assert plan_gpu_mapping("cuda", uuid_named, select_gpus("device=1", uuid_named, {})).cdi_devices == (
        "nvidia.com/gpu=GPU-1aaa",
    ), "a spec that names GPUs by UUID only (--device-name-strategy=uuid)"
    every = plan_gpu_mapping("cuda", host, select_gpus(None, host, {}))
    assert every.cdi_devices == ("nvidia.com/gpu=all",)


def test_cdi_wins_over_the_nvidia_runtime_when_the_specs_name_the_gpus() -> None:
    host = _host(ALL_FOUR, kind="docker", runtime=True)
    assert plan_gpu_mapping("cuda", host, select_gpus("device=3", host, {})).cdi_devices == ("nvidia.com/gpu=3",)
    gap = _host(["nvidia.com/gpu=0"], kind="docker", runtime=True)
    fallback = plan_gpu_mapping("cuda", gap, select_gpus("device=3", gap, {}))
    assert fallback.mechanism == "nvidia-runtime" and fallback.nvidia_device_ids == ("3",)
    assert "not CDI: the CDI specs name no nvidia.com/gpu=3" in fallback.description


def test_a_gpu_without_a_cdi_device_on_podman_is_not_mapped_and_the_check_says_what_to_run() -> None:
    from orchestrator.checks.host_layer import host_checks, image_needs

    host = _host(["nvidia.com/gpu=0", "nvidia.com/gpu=all"], runtime=True)
    mapping = plan_gpu_mapping("cuda", host, select_gpus("device=2", host, {}))
    assert not mapping.maps_nvidia and mapping.mechanism == "none"
    assert mapping.description.startswith("none: the CDI specs name no nvidia.com/gpu=2")
    assert "Podman has no nvidia runtime request" in mapping.description
    check = next(c for c in host_checks("cuda", host, image_needs({}, None), None, mapping) if "map" in c.name)
    assert not check.passed
    assert check.detail is not None and "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in check.detail


def test_a_site_or_test_cdi_kind_replaces_the_vendors() -> None:
    host = _host([f"orchtest.example/gpu={i}" for i in range(4)])
    mapping = plan_gpu_mapping("cuda", host, select_gpus("device=1", host, {}), cdi_kind="orchtest.example/gpu")
    assert mapping.cdi_devices == ("orchtest.example/gpu=1",)


def test_amd_gpus_go_through_cdi_when_amd_ctk_wrote_a_spec() -> None:
    host = HostFacts(
        kernel="6.8",
        nvidia=None,
        amd=None,
        docker=DockerGpuFacts(
            runtimes=["crun"],
            nvidia_runtime=False,
            cdi_devices=["amd.com/gpu=0", "amd.com/gpu=all"],
            engine_kind="podman",
            cdi_enabled=True,
        ),
        kfd_present=True,
        dri_render_nodes=["/dev/dri/renderD128"],
        video_gid=44,
    )
    mapping = plan_gpu_mapping("rocm", host)
    assert mapping.cdi_devices == ("amd.com/gpu=all",) and mapping.devices == () and mapping.group_add == ("44",)
    nodes = plan_gpu_mapping(
        "rocm", host.model_copy(update={"docker": DockerGpuFacts(runtimes=[], nvidia_runtime=False)})
    )
    assert nodes.mechanism == "device-nodes" and nodes.devices == ("/dev/kfd", "/dev/dri/renderD128")


def test_podman_reads_the_default_cdi_folders_and_never_offers_an_nvidia_runtime(tmp_path: Path) -> None:
    (tmp_path / "etc/cdi").mkdir(parents=True)
    (tmp_path / "etc/cdi/nvidia.yaml").write_text(
        'cdiVersion: "0.5.0"\nkind: nvidia.com/gpu\ndevices:\n  - name: "0"\n  - name: all\n', encoding="utf-8"
    )
    facts, notes = collect_docker_gpu(["nvidia", "runc"], [], tmp_path, "podman")
    assert facts.cdi_enabled and not facts.nvidia_runtime and notes == []
    assert facts.cdi_devices == ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]
    docker, docker_notes = collect_docker_gpu(["nvidia", "runc"], [], tmp_path, "docker")
    assert not docker.cdi_enabled and docker.nvidia_runtime and "CDI may be off" in docker_notes[0]


@pytest.mark.parametrize(
    ("name", "familiar"),
    [
        ("docker.io/orch/minilm:1", "orch/minilm:1"),
        ("docker.io/library/debian:12", "debian:12"),
        ("index.docker.io/orch/x:1", "orch/x:1"),
        ("orch/minilm:1", "orch/minilm:1"),
        ("localhost/orch/minilm:1", "localhost/orch/minilm:1"),
        ("127.0.0.1:5055/orch/minilm:1", "127.0.0.1:5055/orch/minilm:1"),
        ("docker.io/a/b/c:1", "a/b/c:1"),
    ],
)
def test_podmans_qualified_names_are_dockers_familiar_ones(name: str, familiar: str) -> None:
    assert familiar_name(name) == familiar
