"""The same-categories and resume-training examples: their checks, run on the host's side only (no Docker).

`sample_checks` reads an output folder the way the probe does after the sample ran. Here the folders
hold the committed reference outputs (every check passes) or copies of them perturbed by the test (one
label changed, a probability or a loss moved beyond the tolerance, a state fingerprint edited), and the
committed negative controls of resume-training: outputs of resumes that forgot the optimizer's state,
the random generators' states, or both (made with negative/forgetful_resume.py, see its README).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest

from orchestrator.checks.arrays import read_npy
from orchestrator.checks.sample import sample_checks
from orchestrator.dossier.load import file_sha256, load_dossier
from orchestrator.model.checks import Check
from orchestrator.stages.sample_stage import verify_fingerprints
from tests.paths import EXAMPLES

CATEGORIES = EXAMPLES / "same-categories"
RESUME = EXAMPLES / "resume-training"
FORGETFUL = ["forgot-optimizer", "forgot-rng", "forgot-optimizer-rng"]

# What the sample writes, and where the committed copy of each file is.
CATEGORY_OUTPUTS = {
    "labels.json": "reference/labels.json",
    "probabilities.npy": "reference/probabilities.npy",
    "categories.json": "reference/categories.json",
    "ids.json": "sample/ids.json",
}
RESUME_OUTPUTS = {"state.json": "reference/state.json", "losses.json": "reference/losses.json"}

# The position of each part in state.json (see app/resumable.py, Run.fingerprint).
STATE_FIELDS = [
    "step",
    "parameters_sha256",
    "optimizer_state_sha256",
    "optimizer",
    "torch_rng_sha256",
    "numpy_rng_sha256",
    "python_rng_sha256",
]
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()  # what a never-stepped optimizer's state hashes to


def _npy(path: Path, values: list[float], shape: tuple[int, ...]) -> Path:
    """A float32 .npy file (format 1.0), written without numpy."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape!r}, }}"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    path.write_bytes(
        b"\x93NUMPY\x01\x00"
        + struct.pack("<H", len(header))
        + header.encode()
        + struct.pack(f"<{len(values)}f", *values)
    )
    return path


