"""Arch coverage before running (image arch list vs host GPUs), AMD access checks, and legacy KFD nodes."""

from __future__ import annotations

from orchestrator.checks.amd_access import amd_access_findings
from orchestrator.checks.arch_coverage import cuda_arch_coverage, rocm_arch_coverage
from orchestrator.host.amd import kfd_gfx_target, parse_kfd_properties
from orchestrator.model.host import AmdDriverFacts, AmdGpu, HostFacts

CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


def test_a_blackwell_consumer_gpu_on_a_cu126_build_has_no_kernels() -> None:
    finding = cuda_arch_coverage(CU126, "NVIDIA GeForce RTX 5090", "12.0")
    assert finding.coverage == "none"
    assert "no kernels for it" in finding.sentence and "sm_120" in finding.gpu


def test_ptx_lets_a_newer_gpu_jit_with_a_slow_first_run() -> None:
    finding = cuda_arch_coverage([*CU126, "compute_90"], "NVIDIA GeForce RTX 5090", "12.0")
    assert finding.coverage == "ptx-jit"
    assert "PTX for sm_90 can be JIT-compiled" in finding.sentence and "slow first run" in finding.sentence


def test_sass_runs_on_the_same_major_with_a_higher_minor_but_arch_specific_variants_do_not() -> None:
    assert cuda_arch_coverage(["sm_80"], "NVIDIA GeForce RTX 3090", "8.6").coverage == "sass"
    assert cuda_arch_coverage(["sm_90a"], "NVIDIA H100", "9.0").coverage == "sass"
    assert cuda_arch_coverage(["sm_90a"], "NVIDIA GH200 (hypothetical 9.1)", "9.1").coverage == "none"
    assert cuda_arch_coverage(["sm_86"], "NVIDIA A100", "8.0").coverage == "none"


def test_rocm_needs_the_exact_gfx_target() -> None:
    assert rocm_arch_coverage(["gfx90a:xnack-", "gfx942"], "gfx942").coverage == "sass"
    finding = rocm_arch_coverage(["gfx90a", "gfx942"], "gfx1030")
    assert finding.coverage == "none" and "hipErrorNoBinaryForGpu" in finding.sentence


def _amd_host(**kwargs: object) -> HostFacts:
    base: dict[str, object] = {
        "kernel": "6.8",
        "nvidia": None,
        "amd": AmdDriverFacts(source="kfd", driver_version=None, gpus=[AmdGpu(node=1, gfx_target="gfx1030")]),
        "docker": None,
        "kfd_present": True,
        "dri_render_nodes": ["/dev/dri/renderD128"],
        "video_gid": 44,
        "render_gid": 993,
    }
    base.update(kwargs)
    return HostFacts(**base)  # type: ignore[arg-type]


def test_a_healthy_amd_host_has_no_findings() -> None:
    assert amd_access_findings(_amd_host(), {}) == []


def test_hsa_override_is_recorded_and_flagged() -> None:
    findings = amd_access_findings(_amd_host(), {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"})
    assert [f.severity for f in findings] == ["warning"]
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in findings[0].sentence and "gfx1030" in findings[0].sentence


def test_missing_kfd_render_nodes_and_groups_are_named() -> None:
    findings = amd_access_findings(_amd_host(kfd_present=False, dri_render_nodes=[], render_gid=None), {})
    text = " ".join(f.sentence for f in findings)
    assert "/dev/kfd is missing" in text and "renderD" in text and "`render` group" in text


def test_a_legacy_kfd_node_gets_its_gfx_target_from_the_device_id_table() -> None:
    legacy = parse_kfd_properties("simd_count 256\nvendor_id 4098\ndevice_id 26720\n")
    assert kfd_gfx_target(legacy) == "gfx900"
    assert kfd_gfx_target(parse_kfd_properties("cpu_cores_count 12\nsimd_count 0\n")) is None
    assert kfd_gfx_target(parse_kfd_properties("simd_count 64\ndevice_id 1\n")) is None  # unknown device
    assert kfd_gfx_target(parse_kfd_properties("gfx_target_version 0\nsimd_count 0\n")) is None


def test_the_host_stage_says_before_running_that_the_image_has_no_kernels_for_a_gpu() -> None:
    from orchestrator.checks.host_layer import ImageNeeds, arch_coverage_check
    from orchestrator.model.host import NvidiaDriverFacts, NvidiaGpu

    gpu = NvidiaGpu(index=0, name="NVIDIA GeForce RTX 5090", compute_capability="12.0")
    host = HostFacts(
        kernel="6.8",
        nvidia=NvidiaDriverFacts(source="nvidia-smi", driver_version="575.51.03", gpus=[gpu]),
        amd=None,
        docker=None,
    )
    check = arch_coverage_check("cuda", host, tuple(CU126))
    assert check is not None and not check.passed
    assert check.detail is not None and "no kernels for it" in check.detail
    jit = arch_coverage_check("cuda", host, (*CU126, "compute_90"))
    assert jit is not None and jit.passed and "slow first run" in (jit.detail or "")
    assert arch_coverage_check("cuda", host, ()) is None
    assert ImageNeeds().arch_list == ()
