"""The sample checks' numerics, vectorised with numpy and walked a bounded chunk at a time.

Each function gives the same answer as the plain-Python loop it replaced (which converted every value
to a Python float and compared one pair at a time): the same worst value, at the same index, with the
same rule for NaN and for ties (the first one wins). Where summation order could change the last bit
of a printed result, the order is kept:

- `max_abs`, `allclose` and `exact` are element-wise, so numpy computes exactly what Python did
  (float64 arithmetic; exact comparisons stay exact: integers and floats that numpy could only compare
  after rounding are compared as Python objects).
- cosine: every row is computed fast (`einsum`), then the rows that could be the minimum (within a
  bound of summation error of the fast minimum) are computed again summing column by column, as the
  loop did, so the reported minimum and its row are bit-for-bit the loop's.
- nearest neighbour: chunked matrix products of the queried rows against all rows, in float32 on
  unit rows to find the few rows that can be a query's nearest (within a bound of float32 error of the
  best), then those scored in float64 as the loop did; memory is O(chunk * queries + queries * chunks). Scores equal to
  the last bit may order differently from the loop's sums; an exact tie still goes to the first row.

Memory: O(chunk) per pass (`arrays.CHUNK_VALUES` values), plus one float64 per row for the cosine.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from orchestrator.checks.arrays import CHUNK_VALUES, Array, NDArray

#: The nearest-neighbour pass holds a chunk of rows and its scores against every query: this many values.
NEIGHBOUR_VALUES = 4 * CHUNK_VALUES


def _f64(values: NDArray) -> NDArray:
    return values.astype(np.float64, copy=False)


def _paired(observed: Array, reference: Array, size: int) -> Iterator[tuple[int, NDArray, NDArray]]:
    for start in range(0, size, CHUNK_VALUES):
        stop = min(size, start + CHUNK_VALUES)
        yield start, observed.flat(start, stop), reference.flat(start, stop)
        observed.release()
        reference.release()


def _kind(values: NDArray) -> str:
    return "f" if values.dtype.kind == "V" else values.dtype.kind  # "V": bfloat16, a float


def _equal(a: NDArray, b: NDArray) -> NDArray:
    """Element-wise `a == b` with Python's meaning: exact, whatever the two dtypes."""
    ka, kb = _kind(a), _kind(b)
    if ka in "fb" and kb in "fb":
        return np.asarray(_f64(a) == _f64(b))
    if ka in "iub" and kb in "iub" and {ka, kb} != {"i", "u"}:
        return np.asarray(a == b)
    if "O" not in (ka, kb) and {ka, kb} <= {"f", "i", "u", "b"}:
        # An integer and a float: exact in float64 while the integers stay within 2**53.
        ints = a if ka in "iu" else b
        if not ints.size or float(np.max(np.abs(ints.astype(np.float64)))) < 2.0**53:
            return np.asarray(_f64(a) == _f64(b))
    as_objects = [x.astype(np.float64).astype(object) if _kind(x) == "f" else x.astype(object) for x in (a, b)]
    return np.array([x == y for x, y in zip(as_objects[0].tolist(), as_objects[1].tolist(), strict=True)], dtype=bool)


def largest_magnitude(array: Array) -> float:
    """max |x| over the finite values (0.0 for none): the scale of an output, for its float tolerance floor."""
    largest = 0.0
    for _, chunk in array.flat_chunks():
        values = np.abs(_f64(chunk))
        finite = values[np.isfinite(values)]
        if finite.size:
            largest = max(largest, float(finite.max()))
    return largest


def count_non_finite(array: Array) -> int:
    bad = 0
    for _, chunk in array.flat_chunks():
        bad += int(chunk.size - np.count_nonzero(np.isfinite(_f64(chunk))))
    return bad


def exact_differences(observed: Array, reference: Array) -> tuple[int, int]:
    """(how many values differ, the first flat index that does or -1). Same shapes."""
    differing, first = 0, -1
    for start, x, y in _paired(observed, reference, observed.size):
        unequal = ~_equal(x, y)
        count = int(np.count_nonzero(unequal))
        if count and first < 0:
            first = start + int(np.argmax(unequal))
        differing += count
    return differing, first


def equal_values(observed: Array, reference: Array) -> tuple[int, int]:
    """(how many values are equal, the first position that differs or -1) over the shorter of the two."""
    equal, first = 0, -1
    for start, x, y in _paired(observed, reference, min(observed.size, reference.size)):
        same = _equal(x, y)
        equal += int(np.count_nonzero(same))
        if first < 0 and not same.all():
            first = start + int(np.argmin(same))
    return equal, first


