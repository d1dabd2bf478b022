from __future__ import annotations

import pytest

from orchestrator.checks.host import (
    cuda_verdict,
    gpu_datacenter,
    parse_require_cuda,
    require_cuda_driver_branches,
    rocm_kmd_support,
    rocm_verdict,
)
from orchestrator.host.nvidia import parse_proc_version
from orchestrator.model.host import AmdDriverFacts, AmdGpu, NvidiaDriverFacts

# NVIDIA_REQUIRE_CUDA of nvidia/cuda:12.4.1 (gpu-domain.md §4.2), its first clauses.
REQUIRE_12_4 = "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471"
REQUIRE_12_4_MORE = REQUIRE_12_4 + " brand=tesla,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536"


def host(driver: str | None, source: str = "nvml") -> NvidiaDriverFacts:
    return NvidiaDriverFacts.model_validate({"source": source, "driver_version": driver})


# ------------------------------------------------------------------------------------ NVIDIA_REQUIRE_CUDA


@pytest.mark.parametrize(
    ("value", "minimum"),
    [
        (REQUIRE_12_4, "12.4"),
        ("cuda>=13.0 brand=tesla,driver>=535,driver<536 brand=tesla,driver>=570,driver<571", "13.0"),
        ("cuda>=11.8", "11.8"),
        ("cuda>=12.4,driver>=550 cuda>=12.1", "12.1"),  # OR of two alternatives: the lower one suffices
        ("brand=tesla,driver>=470,driver<471", None),
        ("", None),
    ],
)
def test_parse_require_cuda(value: str, minimum: str | None) -> None:
    assert parse_require_cuda(value) == minimum


def test_forward_compat_branches_of_the_requirement() -> None:
    assert require_cuda_driver_branches(REQUIRE_12_4_MORE) == [470, 535]
    assert require_cuda_driver_branches("cuda>=12.4") == []


# ------------------------------------------------------------------------------------------- CUDA verdict


@pytest.mark.parametrize(
    ("image_cuda", "require", "driver", "status"),
    [
        ("12.4.1", None, "550.54.14", "supported"),  # exactly the bundled driver
        ("12.4.1", None, "550.54.13", "minor-version-compat"),  # one patch below it
        ("12.4", None, "535.104.05", "minor-version-compat"),
        ("12.4", None, "525.60.13", "minor-version-compat"),  # exactly the 12.x floor
        ("12.4", None, "520.61.05", "unsupported"),
        ("12.6", None, "580.65.06", "supported"),  # a newer branch runs older toolkits
        ("12.8", None, "570.26", "supported"),  # a two-part bundled version
        ("11.8", None, "450.80.02", "minor-version-compat"),
        ("11.8", None, "450.80.01", "unsupported"),
        ("13.0", None, "550.54.14", "unsupported"),
        ("13.0", None, "580", "minor-version-compat"),  # "580" < "580.65.06" but ≥ the floor "580"
        ("13.0", None, "580.65.06", "supported"),
        ("13.0", None, "580.95.05", "supported"),
        ("13.1", None, "580.95.05", "minor-version-compat"),
        ("13.1", None, "590.44.01", "supported"),
        (None, REQUIRE_12_4, "550.54.14", "supported"),  # the requirement alone is enough
        (None, "12.4", "535.54.03", "minor-version-compat"),  # a bare version as requirement
        ("13.0", REQUIRE_12_4, "550.54.14", "unsupported"),  # a cu130 torch in a 12.4 base: 13.0 governs
        ("14.0", None, "590.44.01", "unknown"),  # a major the table does not know
        ("11.2", None, "460.27.04", "supported"),  # the table reaches back to CUDA 10.0 (issue 11)
        ("11.2", None, "455.32", "minor-version-compat"),
    ],
)
def test_cuda_verdict_over_the_table(image_cuda: str | None, require: str | None, driver: str, status: str) -> None:
    verdict = cuda_verdict(image_cuda, require, host(driver))
    assert verdict.status == status, verdict.explanation
    assert verdict.host_driver == driver


