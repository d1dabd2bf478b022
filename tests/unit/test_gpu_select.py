"""GPU selection (`--gpus`) and scheduler allocations, on a captured 4-GPU host."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import GpuSelectionError
from orchestrator.host.capture import CAPTURE_COMMANDS, facts_from_capture, read_capture, write_capture
from orchestrator.model.host import AmdDriverFacts, AmdGpu, HostFacts
from orchestrator.plan.gpu_select import select_gpus
from tests.unit.host_fakes import FakeRun, ok

FOUR = "".join(
    f"{i}, NVIDIA A100-SXM4-80GB, GPU-{i}aaaaaaa-0000-0000-0000-00000000000{i}, 00000000:{i + 7:02X}:00.0, 81920, 550.54.15\n"
    for i in range(4)
)


@pytest.fixture
def four_gpu_host(tmp_path: Path) -> HostFacts:
    root = tmp_path / "root"
    root.mkdir()
    run = FakeRun({CAPTURE_COMMANDS[2]: ok(FOUR), ("nvidia-smi",): ok("Driver Version: 550.54.15  CUDA Version: 12.4")})
    write_capture(tmp_path / "capture", root, run, {})
    facts = facts_from_capture(read_capture(tmp_path / "capture"))
    assert facts.nvidia is not None and len(facts.nvidia.gpus) == 4
    return facts


def test_gpus_device_1_maps_exactly_that_one(four_gpu_host: HostFacts) -> None:
    selection = select_gpus("device=1", four_gpu_host, {})
    assert (selection.all, selection.indices, selection.device_ids) == (False, (1,), ("1",))
    assert selection.reason == "--gpus device=1"


def test_cuda_visible_devices_2_3_maps_2_and_3(four_gpu_host: HostFacts) -> None:
    selection = select_gpus(None, four_gpu_host, {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert (selection.indices, selection.device_ids) == ((2, 3), ("2", "3"))
    assert selection.reason == "CUDA_VISIBLE_DEVICES=2,3 (scheduler allocation)"


def test_slurm_job_gpus_is_honoured_when_cuda_visible_devices_is_unset(four_gpu_host: HostFacts) -> None:
    assert select_gpus(None, four_gpu_host, {"SLURM_JOB_GPUS": "0,3"}).indices == (0, 3)


def test_inside_a_slurm_job_the_global_ids_win_over_a_renumbered_cuda_visible_devices(
    four_gpu_host: HostFacts,
) -> None:
    # ConstrainDevices=yes: the job got host GPUs 2 and 3, which it sees as 0 and 1.
    environ = {"SLURM_JOB_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": "0,1"}
    selection = select_gpus(None, four_gpu_host, environ)
    assert selection.indices == (2, 3)
    assert selection.reason == "SLURM_JOB_GPUS=2,3 (scheduler allocation)"


def test_default_is_all_gpus(four_gpu_host: HostFacts) -> None:
    selection = select_gpus(None, four_gpu_host, {})
    assert selection.all and selection.device_ids == ()


def test_a_count_takes_the_first_allowed_gpus(four_gpu_host: HostFacts) -> None:
    assert select_gpus("2", four_gpu_host, {"CUDA_VISIBLE_DEVICES": "1,3"}).indices == (1, 3)
    with pytest.raises(GpuSelectionError, match="offers 2 GPU"):
        select_gpus("3", four_gpu_host, {"CUDA_VISIBLE_DEVICES": "1,3"})


def test_a_uuid_maps_to_its_index_and_a_mig_uuid_passes_through(four_gpu_host: HostFacts) -> None:
    uuid = "GPU-2aaaaaaa-0000-0000-0000-000000000002"
    assert select_gpus(uuid, four_gpu_host, {}).indices == (2,)
    mig = select_gpus("MIG-4f2c3a1e-7c2b-5d9e-a1b2-0123456789ab", four_gpu_host, {})
    assert mig.indices == () and mig.device_ids == ("MIG-4f2c3a1e-7c2b-5d9e-a1b2-0123456789ab",)


def test_an_explicit_gpu_outside_the_allocation_is_refused(four_gpu_host: HostFacts) -> None:
    with pytest.raises(GpuSelectionError, match="outside this job's allocation CUDA_VISIBLE_DEVICES=2,3"):
        select_gpus("device=1", four_gpu_host, {"CUDA_VISIBLE_DEVICES": "2,3"})
    with pytest.raises(GpuSelectionError, match="GPU 7 does not exist"):
        select_gpus("device=7", four_gpu_host, {})


def test_amd_maps_kfd_and_the_selected_render_nodes() -> None:
    gpus = [AmdGpu(node=i + 1, gfx_target="gfx942") for i in range(4)]
    host = HostFacts(
        kernel="6.8",
        nvidia=None,
        amd=AmdDriverFacts(source="kfd", driver_version=None, gpus=gpus),
        docker=None,
        kfd_present=True,
        dri_render_nodes=[f"/dev/dri/renderD{128 + i}" for i in range(4)],
    )
    selection = select_gpus(None, host, {"ROCR_VISIBLE_DEVICES": "1,2"}, vendor="amd")
    assert selection.devices == ("/dev/kfd", "/dev/dri/renderD129", "/dev/dri/renderD130")
    assert select_gpus(None, host, {}, vendor="amd").devices[0] == "/dev/kfd"


def _cuda_host_with_runtime(host: HostFacts) -> HostFacts:
    from orchestrator.model.host import DockerGpuFacts

    return host.model_copy(update={"docker": DockerGpuFacts(runtimes=["nvidia", "runc"], nvidia_runtime=True)})


def test_the_run_plan_maps_exactly_gpu_1_for_gpus_device_1(four_gpu_host: HostFacts, tmp_path: Path) -> None:
    from orchestrator.dossier.load import load_dossier
    from orchestrator.plan.run import make_run_plan, plan_gpu_mapping
    from orchestrator.stages.probe import gpu_selection
    from tests.paths import EXAMPLES

    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier-cuda.yaml")
    host = _cuda_host_with_runtime(four_gpu_host)
    mapping = plan_gpu_mapping("cuda", host, gpu_selection("cuda", host, "device=1", {}))
    plan = make_run_plan(loaded, "sha256:" + "1" * 64, mapping, tmp_path)
    assert tuple(plan.device.nvidia_device_ids) == ("1",) and tuple(plan.sample.nvidia_device_ids) == ("1",)
    assert (
        plan.mapping.description
        == "GPU(s) 1 through the nvidia runtime (not CDI: the daemon does not resolve CDI) (--gpus device=1)"
    )


def test_the_run_plan_maps_2_and_3_under_cuda_visible_devices(four_gpu_host: HostFacts, tmp_path: Path) -> None:
    from orchestrator.dossier.load import load_dossier
    from orchestrator.plan.run import make_run_plan, plan_gpu_mapping
    from orchestrator.stages.probe import gpu_selection
    from tests.paths import EXAMPLES

    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier-cuda.yaml")
    host = _cuda_host_with_runtime(four_gpu_host)
    mapping = plan_gpu_mapping("cuda", host, gpu_selection("cuda", host, None, {"CUDA_VISIBLE_DEVICES": "2,3"}))
    plan = make_run_plan(loaded, "sha256:" + "1" * 64, mapping, tmp_path)
    assert tuple(plan.device.nvidia_device_ids) == ("2", "3")
    assert "CUDA_VISIBLE_DEVICES=2,3 (scheduler allocation)" in plan.mapping.description


def test_a_gpus_value_the_host_cannot_satisfy_is_bad_input(four_gpu_host: HostFacts) -> None:
    from orchestrator.errors import BadInput
    from orchestrator.stages.probe import gpu_selection

    with pytest.raises(BadInput, match="GPU 9 does not exist"):
        gpu_selection("cuda", four_gpu_host, "device=9", {})
    assert gpu_selection("cpu", four_gpu_host, "device=9", {}) is None


def test_the_dry_run_plan_shows_the_selected_gpus(four_gpu_host: HostFacts) -> None:
    """`--dry-run` maps what the probe would map: `--gpus`, else the scheduler's allocation."""
    from orchestrator.dossier.load import load_dossier
    from orchestrator.model.build_record import CodeRef
    from orchestrator.pipeline.dry_run import rebuild_text
    from orchestrator.plan.build import default_tag
    from orchestrator.plan.program import BuildOptionsPlan
    from tests.paths import EXAMPLES

    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier-cuda.yaml")
    host = _cuda_host_with_runtime(four_gpu_host)
    code = CodeRef(kind="folder", source="app", revision=None, dirty=False, dirty_diff_sha256=None, variant=None)
    options = BuildOptionsPlan(out=Path("/o"), tag=default_tag(loaded))
    chosen = rebuild_text(loaded, options, code, host, {}, gpus="device=1")
    assert (
        "gpu mapping: GPU(s) 1 through the nvidia runtime (not CDI: the daemon does not resolve CDI) (--gpus device=1)"
        in chosen
    )
    allocated = rebuild_text(loaded, options, code, host, {}, environ={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert (
        "GPU(s) 2, 3 through the nvidia runtime (not CDI: the daemon does not resolve CDI) (CUDA_VISIBLE_DEVICES=2,3 (scheduler allocation))"
        in allocated
    )
