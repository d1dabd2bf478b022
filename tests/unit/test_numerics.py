"""The host's numpy reader and vectorised checks: what np.save writes reads back, refusals name the file,
and every metric gives exactly the answer of the plain-Python loops it replaced (kept below as oracles).
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from orchestrator.checks import metrics
from orchestrator.checks.arrays import SMALL_BYTES, from_json_value, read_npy
from orchestrator.checks.sample import compare, sample_checks
from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.dossier.models import CosineComparison
from orchestrator.errors import ArrayFormatError
from tests.paths import EXAMPLES

WHY = "stated before comparing, for the test"
TINY = EXAMPLES / "tiny-embeddings"

# -- the reader ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("dtype", ["<f4", ">f8", "<i2", "|u1", "|b1", "<f2"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_what_np_save_writes_reads_back(tmp_path: Path, version: tuple[int, int], dtype: str, order: str) -> None:
    values = (np.arange(2 * 3 * 4) % 7).astype(dtype).reshape((2, 3, 4), order=order)
    path = tmp_path / "a.npy"
    with path.open("wb") as handle:
        np.lib.format.write_array(handle, np.asarray(values, order=order), version=version)
    array = read_npy(path)
    assert array.shape == (2, 3, 4) and array.to_list() == values.ravel().tolist()
    assert array.row(1) == values[1].ravel().tolist()


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_mapped_file_reads_like_a_small_one_and_checks_it_shrank(tmp_path: Path, order: str) -> None:
    rows = SMALL_BYTES // (4 * 16) * 3  # three times the size read whole: memory-mapped
    values = np.random.default_rng(1).standard_normal((rows, 16)).astype(np.float32)
    path = tmp_path / "big.npy"
    np.save(path, np.asarray(values, order=order))
    array = read_npy(path)
    try:
        assert array.shape == (rows, 16)
        assert np.array_equal(np.concatenate([c for _, c in array.flat_chunks(values=1000)]), values.ravel())
        assert np.array_equal(array.take_rows(np.array([5, rows - 1])), values[[5, rows - 1]])
        with path.open("r+b") as handle:
            handle.truncate(1000)
        with pytest.raises(ArrayFormatError, match="the file shrank while it was read"):
            array.flat(0, 10)
    finally:
        array.close()


def test_object_and_structured_dtypes_are_refused_naming_the_file(tmp_path: Path) -> None:
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(ArrayFormatError, match=r"^objects.npy: dtype '\|O' holds Python objects; orch never unpickles"):
        read_npy(objects)
    fields = tmp_path / "fields.npy"
    np.save(fields, np.zeros(3, dtype=[("x", "<f4"), ("y", "<i4")]))
    with pytest.raises(ArrayFormatError, match=r"^fields.npy: structured dtype .* is not supported"):
        read_npy(fields)
    complex_ = tmp_path / "complex.npy"
    np.save(complex_, np.zeros(3, dtype=np.complex64))
    with pytest.raises(ArrayFormatError, match=r"^complex.npy: dtype '<c8' is not supported$"):
        read_npy(complex_)


def test_bfloat16_reads_with_ml_dtypes_when_the_dossier_declares_it(tmp_path: Path) -> None:
    values = np.array([[1.5, -2.0, 0.0078125], [3.0, 1e30, -0.5]], dtype=ml_dtypes.bfloat16)
    path = tmp_path / "half.npy"
    np.save(path, values)
    assert path.read_bytes()[10:60].startswith(b"{'descr': '<V2'")  # what ml_dtypes and numpy write
    array = read_npy(path, "bfloat16")
    assert array.dtype == "bfloat16" and array.shape == (2, 3)
    assert [float(v) for v in array.to_list()] == [float(v) for v in values.ravel()]
    with pytest.raises(ArrayFormatError, match=r"2 opaque bytes.*declare dtype: bfloat16 for the output"):
        read_npy(path)
    reference = read_npy(path, "bfloat16")
    assert metrics.worst_abs(array, reference) == (0.0, -1) and metrics.count_non_finite(array) == 0


def test_bfloat16_without_ml_dtypes_is_a_clear_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "half.npy"
    np.save(path, np.zeros(4, dtype=ml_dtypes.bfloat16))
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # `import ml_dtypes` now raises ImportError
    with pytest.raises(ArrayFormatError, match=r"^half.npy: bfloat16 needs the ml_dtypes package on the host"):
        read_npy(path, "bfloat16")


# -- the checks against the loops they replaced ---------------------------------------------------------


def _old_worst_abs(xs: list[float], ys: list[float]) -> tuple[float, int]:
    worst, worst_at = 0.0, -1
    for index, (x, y) in enumerate(zip(xs, ys, strict=True)):
        difference = abs(x - y)
        if (math.isnan(difference) and not math.isnan(worst)) or difference > worst:
            worst, worst_at = difference, index
    return worst, worst_at


def _old_allclose(xs: list[float], ys: list[float], atol: float, rtol: float) -> tuple[int, int, float]:
    bad, worst_excess, worst_at, worst_diff = 0, -math.inf, -1, 0.0
    for index, (x, y) in enumerate(zip(xs, ys, strict=True)):
        excess = abs(x - y) - (atol + rtol * abs(y))
        if excess > 0 or math.isnan(excess):
            bad += 1
            rank = math.inf if math.isnan(excess) else excess
            if rank > worst_excess:
                worst_excess, worst_at, worst_diff = rank, index, abs(x - y)
    return bad, worst_at, worst_diff


def _old_min_cosine(xs: list[list[float]], ys: list[list[float]]) -> tuple[int, float]:
    worst_row, worst = 0, math.inf
    for row, (a_row, b_row) in enumerate(zip(xs, ys, strict=True)):
        dot = norm_a = norm_b = 0.0
        for a, b in zip(a_row, b_row, strict=True):
            dot, norm_a, norm_b = dot + a * b, norm_a + a * a, norm_b + b * b
        norm = math.sqrt(norm_a) * math.sqrt(norm_b)
        similarity = dot / norm if norm else float("nan")
        rank = -2.0 if math.isnan(similarity) else similarity
        if rank < (-2.0 if math.isnan(worst) else worst):
            worst_row, worst = row, similarity
    return (worst_row, 1.0) if worst == math.inf else (worst_row, worst)


def _old_nearest(rows: list[list[float]], i: int) -> int:
    norms = [math.sqrt(sum(x**2 for x in row)) or 1.0 for row in rows]
    best, best_score = -1, -math.inf
    for j, row in enumerate(rows):
        if j != i:
            score = sum(x * y for x, y in zip(rows[i], row, strict=True)) / (norms[i] * norms[j])
            if score > best_score:
                best, best_score = j, score
    return best


def _cases() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    base = rng.standard_normal((40, 24)).astype(np.float32)
    noisy = (base + rng.standard_normal(base.shape).astype(np.float32) * 1e-3).astype(np.float32)
    nan = noisy.copy()
    nan[3, 5], nan[9, 0], nan[12, 2] = np.nan, np.inf, -np.inf
    zero_row = noisy.copy()
    zero_row[7] = 0
    ties = np.tile(base[:4], (10, 1))  # equal rows: ties everywhere, each decided by the first index
    return [(base, base), (noisy, base), (nan, base), (zero_row, base), (ties, ties * np.float32(1.0000001))]


@pytest.mark.parametrize("case", range(5))
def test_each_metric_equals_the_python_loop_it_replaced(tmp_path: Path, case: int) -> None:
    observed_values, reference_values = _cases()[case]
    np.save(tmp_path / "o.npy", observed_values)
    np.save(tmp_path / "r.npy", reference_values)
    observed, reference = read_npy(tmp_path / "o.npy"), read_npy(tmp_path / "r.npy")
    xs, ys = observed_values.astype(np.float64).tolist(), reference_values.astype(np.float64).tolist()
    flat_x, flat_y = [v for row in xs for v in row], [v for row in ys for v in row]
    with np.errstate(all="ignore"):
        assert metrics.worst_abs(observed, reference) == pytest.approx(_old_worst_abs(flat_x, flat_y), nan_ok=True)
        old_allclose = _old_allclose(flat_x, flat_y, 1e-4, 1e-3)
        assert metrics.allclose_outside(observed, reference, 1e-4, 1e-3) == pytest.approx(old_allclose, nan_ok=True)
    row, cosine = metrics.min_row_cosine(observed, reference)
    old_row, old_cosine = _old_min_cosine(xs, ys)
    assert row == old_row and (cosine == old_cosine or (math.isnan(cosine) and math.isnan(old_cosine)))
    assert metrics.exact_differences(observed, reference)[0] == sum(a != b for a, b in zip(flat_x, flat_y, strict=True))
    queries = [0, 3, 7, 11, 39]
    assert metrics.nearest_rows(observed, queries) == {i: _old_nearest(xs, i) for i in queries}


def test_cosine_of_identical_rows_is_reported_bit_for_bit_as_the_loop_did() -> None:
    # Rows whose cosine with themselves is 1 - 1.1e-16 summed in order, and exactly 1 summed pairwise (or
    # the other way round): the printed text, the row named and pass/fail at `min: 1` must not move.
    rows = np.random.default_rng(3).standard_normal((200, 384)).tolist()
    observed, reference = from_json_value(rows), from_json_value(rows)
    expected_row, expected = _old_min_cosine(rows, rows)
    assert metrics.min_row_cosine(observed, reference) == (expected_row, expected)
    rule = CosineComparison(metric="cosine", min=1.0, reference="r.npy", justification=WHY)
    assert compare("e", observed, reference, rule).passed == (expected >= 1.0)


def test_exact_and_label_equality_keep_python_equality_across_types() -> None:
    big = 2**53 + 1  # not a float64: numpy's int-to-float promotion would call it equal to 2**53
    assert metrics.exact_differences(from_json_value([big, 1]), from_json_value([float(2**53), 1.0])) == (1, 0)
    assert metrics.exact_differences(from_json_value([True, 2]), from_json_value([1, 2])) == (0, -1)
    assert metrics.equal_values(from_json_value(["cat", "dog", 3]), from_json_value(["cat", "cow"])) == (1, 1)
    assert metrics.exact_differences(from_json_value([2**64 - 1]), from_json_value([-1])) == (1, 0)


def test_a_json_output_reads_through_the_same_chunks() -> None:
    array = from_json_value(np.arange(12.0).reshape(3, 4).tolist())
    assert array.dtype == "float64" and array.row(2) == [8.0, 9.0, 10.0, 11.0]
    assert array.value_at(5) == 5.0 and list(array.rows())[1] == [4.0, 5.0, 6.0, 7.0]
    assert metrics.count_non_finite(from_json_value([1.0, float("nan"), float("inf")])) == 2


def test_nearest_rows_screened_in_float32_match_float64_scores(tmp_path: Path) -> None:
    # Near-duplicates closer than float32 can tell apart from the best: the float64 pass decides them.
    rng = np.random.default_rng(11)
    rows = rng.standard_normal((3000, 64))
    rows[1:200:2] = rows[0:200:2] + 1e-9 * rng.standard_normal((100, 64))
    rows[500] = rows[501] = rows[502]  # exact ties: the first row wins
    np.save(tmp_path / "e.npy", rows)
    queries = [*range(0, 200), 500, 501, 502, 2999]
    unit = rows / np.linalg.norm(rows, axis=1)[:, None]
    scores = unit[queries] @ unit.T
    scores[np.arange(len(queries)), queries] = -np.inf
    expected = dict(zip(queries, np.argmax(scores, axis=1).tolist(), strict=True))
    assert metrics.nearest_rows(read_npy(tmp_path / "e.npy"), queries) == expected
    assert expected[500] == 501 and expected[501] == 500 and expected[0] == 1


def _tiny_with_output_dtype(dtype: str) -> LoadedDossier:
    loaded = load_dossier(TINY / "dossier.yaml")
    output = loaded.model.expect.outputs[0].model_copy(update={"dtype": dtype})
    expect = loaded.model.expect.model_copy(update={"outputs": [output]})
    return dataclasses.replace(loaded, model=loaded.model.model_copy(update={"expect": expect}))


def _sample_output(folder: Path, embeddings: np.ndarray, **save: bool) -> Path:
    folder.mkdir()
    shutil.copyfile(TINY / "sample" / "ids.json", folder / "ids.json")
    np.save(folder / "embeddings.npy", embeddings, **save)
    return folder


def test_a_bfloat16_output_is_checked_end_to_end(tmp_path: Path) -> None:
    reference = np.load(TINY / "reference" / "embeddings.npy")
    out = _sample_output(tmp_path / "sample-output", reference.astype(ml_dtypes.bfloat16))
    checks = {c.name: c for c in sample_checks(_tiny_with_output_dtype("bfloat16"), out)}
    assert checks["embeddings: dtype"].passed and checks["embeddings: dtype"].observed == "bfloat16"
    assert checks["embeddings: finite"].passed
    cosine = checks["embeddings: cosine vs reference/embeddings.npy"]
    assert cosine.observed.startswith("min cosine = 0.99"), cosine.observed  # bfloat16 keeps 8 bits
    undeclared = sample_checks(load_dossier(TINY / "dossier.yaml"), out)[0]
    assert undeclared.name == "embeddings: readable" and not undeclared.passed
    assert "declare dtype: bfloat16 for the output in the dossier" in undeclared.observed


def test_a_pickled_output_is_one_refusal_line_and_never_unpickled(tmp_path: Path) -> None:
    out = _sample_output(tmp_path / "sample-output", np.array([_Boom()], dtype=object), allow_pickle=True)
    check = sample_checks(load_dossier(TINY / "dossier.yaml"), out)[0]
    assert check.name == "embeddings: readable" and not check.passed and "\n" not in check.observed
    assert check.observed == (
        "refused: sample-output/embeddings.npy is not a usable .npy file: sample-output/embeddings.npy: "
        "dtype '|O' holds Python objects; orch never unpickles an output"
    )


class _Boom:
    """Unpickling this would raise: the refusal must come before any unpickling."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (_explode, ("unpickled",))


def _explode(message: str) -> None:
    raise AssertionError(message)


@pytest.mark.parametrize("shape", [(0,), (0, 16), (5, 0), ()])
def test_empty_and_scalar_arrays_go_through_every_metric(tmp_path: Path, shape: tuple[int, ...]) -> None:
    np.save(tmp_path / "e.npy", np.ones(shape, dtype=np.float32))
    array = read_npy(tmp_path / "e.npy")
    size = math.prod(shape)
    assert metrics.min_row_cosine(array, array) == (0, 1.0)
    assert metrics.worst_abs(array, array) == (0.0, -1) and metrics.count_non_finite(array) == 0
    assert metrics.exact_differences(array, array) == (0, -1) and metrics.equal_values(array, array) == (size, -1)
    rows = [[1.0] * math.prod(shape[1:])] * shape[0] if len(shape) >= 2 else [[1.0] * size]
    expected = {i: _old_nearest(rows, i) for i in (0, 1) if i < len(rows)}
    assert metrics.nearest_rows(array, [0, 1]) == expected