def test_unsupported_explains_what_to_do() -> None:
    verdict = cuda_verdict("13.0", None, host("550.54.14"))
    assert verdict.image_requirement == "cuda>=13.0"
    assert verdict.explanation.startswith(
        "The image needs CUDA 13.0, which needs NVIDIA driver ≥ 580.65.06 (≥ 580 with minor-version compatibility); "
        "this host has 550.54.14. Update the driver to 580 or newer, or rebuild for CUDA 12.4 (torch cu124)"
    )
    assert "other CUDA 12.x builds run through minor-version compatibility" in verdict.explanation


def test_unsupported_without_a_fully_supported_toolkit_points_at_minor_compat() -> None:
    verdict = cuda_verdict("12.4", None, host("510.47.03"))
    assert verdict.status == "unsupported"
    # The table now has the 11.x rows (issue 11): the advice names the newest 11.x this driver fully runs.
    assert "Update the driver to 525.60.13 or newer, or rebuild for CUDA 11.6 (torch cu116)" in verdict.explanation


def test_minor_compat_names_its_caveats() -> None:
    text = cuda_verdict("12.6", None, host("550.54.14")).explanation
    assert "no PTX JIT" in text and "cudaErrorCallRequiresNewerDriver" in text
    assert "Update the driver to 560.28.03 or newer" in text


def test_a_missing_minor_uses_the_one_before_and_says_so() -> None:
    verdict = cuda_verdict("12.7", None, host("560.28.03"))
    assert verdict.status == "supported"
    assert "CUDA 12.7 is not in orch's table; the figures are those of CUDA 12.6" in verdict.explanation


def test_a_minor_newer_than_the_table_only_vouches_for_minor_compat() -> None:
    verdict = cuda_verdict("12.10", None, host("575.51.03"))
    assert verdict.status == "minor-version-compat"
    assert "CUDA 12.10 is newer than orch's table; the figures are those of CUDA 12.9" in verdict.explanation
    # a 13.0 driver runs every 12.x: full support, proven by the later release's bundled driver
    assert cuda_verdict("12.10", None, host("580.65.06")).status == "supported"


def test_open_module_driver_string_from_procfs() -> None:
    line = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16-…)  <date>"
    )
    version, flavour = parse_proc_version(line + "\n")
    facts = NvidiaDriverFacts(source="procfs", driver_version=version, kernel_module=flavour)
    assert cuda_verdict("13.0", None, facts).status == "supported"
    assert cuda_verdict("13.1", None, facts).status == "minor-version-compat"


def test_forward_compat_needs_a_datacenter_gpu_and_compat_libs() -> None:
    old = host("535.104.05")
    new_enough = cuda_verdict("12.8", None, old, datacenter_gpu=True, image_has_compat_libs=True)
    assert new_enough.status == "minor-version-compat"  # 535 ≥ the 12.x floor: no forward compat needed
    too_old = host("470.82.01")
    assert cuda_verdict("12.4", REQUIRE_12_4, too_old, datacenter_gpu=True, image_has_compat_libs=True).status == (
        "forward-compat-possible"
    )
    assert cuda_verdict("12.4", REQUIRE_12_4, too_old, datacenter_gpu=False, image_has_compat_libs=True).status == (
        "unsupported"
    )
    assert cuda_verdict("12.4", REQUIRE_12_4, too_old, datacenter_gpu=True, image_has_compat_libs=False).status == (
        "unsupported"
    )


def test_forward_compat_outside_the_images_branches_is_refused() -> None:
    verdict = cuda_verdict(
        "12.4", REQUIRE_12_4_MORE, host("510.47.03"), datacenter_gpu=True, image_has_compat_libs=True
    )
    assert verdict.status == "unsupported"
    assert "only on the R470, R535 branches" in verdict.explanation and "R510" in verdict.explanation


def test_no_driver() -> None:
    verdict = cuda_verdict("12.4.1", REQUIRE_12_4, None)
    assert verdict.status == "no-driver"
    assert "Install an NVIDIA driver ≥ 550.54.14" in verdict.explanation
    assert verdict.host_driver is None and verdict.image_requirement == "cuda>=12.4"


@pytest.mark.parametrize(
    ("image_cuda", "require", "facts"),
    [
        (None, None, host("550.54.14")),  # the image states nothing
        ("12.4", None, host(None, source="procfs")),  # a driver whose version could not be read
        ("12.4", None, host("garbage")),
        ("not-a-version", "brand=tesla,driver>=470", host("550.54.14")),
    ],
)
def test_unknown(image_cuda: str | None, require: str | None, facts: NvidiaDriverFacts) -> None:
    assert cuda_verdict(image_cuda, require, facts).status == "unknown"


