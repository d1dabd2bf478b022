"""The host verdicts: NVIDIA (checks/cuda_verdict.py, the one home of that rule since issue 10's follow-up: the old
checks/host.py `cuda_verdict` and its second NVIDIA_REQUIRE_CUDA parser were merged into it) and ROCm
(checks/rocm_verdict.py, once checks/host.py). Where the merged verdict judges a case differently from the old
one, the case says so."""

from __future__ import annotations

import pytest
from packaging.version import Version

from orchestrator.checks.cuda_verdict import NvidiaHost, ToolkitVerdict, gpu_datacenter, nvidia_verdict
from orchestrator.checks.host_layer import ImageNeeds, compat_verdict
from orchestrator.checks.require_cuda import required_cuda
from orchestrator.checks.rocm_verdict import rocm_verdict
from orchestrator.host.nvidia import parse_proc_version
from orchestrator.model.host import AmdDriverFacts, AmdGpu, CompatVerdict, HostFacts, NvidiaDriverFacts
from orchestrator.vendor import rocm_kmd_support

# NVIDIA_REQUIRE_CUDA of nvidia/cuda:12.4.1 (gpu-domain.md §4.2), its first clauses.
REQUIRE_12_4 = "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471"
REQUIRE_12_4_MORE = REQUIRE_12_4 + " brand=tesla,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536"


def host(driver: str | None, datacenter_gpu: bool = False) -> NvidiaHost:
    """A host whose driver was found (through NVML) and reports no CUDA version: the table alone judges it."""
    return NvidiaHost(driver_version=driver, driver_source="nvml", datacenter_gpu=datacenter_gpu)


def verdict_of(
    image_cuda: str | None,
    require: str | None,
    nvidia: NvidiaDriverFacts | None,
    compat_libs: bool = False,
    cpu_variant: str | None = None,
) -> CompatVerdict:
    """Through the host layer, as the probe's host stage, host mode and doctor reach it."""
    facts = HostFacts(kernel="6.8", nvidia=nvidia, amd=None, docker=None)
    needs = ImageNeeds(cuda=image_cuda, require_cuda=require, cuda_compat_libs=compat_libs)
    return compat_verdict("cuda", facts, needs, cpu_variant=cpu_variant)


def facts(driver: str | None, source: str = "nvml") -> NvidiaDriverFacts:
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
def test_required_cuda(value: str, minimum: str | None) -> None:
    assert required_cuda(value) == (Version(minimum) if minimum else None)


def test_forward_compat_branches_of_the_requirement_are_the_toolkits_alternatives() -> None:
    # The old `require_cuda_driver_branches` listed R470/R535; the toolkit's own evaluation now decides: R535 with a
    # data-centre GPU meets an alternative, R510 meets none and the toolkit refuses (see the test below).
    tesla = NvidiaHost(driver_version="535.104.05", driver_source="nvml", datacenter_gpu=True)
    assert nvidia_verdict(tesla, "12.4", REQUIRE_12_4_MORE, image_has_compat_libs=True).status == "minor-version-compat"


# ------------------------------------------------------------------------------------------- CUDA verdict


@pytest.mark.parametrize(
    ("image_cuda", "require", "driver", "status"),
    [
        # Intended difference: 12.4.1 is judged by its own Table 3 row (550.54.15, issue 11), no longer by the
        # 12.4 GA driver 550.54.14 the old verdict used.
        ("12.4.1", None, "550.54.15", "supported"),  # exactly 12.4.1's driver
        ("12.4.1", None, "550.54.14", "minor-version-compat"),  # the GA driver, one patch below it
        ("12.4.1", None, "550.54.13", "minor-version-compat"),
        ("12.4", None, "550.54.14", "supported"),  # exactly the 12.4 GA driver
        ("12.4", None, "535.104.05", "minor-version-compat"),
        ("12.4", None, "525.60.13", "minor-version-compat"),  # exactly the 12.x floor
        ("12.4", None, "520.61.05", "unsupported"),
        ("12.6", None, "580.65.06", "supported"),  # a newer branch runs older toolkits
        ("12.3.2", None, "550.54.14", "supported"),  # a release without a row: a later minor's driver proves it
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
        ("13.0", REQUIRE_12_4, "550.54.14", "unsupported"),  # a cu130 torch in a 12.4 base: 13.0 governs
        ("14.0", None, "590.44.01", "unknown"),  # a major the table does not know, no reported CUDA
        ("11.2", None, "460.27.04", "supported"),  # the table reaches back to CUDA 10.0 (issue 11)
        ("11.2", None, "455.32", "minor-version-compat"),
        # Dropped: (None, "12.4", "535.54.03") — a bare version as the requirement was how the host layer handed
        # the old parser's output to the old verdict; NVIDIA_REQUIRE_CUDA is now read in one place only, and the
        # toolkit reads a bare "12.4" as an invalid expression (test_an_unreadable_requirement_is_the_toolkits_refusal).
    ],
)
def test_cuda_verdict_over_the_table(image_cuda: str | None, require: str | None, driver: str, status: str) -> None:
    verdict = verdict_of(image_cuda, require, facts(driver))
    assert verdict.status == status, verdict.explanation
    assert verdict.host_driver == driver


