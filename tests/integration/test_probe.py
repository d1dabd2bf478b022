"""`orch probe` on the real engine, CPU-only machine: four layers, real checks, real failures."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from orchestrator.dossier.load import file_sha256, load_dossier
from orchestrator.engine import Engine
from orchestrator.model.report import Report
from orchestrator.report.write import read_report
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.execute import run_build, run_probe
from orchestrator.stages.probe import ProbeOptions
from tests.integration.helpers import orch, session_containers
from tests.paths import EXAMPLES

TINY = EXAMPLES / "tiny-embeddings"


def _build_and_probe(engine: Engine, dossier: Path, out: Path, variant: str | None = None) -> Report:
    loaded = load_dossier(dossier, variant=variant)
    record = run_build(loaded, engine, BuildOptions(out=out))
    assert record.image is not None, record.failure
    return run_probe(loaded, engine, ProbeOptions(out=out))


@pytest.fixture(scope="module")
def cpu_report(
    engine: Engine, base_image: BaseOutcome, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("rebuild-cpu")
    before = session_containers()
    result = orch("rebuild", str(TINY / "dossier.yaml"), "--out", str(out))
    assert session_containers() == before, "orch rebuild left containers behind"
    return out, result


def test_cpu_example_passes_all_four_stages(cpu_report: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, result = cpu_report
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(out / "report.json")
    assert report.verdict == "passed"
    assert [(name, stage.status) for name, stage in report.stages.items()] == [
        ("image", "passed"),
        ("host", "passed"),
        ("device", "passed"),
        ("sample", "passed"),
    ]
    sample = {check.name: check for check in report.stage("sample").checks}
    # The criterion holds; its observed value depends on the CPU (the reference was made on another one).
    cosine = sample["embeddings: cosine vs reference/embeddings.npy"]
    assert cosine.passed and cosine.observed.startswith("min cosine = ")
    assert sample["embeddings: identifiers"].observed == "12 ids, same order"
    assert sample["input sample/sample.jsonl fingerprint"].passed
    device = {check.name: check for check in report.stage("device").checks}
    assert device["matmul on cpu matches float64"].passed and device["torch is a CPU build"].passed
    determinism = report.stage("sample").facts.recorded()["determinism"]
    assert determinism["deterministic_algorithms"] is True and determinism["tf32_matmul"] is False
    # The output the sample stage judged is the one the container wrote, kept in the run's folder; its
    # bytes are not compared with the reference's (another CPU's kernels give other last bits).
    observed = np.load(out / "sample-output" / "embeddings.npy")
    assert observed.shape == (12, 16) and observed.dtype == np.float32 and np.isfinite(observed).all()
    junit = ET.parse(out / "junit.xml").getroot()
    assert int(junit.get("failures", "-1")) == 0 and int(junit.get("tests", "0")) >= 15
    assert (out / "report.md").is_file() and (out / "report.html").is_file()


def test_the_rebuild_report_is_honest_about_time_inventory_and_cpu(
    cpu_report: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, result = cpu_report
    report = read_report(out / "report.json")
    image = report.stage("image")
    build_s = json.loads((out / "build.json").read_text())["durations_s"]["total"]
    assert image.duration_s >= build_s > 0, "the image stage of orch rebuild counts the build it made"
    assert image.facts.recorded()["build_seconds"] == build_s
    # The example carries its reference inventory (issue 24): compared, shown in figures, nothing warned. A dossier
    # without one warns in every format (tests/unit/test_image_stage_report.py).
    assert image.warnings == []
    inventory = next(check for check in image.checks if check.name == "inventory matches the reference")
    assert inventory.passed and inventory.observed == "identical: 0 added, 0 removed, 0 changed"
    assert "identical: 0 added, 0 removed, 0 changed" in (out / "report.md").read_text()
    assert "warning (image)" not in result.stdout
    cpu = report.stage("host").facts.recorded()["cpu"]
    assert cpu["logical_cpus"] >= 1 and "sse4_2" in cpu["isa_flags"]
    capability = report.stage("device").facts.recorded()["cpu_capability"]
    assert capability in ("DEFAULT", "AVX2", "AVX512"), "torch reports its CPU capability inside the image"
    assert report.stage("sample").facts.recorded()["determinism"]["cpu_capability"] == capability


def test_rocm_expectation_fails_at_device_with_no_amd_driver(
    engine: Engine, cpu_report: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """No ROCm torch can be fetched here: the ROCm dossier probes the CPU image, and must refuse it."""
    cpu_image = read_report(cpu_report[0] / "report.json").image
    assert cpu_image is not None
    # --no-preflight: the host verdict would stop it before any container; this test reads the device stage.
    result = orch(
        "probe", str(TINY / "dossier-rocm.yaml"), "--image", cpu_image.id, "--out", str(tmp_path), "--no-preflight"
    )
    assert result.returncode == 1
    report = read_report(tmp_path / "report.json")
    host = {check.name: check for check in report.stage("host").checks}
    assert host["AMD GPU driver present"].observed == "no AMD GPU driver found"
    device = {check.name: check for check in report.stage("device").checks}
    assert not device["torch is a ROCm/HIP build"].passed
    assert "/dev/kfd absent" in device["AMD GPU visible in the container"].observed
    assert report.stage("sample").status == "not_run"


def test_cpu_variant_runs_on_the_cpu_and_says_so(engine: Engine, base_image: BaseOutcome, tmp_path: Path) -> None:
    report = _build_and_probe(engine, TINY / "dossier-cuda.yaml", tmp_path, variant="cpu")
    assert report.verdict == "passed", {n: s.first_error for n, s in report.stages.items()}
    assert report.dossier.variant == "cpu" and report.dossier.platform == "cpu"
    assert any("variant 'cpu'" in note and "It runs on cpu, not the reference's cuda." in note for note in report.notes)


def test_perturbed_reference_fails_the_sample_naming_metric_and_values(
    engine: Engine, base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    reference = tiny_example / "reference" / "embeddings.npy"
    raw = bytearray(reference.read_bytes())
    raw[-64:] = bytes(64)  # the last row's 16 float32 values become 0: cosine undefined → nan, then 1 row off
    raw[-128:-64] = raw[-192:-128]  # row 11 becomes a copy of row 10
    reference.write_bytes(bytes(raw))
    report = _build_and_probe(engine, tiny_example / "dossier.yaml", tmp_path)
    sample = report.stage("sample")
    assert sample.status == "failed" and sample.first_error is not None
    assert sample.first_error.step == "embeddings: cosine vs reference/embeddings.npy"
    assert "expected cosine ≥ 0.99999 for every row, observed min cosine = " in sample.first_error.message
    assert report.stage("device").status == "passed"


def test_nan_in_an_output_fails_finiteness(
    engine: Engine, base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    embed = tiny_example / "app" / "embed.py"
    with_nan = "np.where(np.arange(embeddings.numel()).reshape(embeddings.shape) == 5, np.nan, embeddings.numpy())"
    embed.write_text(
        embed.read_text().replace("embeddings.numpy().astype(np.float32)", with_nan + ".astype(np.float32)")
    )
    report = _build_and_probe(engine, tiny_example / "dossier.yaml", tmp_path)
    failed = {check.name: check for check in report.stage("sample").checks if not check.passed}
    assert failed["embeddings: finite"].observed == "1 NaN/Inf values"


def test_wrong_weights_hash_fails_before_the_sample_runs(
    engine: Engine, base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    (tiny_example / "weights.bin").write_bytes(b"not the weights the reference used")
    dossier = tiny_example / "dossier.yaml"
    dossier.write_text(
        dossier.read_text().replace(
            "python:\n",
            f"weights:\n  - name: tiny\n    path: weights.bin\n    sha256: {'ab' * 32}\n    provenance: a test\npython:\n",
            1,
        )
    )
    report = _build_and_probe(engine, dossier, tmp_path)
    sample = report.stage("sample")
    assert sample.status == "failed" and sample.first_error is not None
    assert sample.first_error.step == "weights tiny fingerprint"
    assert sample.facts.recorded()["ran"] is False
    observed = file_sha256(tiny_example / "weights.bin")
    assert sample.facts.recorded()["fingerprints"]["weights tiny fingerprint"] == {
        "expected": "ab" * 32,
        "observed": observed,
    }
    assert "ab" * 32 in sample.first_error.message and observed in sample.first_error.message, "both in full"
    assert not (tmp_path / "sample.log").exists(), "the sample command never started"


def test_a_hanging_sample_is_stopped_at_its_timeout(
    engine: Engine, base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    dossier = tiny_example / "dossier.yaml"
    text = dossier.read_text().replace("timeout_s: 300", "timeout_s: 3")
    dossier.write_text(
        text.replace("command: [python, embed.py,", "command: [python, -c, 'import time; time.sleep(120)', embed.py,")
    )
    before = session_containers()
    report = _build_and_probe(engine, dossier, tmp_path)
    assert session_containers() == before
    sample = report.stage("sample")
    assert sample.status == "failed" and sample.first_error is not None
    assert sample.first_error.message == "stopped at its timeout of 3s"
    assert sample.duration_s < 60


def test_probe_without_an_image_points_to_orch_build(tiny_example: Path, tmp_path: Path) -> None:
    (tiny_example / "sample" / "ids.json").write_text('["s01"]')  # a new identity: no image has it
    result = orch("probe", str(tiny_example / "dossier.yaml"), "--out", str(tmp_path))
    assert result.returncode == 3 and "orch build" in result.stderr
    assert "error[image-not-built]" in result.stderr and "is not built" in result.stderr
    assert "base-image-missing" not in result.stderr


def test_doctor_says_this_host_cannot_run_a_cuda_dossier() -> None:
    result = orch("doctor", str(TINY / "dossier-cuda.yaml"))
    assert result.returncode == 1
    assert "no NVIDIA driver found" in result.stdout and "can this host run" in result.stdout
    facts = orch("doctor", "--json")
    assert facts.returncode == 0 and json.loads(facts.stdout)["host"]["nvidia"] is None


@pytest.mark.gpu
def test_host_mode_on_a_gpu_machine() -> None:
    """Only on a machine with an NVIDIA GPU and torch (ORCH_GPU_PYTHON names its interpreter)."""
    python = os.environ["ORCH_GPU_PYTHON"]
    result = orch("probe-host", "--platform", "cuda", "--python", python, "--out", "/tmp/orch-gpu-host-mode")
    assert result.returncode == 0, result.stdout + result.stderr
