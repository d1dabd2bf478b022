from __future__ import annotations

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import ImageInfo
from orchestrator.model.host import DockerGpuFacts, HostFacts, NvidiaDriverFacts, NvidiaGpu
from orchestrator.plan.run import plan_gpu_mapping
from orchestrator.stages.host_stage import host_stage
from tests.paths import EXAMPLES

TINY = EXAMPLES / "tiny-embeddings"


def _host(**kwargs: object) -> HostFacts:
    base: dict[str, object] = {
        "kernel": "6.8.0",
        "nvidia": None,
        "amd": None,
        "docker": DockerGpuFacts(runtimes=["runc"], nvidia_runtime=False),
    }
    base.update(kwargs)
    return HostFacts.model_validate(base)


def _image(env: dict[str, str]) -> ImageInfo:
    return ImageInfo(id="sha256:" + "1" * 64, tags=(), labels={}, env=env, repo_digests=(), size=0)


H100 = NvidiaGpu(index=0, name="NVIDIA H100 80GB HBM3", compute_capability="9.0")


def test_gpu_mapping_per_platform() -> None:
    assert plan_gpu_mapping("cpu", _host()).description == "none (CPU platform)"
    none = plan_gpu_mapping("cuda", _host())
    assert not none.nvidia_gpus and "no nvidia runtime" in none.description
    runtime = plan_gpu_mapping("cuda", _host(docker=DockerGpuFacts(runtimes=["nvidia", "runc"], nvidia_runtime=True)))
    assert runtime.nvidia_gpus
    cdi = plan_gpu_mapping(
        "cuda",
        _host(
            docker=DockerGpuFacts(
                runtimes=["runc"], nvidia_runtime=False, cdi_devices=["nvidia.com/gpu=0", "nvidia.com/gpu=all"]
            )
        ),
    )
    assert cdi.cdi_devices == ("nvidia.com/gpu=all",)
    amd = plan_gpu_mapping(
        "rocm", _host(kfd_present=True, dri_render_nodes=["/dev/dri/renderD128"], video_gid=44, render_gid=109)
    )
    assert amd.devices == ("/dev/kfd", "/dev/dri/renderD128") and amd.group_add == ("44", "109")
    assert "/dev/kfd does not exist" in plan_gpu_mapping("rocm", _host()).description


def test_host_stage_explains_an_old_driver_before_any_container_starts() -> None:
    loaded = load_dossier(TINY / "dossier-cuda.yaml")
    host = _host(
        nvidia=NvidiaDriverFacts(source="nvidia-smi", driver_version="470.82.01", gpus=[H100]),
        docker=DockerGpuFacts(runtimes=["nvidia", "runc"], nvidia_runtime=True),
    )
    result, verdict, mapping = host_stage(
        loaded, host, _image({"CUDA_VERSION": "12.4.1", "NVIDIA_REQUIRE_CUDA": "cuda>=12.4"}), None
    )
    assert result.status == "failed"
    # The image has CUDA_VERSION and no NVIDIA_REQUIRE_CUDA: the toolkit itself would refuse it (legacy rule).
    assert verdict.status in ("unsupported", "forward-compat-possible", "refused-by-toolkit")
    assert result.first_error is not None and result.first_error.step == "driver supports the image's CUDA"
    assert "470.82.01" in verdict.explanation
    assert mapping.nvidia_gpus


def test_host_stage_passes_with_a_fitting_driver_and_runtime() -> None:
    loaded = load_dossier(TINY / "dossier-cuda.yaml")
    host = _host(
        nvidia=NvidiaDriverFacts(source="nvml", driver_version="550.54.14", cuda_driver_version="12.4", gpus=[H100]),
        docker=DockerGpuFacts(runtimes=["nvidia", "runc"], nvidia_runtime=True),
    )
    result, verdict, _ = host_stage(loaded, host, _image({"CUDA_VERSION": "12.4.1"}), None)
    # NVIDIA's table ships 12.4 Update 1 with 550.54.15 (issue 11: update releases judged by their own row).
    assert verdict.status == "minor-version-compat"
    assert result.status == "passed", result.first_error
    newer = host.model_copy(update={"nvidia": host.nvidia.model_copy(update={"driver_version": "550.54.15"})})  # type: ignore[union-attr]
    assert host_stage(loaded, newer, _image({"CUDA_VERSION": "12.4.1"}), None)[1].status == "supported"


def test_forward_compatibility_needs_a_datacenter_gpu_and_compat_libs_in_the_image() -> None:
    from orchestrator.model.inventory import parse_inventory

    loaded = load_dossier(TINY / "dossier-cuda.yaml", variant="local-cuda13")
    host = _host(
        nvidia=NvidiaDriverFacts(source="nvidia-smi", driver_version="535.183.01", gpus=[H100]),
        docker=DockerGpuFacts(runtimes=["nvidia", "runc"], nvidia_runtime=True),
    )
    document = {
        "python": {"version": "3.11.2"},
        "pip": {"freeze": [], "check_ok": True},
        "backend": {
            "torch": {"version": "2.14.1", "cuda": "13.0"},
            "cuda_compat_libs": ["/usr/local/cuda/compat/libcuda.so.580.65.06"],
        },
    }
    with_compat = parse_inventory(document)
    _, verdict, _ = host_stage(loaded, host, _image({}), with_compat)
    assert verdict.status == "forward-compat-possible", verdict.explanation
    without = parse_inventory({**document, "backend": {"torch": {"version": "2.14.1", "cuda": "13.0"}}})
    _, verdict, _ = host_stage(loaded, host, _image({}), without)
    assert verdict.status == "unsupported", verdict.explanation