def test_unsupported_explains_what_to_do() -> None:
    verdict = verdict_of("13.0", None, facts("550.54.14"))
    assert verdict.image_requirement == "cuda>=13.0"
    assert verdict.explanation.startswith(
        "The image needs CUDA 13.0, which needs NVIDIA driver ≥ 580.65.06 (≥ 580 with minor-version compatibility); "
        "this host has 550.54.14. Update the driver to 580 or newer, or rebuild for CUDA 12.4 (torch cu124)"
    )
    assert "other CUDA 12.x builds run through minor-version compatibility" in verdict.explanation


def test_unsupported_without_a_fully_supported_toolkit_points_at_minor_compat() -> None:
    verdict = nvidia_verdict(host("510.47.03"), "12.4")
    assert verdict.status == "unsupported"
    # The table has the 11.x rows (issue 11): the advice names the newest 11.x this driver fully runs.
    assert "Update the driver to 525.60.13 or newer, or rebuild for CUDA 11.6 (torch cu116)" in verdict.explanation


def test_minor_compat_names_its_caveats() -> None:
    text = nvidia_verdict(host("550.54.14"), "12.6").explanation
    assert "no PTX JIT" in text and "cudaErrorCallRequiresNewerDriver" in text
    assert "Update the driver to 560.28.03 or newer" in text


def test_a_release_the_table_lacks_is_not_judged_by_another_releases_figures() -> None:
    # Intended difference: the old verdict judged a missing minor (12.7, which NVIDIA never released) by the one
    # before it and called 560.28.03 "supported". The merged verdict borrows no other release's figures: without a
    # row, a reported CUDA or a later minor's driver, the major's floor vouches for minor-version compatibility only.
    verdict = nvidia_verdict(host("560.28.03"), "12.7")
    assert verdict.status == "minor-version-compat"
    assert "a newer driver (not in orch's table)" in verdict.explanation
    # ... and the driver's own CUDA version settles it when the driver reports one.
    reported = NvidiaHost(driver_version="565.57.01", driver_source="nvidia-smi", cuda_driver_version="12.7")
    assert (nvidia_verdict(reported, "12.7").status, nvidia_verdict(reported, "12.7").basis) == (
        "supported",
        "driver-cuda",
    )


def test_a_minor_newer_than_the_table_only_vouches_for_minor_compat() -> None:
    verdict = nvidia_verdict(host("575.51.03"), "12.10")
    assert (verdict.status, verdict.basis) == ("minor-version-compat", "floor")
    assert "a newer driver (not in orch's table)" in verdict.explanation
    # a 13.0 driver runs every 12.x: full support, proven by the later release's shipped driver
    later = nvidia_verdict(host("580.65.06"), "12.10")
    assert (later.status, later.basis) == ("supported", "table")
    assert "the later CUDA 13.0.0 (GA) ships with" in later.explanation


def test_open_module_driver_string_from_procfs() -> None:
    line = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16-…)  <date>"
    )
    version, flavour = parse_proc_version(line + "\n")
    procfs = NvidiaDriverFacts(source="procfs", driver_version=version, kernel_module=flavour)
    assert verdict_of("13.0", None, procfs).status == "supported"
    assert verdict_of("13.1", None, procfs).status == "minor-version-compat"


def test_forward_compat_needs_a_datacenter_gpu_and_compat_libs() -> None:
    new_enough = nvidia_verdict(host("535.104.05", datacenter_gpu=True), "12.8", image_has_compat_libs=True)
    assert new_enough.status == "minor-version-compat"  # 535 ≥ the 12.x floor: no forward compat needed
    too_old_dc = host("470.82.01", datacenter_gpu=True)
    too_old = host("470.82.01")
    assert nvidia_verdict(too_old_dc, "12.4", REQUIRE_12_4, image_has_compat_libs=True).status == (
        "forward-compat-possible"
    )
    assert nvidia_verdict(too_old, "12.4", REQUIRE_12_4, image_has_compat_libs=True).status == "unsupported"
    assert nvidia_verdict(too_old_dc, "12.4", REQUIRE_12_4, image_has_compat_libs=False).status == "unsupported"


