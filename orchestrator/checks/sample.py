"""The sample section's checks: the host re-reads the outputs from the output folder and compares.

For each declared output, in this order: present and readable, count and shape, dtype, finite values,
identifiers in the right order, then the comparison with the reference output using the dossier's metric
and tolerance (stated before any comparison ran), then the business checks. A failed check names the
output, the metric, the observed value and the allowed one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

from orchestrator.checks import metrics
from orchestrator.checks.arrays import FLOAT_DTYPES, Array, json_array, npy_from_file, read_reference
from orchestrator.dossier.load import LoadedDossier, file_sha256, where_differ
from orchestrator.dossier.models import (
    AllCloseComparison,
    ComparisonSpec,
    CosineComparison,
    ExactComparison,
    LabelEqualityCheck,
    LimitsSpec,
    MaxAbsComparison,
    NearestNeighbourCheck,
    OutputSpec,
)
from orchestrator.errors import ArrayFormatError, OutputMissing, UnsafeOutput
from orchestrator.model.checks import Check
from orchestrator.untrusted import open_output, read_output_json

MIB = 1 << 20


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _fmt_against(value: float, threshold: float) -> str:
    """`value` with enough digits that it does not print like `threshold` unless it equals it.

    Why: `min cosine = 1` against `cosine ≥ 1` hid a value of 1 - 4.5e-13; near 1 the distance is
    spelled out too.
    """
    text = _fmt(value)
    if not math.isnan(value) and value != threshold:
        for digits in range(7, 18):
            if text != _fmt(threshold):
                break
            text = f"{value:.{digits}g}"
    if 0 < 1 - value < 1e-4:
        text += f" (1 - {1 - value:.2g})"
    return text


def _check(name: str, expected: str, observed: str, passed: bool, detail: str | None = None) -> Check:
    return Check(name=name, expected=expected, observed=observed, passed=passed, detail=detail)


def _shape_matches(expected: Sequence[int | None], observed: tuple[int, ...]) -> bool:
    return len(expected) == len(observed) and all(e is None or e == o for e, o in zip(expected, observed, strict=True))


def _row_name(row: int, ids: list[str] | None) -> str:
    return f"row {row} ({ids[row]!r})" if ids and row < len(ids) else f"row {row}"


def where(flat: int, shape: tuple[int, ...], ids: list[str] | None = None) -> str:
    """A flat row-major index as the user reads it: row (and its identifier) and column."""
    if len(shape) == 0:
        return "the only value"
    if len(shape) == 1:
        return f"index {flat}" + (f" ({ids[flat]!r})" if ids and flat < len(ids) else "")
    width = math.prod(shape[1:])
    row, column = divmod(flat, width) if width else (0, 0)
    if len(shape) == 2:
        return f"{_row_name(row, ids)}, column {column}"
    coordinates = []
    for size in reversed(shape[1:]):
        column, rest = divmod(column, size)
        coordinates.append(rest)
    return f"{_row_name(row, ids)}, index {tuple(reversed(coordinates))}"


def compare(
    name: str, observed: Array, reference: Array, comparison: ComparisonSpec, ids: list[str] | None = None
) -> Check:
    """One comparison against the reference, with the observed value, where, and the allowed one."""
    label = f"{name}: {comparison.metric} vs {comparison.reference}"
    if observed.shape != reference.shape:
        return _check(label, f"shape {list(reference.shape)}", f"shape {list(observed.shape)}", False)
    if isinstance(comparison, ExactComparison):
        differing, first = metrics.exact_differences(observed, reference)
        return _check(
            label,
            "every value equal",
            "equal" if not differing else f"{differing} of {observed.size} differ",
            not differing,
            (
                f"first at flat index {first}"
                + (f" ({where(first, observed.shape, ids)})" if len(observed.shape) >= 2 else "")
            )
            if differing
            else None,
        )
    if observed.dtype in ("str", "mixed") or reference.dtype in ("str", "mixed"):
        return _check(label, f"numbers to compare with {comparison.metric}", f"dtype {observed.dtype}", False)
    if isinstance(comparison, MaxAbsComparison):
        worst, worst_at = metrics.worst_abs(observed, reference)
        ok = worst <= comparison.max
        at = f" at {where(worst_at, observed.shape, ids)}" if worst_at >= 0 and not ok else ""
        return _check(
            label,
            f"max |Δ| ≤ {_fmt(comparison.max)}",
            f"max |Δ| = {_fmt_against(worst, comparison.max)}{at}",
            ok,
            f"observed {_value_at(observed, worst_at)}, reference {_value_at(reference, worst_at)}" if at else None,
        )
    if isinstance(comparison, AllCloseComparison):
        allowed = f"|Δ| ≤ {_fmt(comparison.atol)} + {_fmt(comparison.rtol)}·|reference|"
        bad, worst_at, worst_diff = metrics.allclose_outside(observed, reference, comparison.atol, comparison.rtol)
        if not bad:
            return _check(label, allowed, "every value within tolerance", True)
        return _check(
            label,
            allowed,
            f"{bad} of {observed.size} values outside; worst |Δ| = {_fmt(worst_diff)} at "
            f"{where(worst_at, observed.shape, ids)} (flat index {worst_at})",
            False,
        )
    assert isinstance(comparison, CosineComparison)
    worst_row, worst = metrics.min_row_cosine(observed, reference)
    at = f" (row {ids[worst_row]!r})" if ids and worst_row < len(ids) else f" (row {worst_row})"
    ok = not math.isnan(worst) and worst >= comparison.min
    return _check(
        label,
        f"cosine ≥ {_fmt(comparison.min)} for every row",
        f"min cosine = {_fmt_against(worst, comparison.min)}{at}",
        ok,
    )


def _value_at(array: Array, flat: int) -> str:
    """The value at a flat index, read by itself, as Python prints it."""
    return repr(array.value_at(flat)) if 0 <= flat < array.size else "?"


def _read_ids(path: Path) -> list[str]:
    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, list):
        raise ArrayFormatError(f"{path.name} must hold a JSON list of identifiers")
    return [str(item) for item in value]


def _limit_hint(field: str) -> str:
    return f" (expect.limits.{field} in the dossier)"


def read_output(folder: Path, output: OutputSpec, limits: LimitsSpec) -> tuple[Array, int]:
    """The output as the host reads it: refused if it is a link or not a regular file, or over its limit."""
    display = f"{folder.name}/{output.file}"
    if output.format == "npy":
        with open_output(folder, output.file, limits.output_mib * MIB, limit_hint=_limit_hint("output_mib")) as handle:
            size = os.fstat(handle.fileno()).st_size
            try:
                return npy_from_file(handle, display, output.dtype), size
            except ArrayFormatError as exc:
                raise UnsafeOutput(display, f"is not a usable .npy file: {exc}") from None
    with open_output(folder, output.file, limits.json_mib * MIB, limit_hint=_limit_hint("json_mib")) as handle:
        data = handle.read(limits.json_mib * MIB + 1)
    if len(data) > limits.json_mib * MIB:
        raise UnsafeOutput(display, f"grew over the limit of {limits.json_mib} MiB while it was read")
    return json_array(data, output.format, display), len(data)


def _output_ids(folder: Path, file: str, limits: LimitsSpec) -> list[str]:
    value = read_output_json(folder, file, limits.json_mib * MIB, limit_hint=_limit_hint("json_mib"))
    if not isinstance(value, list):
        raise UnsafeOutput(f"{folder.name}/{file}", "must hold a JSON list of identifiers")
    return [str(item) for item in value]


def output_checks(
    loaded: LoadedDossier, output: OutputSpec, folder: Path
) -> tuple[list[Check], Array | None, list[str] | None]:
    name = output.name
    limits = loaded.model.expect.limits
    checks: list[Check] = []
    try:
        array, size = read_output(folder, output, limits)
    except OutputMissing:
        checks.append(_check(f"{name}: written", f"{output.file} in the output folder", "missing", False))
        return checks, None, None
    except (UnsafeOutput, ArrayFormatError, OSError) as exc:
        checks.append(
            _check(f"{name}: readable", f"a regular {output.format} file (no link)", f"refused: {exc}", False)
        )
        return checks, None, None
    checks.append(_check(f"{name}: written", f"{output.file} ({output.format})", f"{size} bytes", True))
    if output.shape is not None:
        expected = ["*" if d is None else d for d in output.shape]
        checks.append(
            _check(f"{name}: shape", str(expected), str(list(array.shape)), _shape_matches(output.shape, array.shape))
        )
    if output.dtype is not None:
        checks.append(_check(f"{name}: dtype", output.dtype, array.dtype, array.dtype == output.dtype))
    if output.finite and array.dtype in FLOAT_DTYPES:
        bad = metrics.count_non_finite(array)
        checks.append(
            _check(f"{name}: finite", "no NaN or Inf", "all finite" if not bad else f"{bad} NaN/Inf values", not bad)
        )
    ids: list[str] | None = None
    if output.ids is not None:
        expected_ids = _read_ids(loaded.resolve(output.ids.expected))
        try:
            ids = _output_ids(folder, output.ids.file, limits)
        except OutputMissing:
            checks.append(_check(f"{name}: identifiers", f"{output.ids.file} written", "missing", False))
        except UnsafeOutput as exc:
            checks.append(
                _check(f"{name}: identifiers", f"{output.ids.file}: a JSON list of ids", f"refused: {exc}", False)
            )
        else:
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
            reference = read_reference(reference_path, output.dtype)
            try:
                checks.append(compare(name, array, reference, output.compare, ids))
            finally:
                reference.close()
    return checks, array, ids


def nearest_neighbour_check(check: NearestNeighbourCheck, array: Array, ids: list[str], pairs_path: Path) -> Check:
    """Each pair must be each other's nearest row (cosine), all queried rows in one chunked pass."""
    pairs = json.loads(pairs_path.read_text(encoding="utf-8"))
    index = {identifier: i for i, identifier in enumerate(ids)}
    if array.dtype in ("str", "mixed"):
        nearest_of: dict[int, int] = {}
    else:
        nearest_of = metrics.nearest_rows(array, [index[x] for pair in pairs for x in pair if x in index])

    def nearest(i: int) -> str | None:
        best = nearest_of.get(i)
        return ids[best] if best is not None and best < len(ids) else None

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
    try:
        equal, first = metrics.equal_values(array, reference)
        total = max(array.size, reference.size)
        same_size = array.size == reference.size
    finally:
        reference.close()
    ratio = equal / total if total else 1.0
    return _check(
        f"{check.output}: label equality",
        f"≥ {_fmt(check.min_agreement)} of {total} labels equal",
        f"{_fmt(ratio)} ({equal}/{total})",
        ratio >= check.min_agreement and same_size,
        f"first difference at position {first}" if first >= 0 else None,
    )


def sample_checks(loaded: LoadedDossier, folder: Path) -> list[Check]:
    checks: list[Check] = []
    arrays: dict[str, tuple[Array, list[str] | None]] = {}
    with contextlib.ExitStack() as opened:
        for output in loaded.model.expect.outputs:
            output_result, array, ids = output_checks(loaded, output, folder)
            checks += output_result
            if array is not None:
                opened.callback(array.close)
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
                        _check(
                            f"{business.output}: nearest_neighbour", "identifiers for the rows", "none declared", False
                        )
                    )
                else:
                    checks.append(nearest_neighbour_check(business, array, ids, loaded.resolve(business.pairs)))
            else:
                checks.append(label_equality_check(business, array, loaded.resolve(business.reference)))
    return checks
