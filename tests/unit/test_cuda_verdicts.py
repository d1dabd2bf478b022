"""The NVIDIA verdicts issue 11 lists, each a unit test, and the container toolkit's requirement evaluation
(libnvidia-container src/cli/dsl.c + configure.c semantics)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from orchestrator.checks.cuda_verdict import NvidiaHost, brand_from_name, needed_cuda, nvidia_verdict
from orchestrator.checks.host_layer import compat_verdict, driver_fits, image_needs
from orchestrator.checks.require_cuda import (
    DeviceFacts,
    RequireExpressionError,
    compare_version,
    evaluate_require,
    release_row,
)
from orchestrator.model.host import HostFacts, NvidiaDriverFacts

# The NVIDIA_REQUIRE_CUDA of nvidia/cuda:12.4.1 images (gpu-domain §4.2), abridged to its R470/R535 alternatives.
REQUIRE_1241 = (
    "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 "
    "brand=tesla,driver>=535,driver<536"
)
REQUIRE_128 = "cuda>=12.8 brand=tesla,driver>=470,driver<471 brand=tesla,driver>=535,driver<536"


def host(driver: str | None, cuda: str | None = None, **kwargs: object) -> NvidiaHost:
    return NvidiaHost(driver_version=driver, cuda_driver_version=cuda, **kwargs)  # type: ignore[arg-type]


def test_driver_470_runs_cuda_11_4() -> None:
    verdict = nvidia_verdict(host("470.57.02", "11.4"), "11.4")
    assert verdict.status == "supported"


def test_driver_470_runs_cuda_11_4_from_the_table_alone() -> None:
    # No reported CUDA version (e.g. read from /sys/module): Table 3's 11.4.0 GA row (470.42.01) decides.
    verdict = nvidia_verdict(host("470.57.02"), "11.4.0")
    assert (verdict.status, verdict.basis) == ("supported", "table")


def test_driver_535_runs_12_4_1_through_minor_version_compat() -> None:
    verdict = nvidia_verdict(host("535.183.01", "12.2"), "12.4.1")
    assert verdict.status == "minor-version-compat"
    assert "550.54.15" in verdict.explanation  # 12.4.1's own driver, not the GA's 550.54.14


def test_driver_550_54_15_fully_supports_12_4_1() -> None:
    verdict = nvidia_verdict(host("550.54.15", "12.4"), "12.4.1")
    assert (verdict.status, verdict.basis) == ("supported", "table")


def test_driver_550_54_14_is_only_minor_compat_for_12_4_1() -> None:
    assert nvidia_verdict(host("550.54.14", "12.4"), "12.4.1").status == "minor-version-compat"


def test_driver_570_86_15_runs_12_8_1_through_minor_version_compat_by_nvidias_table() -> None:
    # The driver reports CUDA 12.8, but Table 3 ships 12.8 Update 1 with 570.124.06.
    verdict = nvidia_verdict(host("570.86.15", "12.8"), "12.8.1")
    assert verdict.status == "minor-version-compat"
    assert "570.124.06" in verdict.explanation


@pytest.mark.parametrize(("driver", "cuda", "image"), [("595.45.04", "13.2", "13.2"), ("610.43.02", "13.3", "13.3.0")])
def test_new_drivers_are_judged_by_their_own_cuda_version(driver: str, cuda: str, image: str) -> None:
    verdict = nvidia_verdict(host(driver, cuda), image)
    assert (verdict.status, verdict.basis) == ("supported", "driver-cuda")


def test_a_13_3_image_on_r595_is_not_vouched_for() -> None:
    verdict = nvidia_verdict(host("595.45.04", "13.2"), "13.3")
    assert verdict.status == "minor-version-compat"  # 13.x floor (580) met, full support not proven


def test_cuda_12_8_image_on_driver_550_is_refused_by_the_toolkit_before_start() -> None:
    verdict = nvidia_verdict(
        host("550.144.03", "12.4", devices=[DeviceFacts("8.6", "geforcertx")]), "12.8.1", REQUIRE_128
    )
    assert verdict.status == "refused-by-toolkit"
    assert verdict.toolkit_error == (
        "requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a newer version, "
        "or use an earlier cuda container"
    )


def test_disable_require_skips_the_toolkit_check_and_the_table_still_judges() -> None:
    verdict = nvidia_verdict(host("550.144.03", "12.4"), "12.8.1", REQUIRE_128, disable_require="1")
    assert verdict.status == "minor-version-compat"


def test_jetson_is_its_own_case() -> None:
    verdict = nvidia_verdict(host(None, l4t_release="R35.3.1"), "11.4")
    assert verdict.status == "jetson"
    assert "L4T R35.3.1" in verdict.explanation


def test_a_jetson_known_only_from_nvidia_smis_gpu_name_is_its_own_case() -> None:
    # JetPack 6's nvidia-smi: "Driver Version: 540.4.0  CUDA Version: 12.6", GPU "Orin (nvgpu)", no L4T file.
    verdict = nvidia_verdict(host("540.4.0", "12.6", tegra_gpu="Orin (nvgpu)"), "12.4.1")
    assert verdict.status == "jetson"
    assert "'Orin (nvgpu)'" in verdict.explanation and "L4T release not captured" in verdict.explanation


def test_no_driver() -> None:
    assert nvidia_verdict(host(None), "12.4.1").status == "no-driver"


def test_forward_compat_only_on_data_centre_gpus() -> None:
    datacenter = nvidia_verdict(host("470.256.02", "11.4", datacenter_gpu=True), "12.4.1", image_has_compat_libs=True)
    consumer = nvidia_verdict(host("470.256.02", "11.4"), "12.4.1", image_has_compat_libs=True)
    assert datacenter.status == "forward-compat-possible"
    assert consumer.status == "unsupported"
    assert "only on data-centre GPUs" in consumer.explanation


def test_cuda_10_has_no_minor_version_compat() -> None:
    assert nvidia_verdict(host("410.48"), "10.1").status == "unsupported"
    assert nvidia_verdict(host("418.39"), "10.1.243").status == "supported"


# ------------------------------------------------------------------------------------ the toolkit's DSL


def test_versions_compare_field_by_field_with_trailing_zeros_equal() -> None:
    assert compare_version("12.4", "=", "12.4.0")
    assert compare_version("12.10", ">", "12.9")
    assert compare_version("535.183.01", "<", "536")
    with pytest.raises(RequireExpressionError):
        compare_version("12.4a", ">=", "12")


def test_space_separated_alternatives_are_ored_and_comma_conditions_anded() -> None:
    tesla = [DeviceFacts("9.0", "tesla")]
    geforce = [DeviceFacts("8.9", "geforce")]
    # R535 with a tesla GPU meets the forward-compat alternative although cuda>=12.4 fails.
    assert evaluate_require(REQUIRE_1241, "535.183.01", "12.2", tesla).satisfied
    # The same driver with a GeForce meets no alternative.
    outcome = evaluate_require(REQUIRE_1241, "535.183.01", "12.2", geforce)
    assert not outcome.satisfied
    assert outcome.error is not None and "unsatisfied condition: cuda>=12.4, please update" in outcome.error


def test_every_visible_device_must_pass() -> None:
    devices = [DeviceFacts("9.0", "tesla"), DeviceFacts("8.9", "geforce")]
    assert not evaluate_require(REQUIRE_1241, "535.183.01", "12.2", devices).satisfied


def test_unknown_facts_count_as_met_like_the_toolkit() -> None:
    outcome = evaluate_require("cuda>=12.8", "550.144.03", None)
    assert outcome.satisfied and outcome.assumed == ("cuda",)


def test_a_non_cuda_first_token_is_reported_plainly() -> None:
    outcome = evaluate_require("driver>=600", "550.144.03", "12.4")
    assert outcome.error == "requirement error: unsatisfied condition: driver>=600"


def test_unknown_keys_are_invalid_expressions() -> None:
    with pytest.raises(RequireExpressionError):
        evaluate_require("gpu>=1", "550.144.03", "12.4")


def test_table_rows_include_update_releases_with_their_own_drivers() -> None:
    row = release_row(Version("12.8.1"))
    assert row is not None and row.driver_text == "570.124.06" and row.release == "Update 1"
    assert release_row(Version("13.0.2")) is not None
    assert release_row(Version("12.7")) is None


def test_needed_cuda_is_the_higher_of_cuda_version_and_the_require_clause() -> None:
    assert needed_cuda("12.4.1", "cuda>=12.8 brand=tesla,driver>=535,driver<536") == Version("12.8")
    assert needed_cuda(None, None) is None


@pytest.mark.parametrize(
    ("name", "brand"),
    [("NVIDIA GeForce RTX 4090", "geforcertx"), ("NVIDIA H100 80GB HBM3", "tesla"), ("Quadro P2000", "quadro")],
)
def test_brand_from_product_name(name: str, brand: str) -> None:
    assert brand_from_name(name) == brand


def test_disable_require_is_a_go_boolean() -> None:
    from orchestrator.checks.require_cuda import disables_require

    assert disables_require("1") and disables_require("true") and disables_require("True")
    assert not disables_require("yes") and not disables_require("") and not disables_require(None)


def test_image_requirements_follow_the_toolkit() -> None:
    from orchestrator.checks.require_cuda import image_requirements

    # A legacy image (CUDA_VERSION, no NVIDIA_REQUIRE_CUDA) is checked against cuda>=major.minor.
    assert image_requirements({"CUDA_VERSION": "12.8.1"}) == ["cuda>=12.8"]
    # Every NVIDIA_REQUIRE_* but JETPACK is checked; the official image's own clause replaces the legacy rule.
    env = {
        "CUDA_VERSION": "12.8.1",
        "NVIDIA_REQUIRE_CUDA": "cuda>=12.8",
        "NVIDIA_REQUIRE_DRIVER": "driver>=550",
        "NVIDIA_REQUIRE_JETPACK": "csv-mounts=all",
    }
    assert image_requirements(env) == ["cuda>=12.8", "driver>=550"]
    assert image_requirements({**env, "NVIDIA_DISABLE_REQUIRE": "true"}) == []


def test_a_legacy_image_is_refused_from_its_cuda_version_alone() -> None:
    verdict = nvidia_verdict(host("550.144.03", "12.4"), "12.8.1", image_env={"CUDA_VERSION": "12.8.1"})
    assert verdict.status == "refused-by-toolkit"
    assert verdict.toolkit_error is not None and "cuda>=12.8" in verdict.toolkit_error


def _facts(driver: str | None, cuda: str | None = None, l4t: str | None = None) -> HostFacts:
    nvidia = NvidiaDriverFacts(source="nvidia-smi", driver_version=driver, cuda_driver_version=cuda) if driver else None
    return HostFacts(kernel="6.8", nvidia=nvidia, amd=None, docker=None, l4t_release=l4t)


def test_the_host_layer_says_the_toolkit_refuses_before_any_container_starts() -> None:
    needs = image_needs({"CUDA_VERSION": "12.8.1", "NVIDIA_REQUIRE_CUDA": REQUIRE_128}, None)
    verdict = compat_verdict("cuda", _facts("550.144.03", "12.4"), needs, cpu_variant=None)
    assert verdict.status == "refused-by-toolkit" and not driver_fits(verdict)
    assert "unsatisfied condition: cuda>=12.8" in verdict.explanation


def test_the_host_layer_reports_a_jetson_as_its_own_case() -> None:
    verdict = compat_verdict(
        "cuda", _facts(None, l4t="R35.3.1"), image_needs({"CUDA_VERSION": "11.4"}, None), cpu_variant=None
    )
    assert verdict.status == "jetson"


def test_the_host_layer_keeps_the_cpu_variant_advice_without_a_driver() -> None:
    verdict = compat_verdict("cuda", _facts(None), image_needs({"CUDA_VERSION": "12.4.1"}, None), cpu_variant="cpu")
    assert verdict.status == "no-driver" and "--variant cpu" in verdict.explanation
