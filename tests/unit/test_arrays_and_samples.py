from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from orchestrator.checks.arrays import from_json_value, read_npy
from orchestrator.checks.sample import compare, sample_checks
from orchestrator.dossier.load import load_dossier
from orchestrator.dossier.models import AllCloseComparison, CosineComparison, ExactComparison, MaxAbsComparison
from orchestrator.errors import ArrayFormatError
from orchestrator.plan.run import GpuMapping
from orchestrator.stages.device_stage import device_checks
from tests.paths import EXAMPLES

TINY = EXAMPLES / "tiny-embeddings"


def _npy(path: Path, values: list[float], shape: tuple[int, ...], descr: str = "<f4", fortran: bool = False) -> Path:
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape!r}, }}"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    code = {"<f4": "<%df", "<f8": "<%dd", ">f4": ">%df", "<i8": "<%dq", "|b1": "<%d?"}[descr] % len(values)
    path.write_bytes(
        b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack(code, *values)
    )
    return path


def test_reads_the_committed_reference_embeddings() -> None:
    array = read_npy(TINY / "reference" / "embeddings.npy")
    assert array.dtype == "float32" and array.shape == (12, 16)
    assert all(abs(math.sqrt(sum(float(x) ** 2 for x in row)) - 1) < 1e-5 for row in array.rows()), "unit rows"


@pytest.mark.parametrize("descr", ["<f4", "<f8", ">f4", "<i8", "|b1"])
def test_npy_dtypes_and_byte_orders(tmp_path: Path, descr: str) -> None:
    values: list[float] = [1, 0, 1, 1, 0, 1] if descr in ("|b1", "<i8") else [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    array = read_npy(_npy(tmp_path / "a.npy", values, (2, 3), descr))
    assert array.shape == (2, 3)
    assert [float(v) for v in array.to_list()] == [float(v) for v in values]


def test_fortran_order_is_read_row_major(tmp_path: Path) -> None:
    # [[1, 2, 3], [4, 5, 6]] stored column by column
    array = read_npy(_npy(tmp_path / "f.npy", [1.0, 4.0, 2.0, 5.0, 3.0, 6.0], (2, 3), fortran=True))
    assert list(array.rows()) == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def test_bad_npy_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "x.npy").write_bytes(b"not numpy")
    with pytest.raises(ArrayFormatError, match="no NUMPY magic"):
        read_npy(tmp_path / "x.npy")
    path = _npy(tmp_path / "t.npy", [1.0, 2.0], (2,))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ArrayFormatError, match="truncated"):
        read_npy(path)


def test_comparisons_report_observed_and_allowed() -> None:
    reference = from_json_value([[1.0, 0.0], [0.0, 1.0]])
    close = from_json_value([[1.0, 0.001], [0.0, 1.0]])
    far = from_json_value([[0.0, 1.0], [0.0, 1.0]])
    why = "stated before comparing, for the test"
    cosine = CosineComparison(metric="cosine", min=0.999, reference="r.npy", justification=why)
    assert compare("e", close, reference, cosine, ["a", "b"]).passed
    failed = compare("e", far, reference, cosine, ["a", "b"])
    assert (
        not failed.passed
        and failed.observed == "min cosine = 0 (row 'a')"
        and failed.expected.startswith("cosine ≥ 0.999")
    )
    max_abs = MaxAbsComparison(metric="max_abs", max=0.01, reference="r.npy", justification=why)
    assert compare("e", close, reference, max_abs).passed
    worst = compare("e", far, reference, max_abs)
    assert worst.observed == "max |Δ| = 1 at row 0, column 0" and worst.detail == "observed 0.0, reference 1.0"
    allclose = AllCloseComparison(metric="allclose", rtol=0.0, atol=1e-4, reference="r.npy", justification=why)
    result = compare("e", close, reference, allclose)
    assert not result.passed and "1 of 4 values outside" in result.observed
    exact = ExactComparison(metric="exact", reference="r.json", justification=why)
    assert compare("labels", from_json_value(["cat", "dog"]), from_json_value(["cat", "dog"]), exact).passed
    assert not compare("labels", from_json_value(["cat", "cow"]), from_json_value(["cat", "dog"]), exact).passed
    assert not compare("e", from_json_value([1.0, 2.0, 3.0]), reference, max_abs).passed, "shape mismatch"


def _write_outputs(folder: Path, values: list[float], ids: list[str]) -> None:
    folder.mkdir(exist_ok=True)
    _npy(folder / "embeddings.npy", values, (12, 16))
    (folder / "ids.json").write_text(json.dumps(ids))