def worst_abs(observed: Array, reference: Array) -> tuple[float, int]:
    """The largest |observed - reference| and its flat index: NaN beats any number; -1 when all are 0."""
    worst, at = 0.0, -1
    with np.errstate(all="ignore"):
        for start, x, y in _paired(observed, reference, observed.size):
            difference = np.abs(_f64(x) - _f64(y))
            if not difference.size:
                continue
            index = int(np.argmax(difference))  # the first NaN, else the first maximum
            value = float(difference[index])
            if (math.isnan(value) and not math.isnan(worst)) or value > worst:
                worst, at = value, start + index
    return worst, at


def allclose_outside(observed: Array, reference: Array, atol: float, rtol: float) -> tuple[int, int, float]:
    """(values outside atol + rtol·|reference|, the flat index of the worst (NaN worst of all), its |Δ|)."""
    bad, worst_rank, worst_at, worst_diff = 0, -math.inf, -1, 0.0
    with np.errstate(all="ignore"):
        for start, x, y in _paired(observed, reference, observed.size):
            xf, yf = _f64(x), _f64(y)
            difference = np.abs(xf - yf)
            excess = difference - (atol + rtol * np.abs(yf))
            outside = (excess > 0) | np.isnan(excess)
            count = int(np.count_nonzero(outside))
            if not count:
                continue
            bad += count
            rank = np.where(outside, np.where(np.isnan(excess), math.inf, excess), -math.inf)
            index = int(np.argmax(rank))
            if float(rank[index]) > worst_rank:
                worst_rank, worst_at, worst_diff = float(rank[index]), start + index, float(difference[index])
    return bad, worst_at, worst_diff


def _cosines(x: NDArray, y: NDArray, *, in_order: bool) -> NDArray:
    """Row-wise dot / (‖x‖·‖y‖), NaN where a norm is 0. `in_order`: sums column by column, as Python did."""
    if in_order:
        dot, norm_x, norm_y = (np.zeros(len(x)) for _ in range(3))
        columns_x, columns_y = np.asfortranarray(x), np.asfortranarray(y)
        for column in range(x.shape[1]):
            a, b = columns_x[:, column], columns_y[:, column]
            dot += a * b
            norm_x += a * a
            norm_y += b * b
    else:
        dot, norm_x, norm_y = np.einsum("ij,ij->i", x, y), np.einsum("ij,ij->i", x, x), np.einsum("ij,ij->i", y, y)
    norm = np.sqrt(norm_x) * np.sqrt(norm_y)
    return np.where(norm != 0, dot / np.where(norm != 0, norm, 1.0), math.nan)


