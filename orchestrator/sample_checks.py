"""The sample section's checks: the host re-reads the outputs from the output folder and compares.

For each declared output, in this order: present and readable, count and shape, dtype, finite values,
identifiers in the right order, then the comparison with the reference output using the dossier's metric
and tolerance (stated before any comparison ran), then the business checks. A failed check names the
output, the metric, the observed value and the allowed one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from orchestrator.arrays import Array, ArrayFormatError, read_array, read_reference
from orchestrator.checks import Check
from orchestrator.dossier.load import LoadedDossier, file_sha256, where_differ
from orchestrator.dossier.models import (
    AllCloseComparison,
    Comparison,
    CosineComparison,
    ExactComparison,
    LabelEqualityCheck,
    MaxAbsComparison,
    NearestNeighbourCheck,
    OutputSpec,
)


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _check(name: str, expected: str, observed: str, passed: bool, detail: str | None = None) -> Check:
    return Check(name=name, expected=expected, observed=observed, passed=passed, detail=detail)


def _shape_matches(expected: Sequence[int | None], observed: tuple[int, ...]) -> bool:
    return len(expected) == len(observed) and all(e is None or e == o for e, o in zip(expected, observed, strict=True))


def _non_finite(array: Array) -> int:
    return sum(1 for value in array.values if isinstance(value, float) and (math.isnan(value) or math.isinf(value)))


def cosine_rows(observed: Array, reference: Array) -> list[float]:
    out: list[float] = []
    for row_a, row_b in zip(observed.rows, reference.rows, strict=True):
        a = [float(x) for x in row_a]
        b = [float(x) for x in row_b]
        norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
        out.append(sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else float("nan"))
    return out


def compare(
    name: str, observed: Array, reference: Array, comparison: Comparison, ids: list[str] | None = None
) -> Check:
    """One comparison against the reference, with the observed value and the allowed one."""
    label = f"{name}: {comparison.metric} vs {comparison.reference}"
    if observed.shape != reference.shape:
        return _check(label, f"shape {list(reference.shape)}", f"shape {list(observed.shape)}", False)
    if isinstance(comparison, ExactComparison):
        differing = [i for i, (a, b) in enumerate(zip(observed.values, reference.values, strict=True)) if a != b]
        return _check(
            label,
            "every value equal",
            "equal" if not differing else f"{len(differing)} of {len(observed.values)} differ",
            not differing,
            f"first at flat index {differing[0]}" if differing else None,
        )
    if observed.dtype in ("str", "mixed") or reference.dtype in ("str", "mixed"):
        return _check(label, f"numbers to compare with {comparison.metric}", f"dtype {observed.dtype}", False)
    a, b = observed.numeric(), reference.numeric()
    if isinstance(comparison, MaxAbsComparison):
        worst = max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)
        ok = worst <= comparison.max
        return _check(label, f"max |Δ| ≤ {_fmt(comparison.max)}", f"max |Δ| = {_fmt(worst)}", ok)
    if isinstance(comparison, AllCloseComparison):
        excess = [abs(x - y) - (comparison.atol + comparison.rtol * abs(y)) for x, y in zip(a, b, strict=True)]
        bad = [i for i, e in enumerate(excess) if e > 0 or math.isnan(e)]
        allowed = f"|Δ| ≤ {_fmt(comparison.atol)} + {_fmt(comparison.rtol)}·|reference|"
        if not bad:
            return _check(label, allowed, "every value within tolerance", True)
        worst = max(bad, key=lambda i: excess[i] if not math.isnan(excess[i]) else math.inf)
        return _check(
            label,
            allowed,
            f"{len(bad)} of {len(a)} values outside; worst |Δ| = {_fmt(abs(a[worst] - b[worst]))} at flat index {worst}",
            False,
        )
    assert isinstance(comparison, CosineComparison)
    similarities = cosine_rows(observed, reference)
    worst_row = min(range(len(similarities)), key=lambda i: similarities[i] if not math.isnan(similarities[i]) else -2)
    worst = similarities[worst_row]
    where = f" (row {ids[worst_row]!r})" if ids and worst_row < len(ids) else f" (row {worst_row})"
    ok = not math.isnan(worst) and worst >= comparison.min
    return _check(label, f"cosine ≥ {_fmt(comparison.min)} for every row", f"min cosine = {_fmt(worst)}{where}", ok)


def _read_ids(path: Path) -> list[str]:
    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, list):
        raise ArrayFormatError(f"{path.name} must hold a JSON list of identifiers")
    return [str(item) for item in value]


def output_checks(
    loaded: LoadedDossier, output: OutputSpec, folder: Path
) -> tuple[list[Check], Array | None, list[str] | None]:
    name = output.name
    path = folder / output.file
    checks: list[Check] = []
    if not path.is_file():
        checks.append(_check(f"{name}: written", f"{output.file} in the output folder", "missing", False))
        return checks, None, None
    try:
        array = read_array(path, output.format)
    except (ArrayFormatError, ValueError, OSError) as exc:
        checks.append(_check(f"{name}: readable", f"a {output.format} file", f"unreadable: {exc}", False))
        return checks, None, None
    checks.append(_check(f"{name}: written", f"{output.file} ({output.format})", f"{path.stat().st_size} bytes", True))
    if output.shape is not None:
        expected = ["*" if d is None else d for d in output.shape]
        checks.append(
            _check(f"{name}: shape", str(expected), str(list(array.shape)), _shape_matches(output.shape, array.shape))
        )
    if output.dtype is not None:
        checks.append(_check(f"{name}: dtype", output.dtype, array.dtype, array.dtype == output.dtype))
    if output.finite and array.dtype.startswith("float"):
        bad = _non_finite(array)
        checks.append(
            _check(f"{name}: finite", "no NaN or Inf", "all finite" if not bad else f"{bad} NaN/Inf values", not bad)
        )
    ids: list[str] | None = None
    if output.ids is not None:
        ids_path = folder / output.ids.file
        expected_ids = _read_ids(loaded.resolve(output.ids.expected))
        if not ids_path.is_file():
            checks.append(_check(f"{name}: identifiers", f"{output.ids.file} written", "missing", False))
        else:
            ids = _read_ids(ids_path)
            same = ids == expected_ids
            detail = None
            if not same:
                first = next(
                    (i for i, (x, y) in enumerate(zip(ids, expected_ids, strict=False)) if x != y),
                    min(len(ids), len(expected_ids)),
                )
                detail = f"first difference at position {first}"
            checks.append(
                _check(
                    f"{name}: identifiers",
                    f"{len(expected_ids)} ids in the sample's order",
                    f"{len(ids)} ids" + (", same order" if same else ", differ"),
                    same,
                    detail,
                )
            )
            rows = array.shape[0] if array.shape else 1
            checks.append(
                _check(
                    f"{name}: count", f"one row per id ({len(expected_ids)})", f"{rows} rows", rows == len(expected_ids)
                )
            )
    if output.compare is not None:
        reference_path = loaded.resolve(output.compare.reference)
        observed = file_sha256(reference_path) if output.compare.sha256 is not None else None
        if output.compare.sha256 is not None and observed is not None and observed != output.compare.sha256:
            checks.append(
                _check(
                    f"{name}: reference fingerprint",
                    f"sha256 {output.compare.sha256}",  # in full: two hashes cut short can look the same
                    f"sha256 {observed}",
                    False,
                    where_differ(output.compare.sha256, observed),
                )
            )
        else:
            checks.append(compare(name, array, read_reference(reference_path), output.compare, ids))
    return checks, array, ids


def nearest_neighbour_check(check: NearestNeighbourCheck, array: Array, ids: list[str], pairs_path: Path) -> Check:
    pairs = json.loads(pairs_path.read_text(encoding="utf-8"))
    rows = [[float(x) for x in row] for row in array.rows]
    norms = [math.sqrt(sum(x * x for x in row)) or 1.0 for row in rows]
    index = {identifier: i for i, identifier in enumerate(ids)}

    def nearest(i: int) -> str:
        best, best_score = -1, -math.inf
        for j in range(len(rows)):
            if j != i:
                score = sum(x * y for x, y in zip(rows[i], rows[j], strict=True)) / (norms[i] * norms[j])
                if score > best_score:
                    best, best_score = j, score
        return ids[best]

    agreed, misses = 0, []
    for a, b in pairs:
        if a in index and b in index and nearest(index[a]) == b and nearest(index[b]) == a:
            agreed += 1
        else:
            misses.append(f"{a}↔{b}")
    ratio = agreed / len(pairs) if pairs else 1.0
    return _check(
        f"{check.output}: nearest-neighbour agreement on {len(pairs)} pairs",
        f"≥ {_fmt(check.min_agreement)}",
        f"{_fmt(ratio)} ({agreed}/{len(pairs)})",
        ratio >= check.min_agreement,
        ("missed: " + ", ".join(misses)) if misses else None,
    )


def label_equality_check(check: LabelEqualityCheck, array: Array, reference_path: Path) -> Check:
    reference = read_reference(reference_path)
    pairs = list(zip(array.values, reference.values, strict=False))
    equal = sum(1 for a, b in pairs if a == b)
    total = max(len(array.values), len(reference.values))
    ratio = equal / total if total else 1.0
    differing = [i for i, (a, b) in enumerate(pairs) if a != b]
    return _check(
        f"{check.output}: label equality",
        f"≥ {_fmt(check.min_agreement)} of {total} labels equal",
        f"{_fmt(ratio)} ({equal}/{total})",
        ratio >= check.min_agreement and len(array.values) == len(reference.values),
        f"first difference at position {differing[0]}" if differing else None,
    )


def sample_checks(loaded: LoadedDossier, folder: Path) -> list[Check]:
    checks: list[Check] = []
    arrays: dict[str, tuple[Array, list[str] | None]] = {}
    for output in loaded.model.expect.outputs:
        output_result, array, ids = output_checks(loaded, output, folder)
        checks += output_result
        if array is not None:
            arrays[output.name] = (array, ids)
    for business in loaded.model.expect.business:
        if business.output not in arrays:
            checks.append(
                _check(f"{business.output}: {business.kind}", "the output to be readable", "unreadable", False)
            )
            continue
        array, ids = arrays[business.output]
        if isinstance(business, NearestNeighbourCheck):
            if ids is None:
                checks.append(
                    _check(f"{business.output}: nearest_neighbour", "identifiers for the rows", "none declared", False)
                )
            else:
                checks.append(nearest_neighbour_check(business, array, ids, loaded.resolve(business.pairs)))
        else:
            checks.append(label_equality_check(business, array, loaded.resolve(business.reference)))
    return checks