def test_forward_compat_outside_the_images_branches_is_refused() -> None:
    # Intended difference: the old verdict said "unsupported" with its own reading of the R470/R535 alternatives;
    # the merged verdict evaluates the expression as the toolkit does and says what the toolkit will say.
    verdict = nvidia_verdict(
        host("510.47.03", datacenter_gpu=True), "12.4", REQUIRE_12_4_MORE, image_has_compat_libs=True
    )
    assert verdict.status == "refused-by-toolkit"
    assert verdict.toolkit_error is not None and "unsatisfied condition: cuda>=12.4" in verdict.toolkit_error
    assert "510.47.03" in verdict.explanation


def test_an_unreadable_requirement_is_the_toolkits_refusal() -> None:
    verdict = nvidia_verdict(host("550.54.14"), "12.4", "12.4")
    assert verdict.status == "refused-by-toolkit"
    assert verdict.toolkit_error == "requirement error: invalid expression"


def test_no_driver() -> None:
    verdict = verdict_of("12.4.1", REQUIRE_12_4, None)
    assert verdict.status == "no-driver"
    # 12.4.1's own driver (Table 3), no longer the 12.4 GA driver 550.54.14 (an intended difference, as above).
    assert "Install an NVIDIA driver ≥ 550.54.15" in verdict.explanation
    assert verdict.host_driver is None and verdict.image_requirement == "cuda>=12.4.1"


@pytest.mark.parametrize(
    ("cpu_variant", "advice"),
    [
        ("cpu", "or run the dossier's declared CPU variant on purpose (--variant cpu)."),
        (None, "or, to run without this GPU, declare a CPU variant in the dossier (this dossier declares no CPU"),
    ],
)
def test_no_driver_keeps_its_wording(cpu_variant: str | None, advice: str) -> None:
    verdict = verdict_of("12.4", None, None, cpu_variant=cpu_variant)
    assert verdict.explanation.startswith(
        "The image needs CUDA 12.4, but this host has no NVIDIA driver (NVML, nvidia-smi, /sys/module/nvidia/version "
        "and /proc/driver/nvidia/version found nothing). Install an NVIDIA driver ≥ 550.54.14, "
    )
    assert advice in verdict.explanation


@pytest.mark.parametrize(
    ("image_cuda", "require", "nvidia"),
    [
        (None, None, facts("550.54.14")),  # the image states nothing
        ("12.4", None, facts(None, source="procfs")),  # a driver whose version could not be read
        ("12.4", None, facts("garbage")),
        ("12.4", "cuda>=12.4 driver>=470", facts("garbage")),  # an unreadable driver is an unknown fact, no crash
        ("not-a-version", "brand=tesla,driver>=470", facts("550.54.14")),
    ],
)
def test_unknown(image_cuda: str | None, require: str | None, nvidia: NvidiaDriverFacts) -> None:
    verdict = verdict_of(image_cuda, require, nvidia)
    assert verdict.status == "unknown", verdict.explanation


def test_a_driver_without_a_version_is_not_no_driver() -> None:
    verdict: ToolkitVerdict = nvidia_verdict(NvidiaHost(driver_version=None, driver_source="procfs"), "12.4")
    assert verdict.status == "unknown" and "(source: procfs)" in verdict.explanation


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


def test_a_host_known_only_from_rocminfo_has_an_unknown_driver_not_an_in_tree_one() -> None:
    known_from_rocminfo = amd(None, None).model_copy(update={"source": "rocminfo"})
    verdict = rocm_verdict("6.2", known_from_rocminfo, kfd_present=True)
    assert verdict.status == "unknown"
    assert "version is unknown" in verdict.explanation and "in-tree" not in verdict.explanation
    assert verdict.host_driver == "amdgpu (version unknown)"


def test_rocm_without_a_host_release_is_unknown() -> None:
    assert rocm_verdict("6.2", amd("6.8.5", None), kfd_present=True).status == "unknown"
    assert rocm_verdict(None, amd("6.8.5", "6.2.0"), kfd_present=True).status == "unknown"


def test_rocm_no_driver() -> None:
    assert rocm_verdict("6.2", None, kfd_present=False).status == "no-driver"
    assert rocm_verdict("6.2", None, kfd_present=True).status == "no-driver"
    assert rocm_verdict("6.2", amd("6.8.5", "6.2.0", gpus=[]), kfd_present=True).status == "no-driver"
    missing_kfd = rocm_verdict("6.2", amd("6.8.5", "6.2.0"), kfd_present=False)
    assert missing_kfd.status == "no-driver" and "/dev/kfd is missing" in missing_kfd.explanation