def min_row_cosine(observed: Array, reference: Array) -> tuple[int, float]:
    """(row, cosine) of the least similar row; a NaN row counts as the least similar. (0, 1.0) for no rows."""
    if not observed.size:
        return 0, 1.0
    width = observed.row_width
    fast = np.empty(observed.n_rows)
    with np.errstate(all="ignore"):
        for first, x in observed.row_chunks():
            y = reference.row_block(first, first + len(x))
            fast[first : first + len(x)] = _cosines(_f64(x), _f64(y), in_order=False)
            reference.release()
        nan = np.isnan(fast)
        if nan.any():  # NaN comes from the same values (NaN, Inf, an all-zero row) in any summation order
            row = int(np.argmax(nan))
            return row, float(fast[row])
        # Summation order moves a cosine by at most ~(width)·2⁻⁵³ per row; a generous bound of it.
        bound = 16 * (width + 4) * 2.0**-53 * max(1.0, float(np.max(np.abs(fast))))
        candidates = np.flatnonzero(fast <= fast.min() + bound)
        worst_row, worst = 0, math.inf
        step = max(1, CHUNK_VALUES // max(1, width))
        for start in range(0, len(candidates), step):
            rows = candidates[start : start + step]
            exact = _cosines(_f64(observed.take_rows(rows)), _f64(reference.take_rows(rows)), in_order=True)
            index = int(np.argmin(exact))
            if float(exact[index]) < worst:
                worst_row, worst = int(rows[index]), float(exact[index])
    return worst_row, worst


def _norms(rows: NDArray) -> NDArray:
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    return np.where(norms == 0, 1.0, norms)  # an all-zero row scores 0 against everything, as before


def _unit_rows32(block: NDArray) -> NDArray | None:
    """Rows scaled to unit length, in float32 (float64 data is scaled before it is rounded); None unless
    every norm is finite (NaN, Inf or a norm past float32's range: the chunk is scored in float64)."""
    rows = block if block.dtype == np.float64 else block.astype(np.float32, copy=False)
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    if not np.isfinite(norms).all():
        return None
    unit = rows / np.where(norms == 0, 1, norms)[:, None]
    return unit.astype(np.float32, copy=False)


def _exact_scores(query: NDArray, query_norms: NDArray, which: NDArray, rows: NDArray) -> NDArray:
    """float64 cosine of queries `which` against `rows` (one row each), by the loop's rule for zero norms."""
    rows = _f64(rows)
    scores: NDArray = np.einsum("ij,ij->i", query[which], rows) / (query_norms[which] * _norms(rows))
    scores[np.isnan(scores)] = -math.inf
    return scores


def nearest_rows(array: Array, queries: list[int]) -> dict[int, int]:
    """For each queried row, the other row with the highest cosine (the first of equals); -1 if none scores.

    One pass of float32 products of unit rows finds, per query and chunk, the best row and the runner-up.
    A float32 dot product of unit vectors of `width` values is within about (width + 2)·2⁻²⁴ of the exact
    cosine (twice that with the float32 norms), so only rows whose float32 score is within a margin of
    four times that of the query's best can be its nearest; those are scored again in float64 (usually
    one per query). A chunk whose runner-up is inside the margin (near-duplicates) is searched in full
    for that query; one with NaN, Inf or huge values is scored in float64 outright.
    """
    wanted = np.array(sorted({q for q in queries if 0 <= q < array.n_rows}), dtype=np.intp)
    if not wanted.size:
        return {}
    if not array.size:  # rows without values: every score is 0/1, so the first other row wins
        return {q: (1 if array.n_rows > 1 else -1) if q == 0 else 0 for q in wanted.tolist()}
    width = max(1, array.row_width)
    margin = 8 * (width + 4) * 2.0**-24
    every = np.arange(len(wanted))
    with np.errstate(all="ignore"):
        query = _f64(array.take_rows(wanted))
        query_norms = _norms(query)
        unit_query = _unit_rows32(query) if np.isfinite(query).all() else None
        per_chunk = max(1, NEIGHBOUR_VALUES // (width + len(wanted))) * width
        screened: list[tuple[int, int, NDArray, NDArray, NDArray]] = []  # first, rows, best, top, runner-up
        scored: list[tuple[NDArray, NDArray, NDArray]] = []  # query positions, rows, float64 scores
        for first, block in array.row_chunks(per_chunk):
            inside = (wanted >= first) & (wanted < first + len(block))
            own = (every[inside], wanted[inside] - first)
            unit = _unit_rows32(block) if unit_query is not None else None
            if unit is None or unit_query is None:
                rows = _f64(block)
                scores = (query @ rows.T) / (query_norms[:, None] * _norms(rows)[None, :])
                scores[np.isnan(scores)] = -math.inf
                scores[own] = -math.inf  # a row is not its own neighbour
                index = np.argmax(scores, axis=1)
                scored.append((every, first + index, scores[every, index]))
                continue
            approx = unit_query @ unit.T
            approx[own] = -np.inf
            index = np.argmax(approx, axis=1)
            top = approx[every, index]
            approx[every, index] = -np.inf
            screened.append((first, len(block), first + index, top, approx.max(axis=1)))
        if screened:
            assert unit_query is not None  # chunks are screened only with unit queries
            threshold = np.max([top for _, _, _, top, _ in screened], axis=0) - margin
            for first, count, index, top, runner_up in screened:
                near = top >= threshold
                which = every[near & (wanted != index)]
                scored.append(
                    (which, index[which], _exact_scores(query, query_norms, which, array.take_rows(index[which])))
                )
                crowded = every[near & (runner_up >= threshold)]
                if crowded.size:  # near-duplicates: every row of the chunk inside the margin is a candidate
                    rows = array.row_block(first, first + count)
                    crowded_unit = _unit_rows32(rows)
                    crowded_approx = unit_query[crowded] @ crowded_unit.T if crowded_unit is not None else None
                    for position, query_row in enumerate(crowded.tolist()):
                        columns = (
                            np.arange(count)
                            if crowded_approx is None
                            else np.flatnonzero(crowded_approx[position] >= threshold[query_row])
                        )
                        columns = columns[first + columns != wanted[query_row]]
                        which = np.full(len(columns), query_row)
                        scored.append((which, first + columns, _exact_scores(query, query_norms, which, rows[columns])))
                    array.release()
        which = np.concatenate([w for w, _, _ in scored])
        rows_of = np.concatenate([r for _, r, _ in scored])
        score = np.concatenate([s for _, _, s in scored])
    order = np.lexsort((rows_of, -score, which))  # by query, then the best score, then the first row of equals
    which, rows_of, score = which[order], rows_of[order], score[order]
    firsts = np.flatnonzero(np.r_[True, which[1:] != which[:-1]]) if len(which) else np.zeros(0, dtype=np.intp)
    best = np.full(len(wanted), -1, dtype=np.intp)
    found = firsts[score[firsts] > -math.inf]  # the loop only took a score above -inf
    best[which[found]] = rows_of[found]
    return dict(zip(wanted.tolist(), best.tolist(), strict=True))