def test_sample_checks_on_the_reference_itself_pass(tmp_path: Path) -> None:
    loaded = load_dossier(TINY / "dossier.yaml")
    reference = read_npy(TINY / "reference" / "embeddings.npy")
    ids = json.loads((TINY / "sample" / "ids.json").read_text())
    _write_outputs(tmp_path, [float(v) for v in reference.to_list()], ids)
    checks = sample_checks(loaded, tmp_path)
    assert [c.name for c in checks] == [
        "embeddings: written",
        "embeddings: shape",
        "embeddings: dtype",
        "embeddings: finite",
        "embeddings: identifiers",
        "embeddings: count",
        "embeddings: cosine vs reference/embeddings.npy",
    ]
    assert all(c.passed for c in checks), [c for c in checks if not c.passed]


def test_nan_ids_and_perturbation_each_fail_by_name(tmp_path: Path) -> None:
    loaded = load_dossier(TINY / "dossier.yaml")
    reference = [float(v) for v in read_npy(TINY / "reference" / "embeddings.npy").to_list()]
    ids = json.loads((TINY / "sample" / "ids.json").read_text())
    perturbed = list(reference)
    perturbed[16:32] = [-v for v in reference[16:32]]  # row s02 flipped: cosine -1
    _write_outputs(tmp_path, perturbed, [*ids[:-2], ids[-1], ids[-2]])
    failed = {c.name: c for c in sample_checks(loaded, tmp_path) if not c.passed}
    assert failed["embeddings: identifiers"].detail == "first difference at position 10"
    cosine = failed["embeddings: cosine vs reference/embeddings.npy"]
    assert cosine.observed == "min cosine = -1 (row 's02')" and cosine.expected == "cosine ≥ 0.99999 for every row"
    assert "embeddings: finite" not in failed

    perturbed[0] = float("nan")
    _write_outputs(tmp_path, perturbed, ids)
    failed = {c.name: c for c in sample_checks(loaded, tmp_path) if not c.passed}
    assert failed["embeddings: finite"].observed == "1 NaN/Inf values"
    assert failed["embeddings: cosine vs reference/embeddings.npy"].observed == "min cosine = nan (row 's01')"


def test_missing_output_is_a_failed_check(tmp_path: Path) -> None:
    loaded = load_dossier(TINY / "dossier.yaml")
    checks = sample_checks(loaded, tmp_path)
    assert [(c.name, c.passed) for c in checks] == [("embeddings: written", False)]


def test_device_checks_for_a_cuda_dossier_without_a_gpu() -> None:
    found = {
        "torch": {"version": "2.14.1", "cuda": "13.0", "hip": None},
        "accelerator": {"available": False, "device_count": 0},
        "visible": {"nvidia": [], "kfd": False, "dri_render": []},
        "devices": [],
    }
    mapping = GpuMapping(description="none: the daemon has no nvidia runtime and no NVIDIA CDI devices")
    checks = {c.name: c for c in device_checks("cuda", "13.0", found, mapping)}
    assert checks["torch is a CUDA build"].passed
    visible = checks["NVIDIA GPU visible in the container"]
    assert (
        not visible.passed and "torch sees 0 device(s)" in visible.observed and "no nvidia runtime" in visible.observed
    )


def test_device_checks_flag_a_wheel_without_kernels_for_the_gpu() -> None:
    found = {
        "torch": {"version": "2.6.0+cu124", "cuda": "12.4", "hip": None},
        "accelerator": {"available": True, "device_count": 1},
        "visible": {"nvidia": ["/dev/nvidia0"]},
        "arch_list": ["sm_80", "sm_90"],
        "devices": [{"index": 0, "name": "NVIDIA B200", "capability": "10.0", "arch_supported": False}],
        "compute": {
            "device": "cuda:0",
            "rtol": 1e-4,
            "atol": 1e-4,
            "matmul": {"ok": False, "error": "RuntimeError: no kernel image is available"},
            "conv2d": {"ok": False, "error": "x"},
        },
    }
    checks = {c.name: c for c in device_checks("cuda", "12.4", found, GpuMapping(nvidia_gpus=True))}
    assert not checks["wheel has kernels for GPU 0"].passed
    assert checks["matmul on cuda:0 matches float64"].observed == "RuntimeError: no kernel image is available"


def test_device_checks_for_rocm_expectation_on_a_cpu_torch() -> None:
    found = {
        "torch": {"version": "2.13.0+cpu", "cuda": None, "hip": None},
        "accelerator": {"device_count": 0},
        "visible": {"kfd": False},
    }
    checks = {
        c.name: c
        for c in device_checks(
            "rocm", "6.2", found, GpuMapping(description="none: /dev/kfd does not exist on this host")
        )
    }
    assert not checks["torch is a ROCm/HIP build"].passed
    assert "/dev/kfd absent" in checks["AMD GPU visible in the container"].observed