@pytest.mark.parametrize(
    ("name", "datacenter"),
    [
        ("NVIDIA H100 80GB HBM3", True),
        ("NVIDIA H200", True),
        ("NVIDIA A100-SXM4-80GB", True),
        ("NVIDIA A10G", True),
        ("NVIDIA L40S", True),
        ("NVIDIA L4", True),
        ("NVIDIA GH200 480GB", True),
        ("NVIDIA B200", True),
        ("Tesla T4", True),
        ("Tesla V100-SXM2-16GB", True),
        ("NVIDIA GeForce RTX 4090", False),
        ("NVIDIA GeForce GTX 1080 Ti", False),
        ("NVIDIA RTX A6000", False),
        ("NVIDIA RTX 6000 Ada Generation", False),
        ("Quadro RTX 8000", False),
        ("NVIDIA TITAN RTX", False),
        ("Some Future GPU", False),
    ],
)
def test_gpu_datacenter_heuristic(name: str, datacenter: bool) -> None:
    assert gpu_datacenter(name) is datacenter


# ------------------------------------------------------------------------------------------- ROCm verdict

MI300X = AmdGpu(node=1, gfx_target="gfx942", vendor_id=4098)


def amd(driver: str | None, rocm: str | None, gpus: list[AmdGpu] | None = None) -> AmdDriverFacts:
    return AmdDriverFacts(
        source="sysfs", driver_version=driver, rocm_version=rocm, gpus=[MI300X] if gpus is None else gpus
    )


def test_rocm_table_is_the_documented_matrix() -> None:
    table = rocm_kmd_support()
    assert table["6.2"] == ("6.0", "6.1", "6.2", "6.3", "6.4")
    assert table["5.3"] == ("5.1", "5.2", "5.3", "5.4", "5.5")


@pytest.mark.parametrize(
    ("image", "host_rocm", "status"),
    [
        ("6.2.4", "6.2.0", "supported"),
        ("rocm6.2", "6.2.0", "supported"),
        ("6.4", "6.2.0", "supported"),
        ("6.0", "6.2.0", "supported"),
        ("5.7", "6.2.0", "unsupported"),
        ("7.0", "6.2.0", "unsupported"),
        ("6.2", "7.0.2", "unknown"),  # a KMD release past orch's table
    ],
)
def test_rocm_against_the_matrix(image: str, host_rocm: str, status: str) -> None:
    verdict = rocm_verdict(image, amd("6.8.5", host_rocm), kfd_present=True)
    assert verdict.status == status, verdict.explanation


def test_rocm_unsupported_names_the_tested_releases() -> None:
    verdict = rocm_verdict("5.7", amd("6.8.5", "6.2.0"), kfd_present=True)
    assert "tested only with ROCm 6.0, 6.1, 6.2, 6.3, 6.4 user space" in verdict.explanation
    assert verdict.image_requirement == "ROCm 5.7" and verdict.host_driver == "amdgpu 6.8.5 (ROCm 6.2.0)"


def test_rocm_in_tree_driver_is_unknown() -> None:
    verdict = rocm_verdict("6.2", amd(None, None), kfd_present=True)
    assert verdict.status == "unknown" and "in-tree amdgpu driver" in verdict.explanation


def test_rocm_without_a_host_release_is_unknown() -> None:
    assert rocm_verdict("6.2", amd("6.8.5", None), kfd_present=True).status == "unknown"
    assert rocm_verdict(None, amd("6.8.5", "6.2.0"), kfd_present=True).status == "unknown"


def test_rocm_no_driver() -> None:
    assert rocm_verdict("6.2", None, kfd_present=False).status == "no-driver"
    assert rocm_verdict("6.2", None, kfd_present=True).status == "no-driver"
    assert rocm_verdict("6.2", amd("6.8.5", "6.2.0", gpus=[]), kfd_present=True).status == "no-driver"
    missing_kfd = rocm_verdict("6.2", amd("6.8.5", "6.2.0"), kfd_present=False)
    assert missing_kfd.status == "no-driver" and "/dev/kfd is missing" in missing_kfd.explanation
