"""The host checks are written once (checks/host_layer.py): the probe's host stage, host mode and doctor agree."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.checks.host_layer import ImageNeeds, compat_verdict, driver_fits, host_checks
from orchestrator.dossier.load import load_dossier
from orchestrator.engine import ImageInfo
from orchestrator.engine.fake import FakeEngine
from orchestrator.model.host import (
    AmdDriverFacts,
    AmdGpu,
    CompatVerdict,
    DockerGpuFacts,
    HostFacts,
    NvidiaDriverFacts,
    NvidiaGpu,
)
from orchestrator.pipeline.doctor import diagnose
from orchestrator.pipeline.host_mode import run_host_mode
from orchestrator.plan.build import default_tag
from orchestrator.plan.run import plan_gpu_mapping
from orchestrator.stages.host_stage import host_stage
from tests.paths import EXAMPLES

TINY = EXAMPLES / "tiny-embeddings"
H100 = NvidiaGpu(index=0, name="NVIDIA H100 80GB HBM3", compute_capability="9.0")
RUNTIME = DockerGpuFacts(runtimes=["nvidia", "runc"], nvidia_runtime=True)


def _nvidia(driver: str) -> HostFacts:
    return HostFacts(
        kernel="6.8",
        nvidia=NvidiaDriverFacts(source="nvml", driver_version=driver, gpus=[H100]),
        amd=None,
        docker=RUNTIME,
    )


def _no_torch(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(argv, 1, "", "ModuleNotFoundError: No module named 'torch'")


@pytest.mark.parametrize("status", ["supported", "minor-version-compat"])
def test_a_driver_fits_when_supported_or_through_minor_version_compat(status: str) -> None:
    assert driver_fits(CompatVerdict(status=status, explanation=""))  # type: ignore[arg-type]


@pytest.mark.parametrize("status", ["forward-compat-possible", "unsupported", "no-driver", "unknown"])
def test_a_driver_does_not_fit_otherwise(status: str) -> None:
    assert not driver_fits(CompatVerdict(status=status, explanation=""))  # type: ignore[arg-type]


@pytest.mark.parametrize(("driver", "fits"), [("580.65.06", True), ("470.82.01", False)])
def test_host_stage_host_mode_and_doctor_agree_on_one_host(driver: str, fits: bool) -> None:
    loaded = load_dossier(TINY / "dossier-cuda.yaml")
    host = _nvidia(driver)
    image = ImageInfo(
        id="sha256:" + "1" * 64,
        tags=(default_tag(loaded),),
        labels={},
        env={"CUDA_VERSION": "12.4.1"},
        repo_digests=(),
        size=0,
    )
    stage, verdict, _ = host_stage(loaded, host, image, None)
    mode, _ = run_host_mode("cuda", "12.4", "python3", host_facts=lambda: host, run=_no_torch)
    doctor = diagnose(FakeEngine(images=[image]), loaded, host_facts=lambda info: host)
    assert (stage.status == "passed") is fits
    assert (mode.status == "passed") is fits
    assert doctor.can_run is fits
    assert doctor.compatibility is not None and doctor.compatibility.status == verdict.status
    in_stage = {check.name: check.passed for check in stage.checks}
    in_mode = {check.name: check.passed for check in mode.checks}
    assert in_mode == {name: passed for name, passed in in_stage.items() if name != "daemon can map NVIDIA GPUs"}


def test_host_mode_without_a_version_checks_only_that_a_driver_is_there() -> None:
    host, _ = run_host_mode("cuda", None, "python3", host_facts=lambda: _nvidia("580.65.06"), run=_no_torch)
    assert [check.name for check in host.checks] == ["NVIDIA driver present"] and host.status == "passed"


def test_an_amd_host_without_kfd_fails_the_driver_check_everywhere() -> None:
    host = HostFacts(
        kernel="6.8",
        nvidia=None,
        amd=AmdDriverFacts(source="sysfs", driver_version=None, gpus=[AmdGpu(node=1, gfx_target="gfx942")]),
        docker=None,
        kfd_present=False,
    )
    needs = ImageNeeds(rocm="6.2")
    verdict = compat_verdict("rocm", host, needs, cpu_variant=None)
    checks = host_checks("rocm", host, needs, verdict, plan_gpu_mapping("rocm", host))
    # Issue 11 adds the access check (/dev/kfd, render nodes, gids): it fails too, naming /dev/kfd.
    assert [check.passed for check in checks] == [False, False, False]
    assert "/dev/kfd is missing" in checks[2].observed
    mode, _ = run_host_mode("rocm", "6.2", "python3", host_facts=lambda: host, run=_no_torch)
    assert mode.status == "failed" and mode.first_error is not None
    assert mode.first_error.step == "AMD GPU driver present"


def test_doctor_takes_the_cuda_of_a_not_yet_built_image_from_the_dossier(tmp_path: Path) -> None:
    loaded = load_dossier(TINY / "dossier-cuda.yaml")
    diagnosis = diagnose(FakeEngine(), loaded, host_facts=lambda info: _nvidia("470.82.01"))
    assert diagnosis.image is None and diagnosis.compatibility is not None
    assert diagnosis.compatibility.image_requirement == "cuda>=12.4"


def test_host_mode_explains_a_probe_that_died_with_a_catalogued_message() -> None:
    # https://github.com/pytorch/pytorch/issues/35710: the fabric manager missing on an NVSwitch machine.
    stderr = "RuntimeError: cuda runtime error (802) : system not yet initialized at THCGeneral.cpp:50\n"

    def died(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", stderr)

    _, device = run_host_mode("cuda", "12.4", "python3", host_facts=lambda: _nvidia("580.65.06"), run=died)
    assert device.status == "failed" and device.first_error is not None
    assert "Known cause: CUDA refuses work until the system is initialised" in device.first_error.message
    assert device.model_dump(mode="json")["facts"]["explanations"][0]["id"] == "cuda-system-not-ready"