def _outputs(example: Path, files: dict[str, str], folder: Path) -> Path:
    """An output folder holding the committed reference outputs, as the sample would have written them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        shutil.copyfile(example / source, folder / name)
    return folder


def _run(example: Path, folder: Path) -> list[Check]:
    return sample_checks(load_dossier(example / "dossier.yaml"), folder)


def _failed(checks: list[Check]) -> dict[str, Check]:
    return {check.name: check for check in checks if not check.passed}


def _read_json(path: Path) -> list[object]:
    value = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(value, list)
    return value


def _losses(path: Path) -> list[float]:
    return [float(x) for x in json.loads(path.read_text(encoding="utf-8"))]


# -- the committed files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("example", [CATEGORIES, RESUME], ids=lambda p: p.name)
def test_committed_files_match_their_fingerprints_and_share_the_lock(example: Path) -> None:
    loaded = load_dossier(example / "dossier.yaml")
    # Inputs and weights: what the probe hashes on the host before the sample runs.
    fingerprints = verify_fingerprints(loaded)
    assert fingerprints and all(check.passed for check in fingerprints), [c for c in fingerprints if not c.passed]
    assert [w.name for w in loaded.model.weights] == ["classifier" if example == CATEGORIES else "checkpoint"]
    for weights in loaded.model.weights:
        assert weights.path is not None and loaded.resolve(weights.path).stat().st_size < 1_000_000
    # Byte-identical to tiny-embeddings' lock: the builder stage's layers are shared.
    lock = (example / "requirements-cpu.lock").read_bytes()
    assert lock == (EXAMPLES / "tiny-embeddings" / "requirements-cpu.lock").read_bytes()
    # SHA256SUMS beside the reference outputs (and resume-training's negative controls) are current.
    for sums in [example / "reference" / "SHA256SUMS", example / "negative" / "SHA256SUMS"]:
        if sums.exists():
            for line in sums.read_text().splitlines():
                digest, name = line.split(maxsplit=1)
                assert file_sha256(sums.parent / name) == digest, f"{sums.parent.name}/{name} changed"


# -- same-categories -------------------------------------------------------------------------------------


def test_category_reference_outputs_pass_every_check(tmp_path: Path) -> None:
    checks = _run(CATEGORIES, _outputs(CATEGORIES, CATEGORY_OUTPUTS, tmp_path / "out"))
    assert not _failed(checks), _failed(checks)
    names = {check.name for check in checks}
    assert {
        "labels: exact vs reference/labels.json",
        "labels: label equality",
        "labels: identifiers",
        "probabilities: allclose vs reference/probabilities.npy",
        "probabilities: identifiers",
        "categories: exact vs reference/categories.json",
    } <= names
    labels = _read_json(CATEGORIES / "reference" / "labels.json")
    assert len(labels) == 32 and set(labels) == {"account", "billing", "shipping", "technical"}


def test_one_changed_label_fails_exact_and_label_equality(tmp_path: Path) -> None:
    folder = _outputs(CATEGORIES, CATEGORY_OUTPUTS, tmp_path / "out")
    labels = _read_json(folder / "labels.json")
    labels[5] = "billing" if labels[5] != "billing" else "account"
    (folder / "labels.json").write_text(json.dumps(labels))

    failed = _failed(_run(CATEGORIES, folder))
    assert set(failed) == {"labels: exact vs reference/labels.json", "labels: label equality"}
    exact = failed["labels: exact vs reference/labels.json"]
    assert exact.observed == "1 of 32 differ" and exact.detail == "first at flat index 5"
    equality = failed["labels: label equality"]
    assert equality.expected == "≥ 1 of 32 labels equal"
    assert equality.observed == "0.96875 (31/32)" and equality.detail == "first difference at position 5"


def test_probability_beyond_the_tolerance_fails_allclose_and_within_it_passes(tmp_path: Path) -> None:
    reference = read_npy(CATEGORIES / "reference" / "probabilities.npy")
    assert reference.dtype == "float32" and reference.shape == (32, 4)
    allowed = "|Δ| ≤ 1e-06 + 1e-05·|reference|"

    def with_shift(name: str, index: int, delta: float) -> list[Check]:
        folder = _outputs(CATEGORIES, CATEGORY_OUTPUTS, tmp_path / name)
        values = [float(v) for v in reference.to_list()]
        values[index] += delta
        _npy(folder / "probabilities.npy", values, reference.shape)
        return _run(CATEGORIES, folder)

    # 1e-4 on one probability: a hundred times the absolute tolerance; the labels do not change.
    failed = _failed(with_shift("far", 4 * 7 + 2, 1e-4))
    assert set(failed) == {"probabilities: allclose vs reference/probabilities.npy"}
    check = failed["probabilities: allclose vs reference/probabilities.npy"]
    assert check.expected == allowed
    # float32 storage: the shift reads back as 9.99998e-05.
    assert check.observed.startswith("1 of 128 values outside; worst |Δ| = 9.9999")
    assert check.observed.endswith("at row 7 ('c08'), column 2 (flat index 30)"), "row, id and column named"

    # 5e-7, far more than the 7.5e-9 measured between CPU kernels, is still inside the tolerance.
    assert not _failed(with_shift("near", 4 * 7 + 2, 5e-7))


# -- resume-training -------------------------------------------------------------------------------------


def test_resume_reference_outputs_pass_every_check(tmp_path: Path) -> None:
    checks = _run(RESUME, _outputs(RESUME, RESUME_OUTPUTS, tmp_path / "out"))
    assert not _failed(checks), _failed(checks)
    names = {check.name for check in checks}
    assert {"state: exact vs reference/state.json", "losses: allclose vs reference/losses.json"} <= names
    state = _read_json(RESUME / "reference" / "state.json")
    assert [str(item).split("=", 1)[0] for item in state] == STATE_FIELDS
    assert state[0] == "step=40"
    assert len(_read_json(RESUME / "reference" / "losses.json")) == 20


@pytest.mark.parametrize("case", FORGETFUL)
def test_a_resume_that_forgot_part_of_the_state_fails(case: str) -> None:
    """Committed outputs of real resumes (torch 2.13.0+cpu) that restored the model and step only partly."""
    folder = RESUME / "negative" / case
    failed = _failed(_run(RESUME, folder))
    assert set(failed) == {"state: exact vs reference/state.json", "losses: allclose vs reference/losses.json"}

    reference = [str(item) for item in _read_json(RESUME / "reference" / "state.json")]
    observed = [str(item) for item in _read_json(folder / "state.json")]
    differing = [STATE_FIELDS[i] for i, (a, b) in enumerate(zip(observed, reference, strict=True)) if a != b]
    expected = {
        "forgot-optimizer": ["optimizer_state_sha256"],
        "forgot-rng": ["torch_rng_sha256", "numpy_rng_sha256", "python_rng_sha256"],
        "forgot-optimizer-rng": ["optimizer_state_sha256", "torch_rng_sha256", "numpy_rng_sha256", "python_rng_sha256"],
    }[case]
    assert differing == expected
    # What was restored is still equal: the step, the parameters and the hyperparameters.
    assert observed[:2] == reference[:2] and observed[3] == reference[3]
    if "optimizer" in case:
        assert observed[2] == f"optimizer_state_sha256={EMPTY_SHA256}", "a fresh optimizer has no state"
    state_check = failed["state: exact vs reference/state.json"]
    assert state_check.observed == f"{len(expected)} of 7 differ"
    assert state_check.detail == f"first at flat index {STATE_FIELDS.index(expected[0])}"

    # The losses drift far beyond the tolerance (about 1e-5), as measured when the outputs were made.
    losses = _losses(folder / "losses.json")
    reference_losses = _losses(RESUME / "reference" / "losses.json")
    drift = [abs(a - b) for a, b in zip(losses, reference_losses, strict=True)]
    worst = {"forgot-optimizer": 0.0317, "forgot-rng": 0.279, "forgot-optimizer-rng": 0.294}[case]
    assert max(drift) == pytest.approx(worst, abs=5e-4)
    if case == "forgot-optimizer":
        # The first continued loss is computed before the first update: only the state check sees it.
        assert drift[0] == 0.0
    assert "values outside" in failed["losses: allclose vs reference/losses.json"].observed


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("optimizer_state_sha256", EMPTY_SHA256),  # the optimizer was built but not loaded
        ("torch_rng_sha256", "0" * 64),  # torch's generator left as seeded at start-up
        ("python_rng_sha256", "1" * 64),
        ("step", "0"),  # the step counter restarted
    ],
)
def test_an_edited_state_fingerprint_fails_naming_its_position(tmp_path: Path, field: str, value: str) -> None:
    folder = _outputs(RESUME, RESUME_OUTPUTS, tmp_path / "out")
    state = [str(item) for item in _read_json(folder / "state.json")]
    position = STATE_FIELDS.index(field)
    state[position] = f"{field}={value}"
    (folder / "state.json").write_text(json.dumps(state))

    failed = _failed(_run(RESUME, folder))
    assert set(failed) == {"state: exact vs reference/state.json"}
    check = failed["state: exact vs reference/state.json"]
    assert check.observed == "1 of 7 differ" and check.detail == f"first at flat index {position}"


def test_losses_beyond_the_tolerance_fail_and_within_it_pass(tmp_path: Path) -> None:
    reference = _losses(RESUME / "reference" / "losses.json")

    def with_losses(name: str, losses: list[float]) -> dict[str, Check]:
        folder = _outputs(RESUME, RESUME_OUTPUTS, tmp_path / name)
        (folder / "losses.json").write_text(json.dumps(losses))
        return _failed(_run(RESUME, folder))

    # 1e-4 on the last step: ten times the tolerance, 300 times below the smallest wrong resume's drift.
    far = with_losses("far", [*reference[:-1], reference[-1] + 1e-4])
    assert set(far) == {"losses: allclose vs reference/losses.json"}
    assert far["losses: allclose vs reference/losses.json"].observed.startswith("1 of 20 values outside")

    # A slow drift growing to 1e-4 over the 20 steps: several values outside.
    drifting = with_losses("drift", [loss + 5e-6 * (i + 1) for i, loss in enumerate(reference)])
    assert "losses: allclose vs reference/losses.json" in drifting

    # 1e-6 on every step, eight times the 1.2e-7 measured with torch's non-vectorised kernels: inside.
    assert not with_losses("near", [loss + 1e-6 for loss in reference])

    # A trajectory one step short is named as a shape difference, not compared.
    short = with_losses("short", reference[:-1])
    assert short["losses: shape"].observed == "[19]"
