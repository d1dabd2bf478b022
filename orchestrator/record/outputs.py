"""The reference outputs as observed (format, shape, dtype, finiteness, fingerprint) and the run-to-run
spread measured by rerunning the command (`--repeat N`). Streams arrays: memory stays O(block)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.checks.arrays import read_npy
from orchestrator.checks.metrics import count_non_finite, largest_magnitude, min_row_cosine, worst_abs
from orchestrator.dossier.paths import file_sha256
from orchestrator.errors import ArrayFormatError

_FORMATS = {".npy": "npy", ".json": "json", ".jsonl": "jsonl"}
_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool")


@dataclass
class ObservedOutput:
    file: str  # relative to the output folder
    format: str | None  # npy | json | jsonl | None (a file orch cannot compare: fingerprinted only)
    sha256: str
    shape: list[int] | None = None
    dtype: str | None = None
    finite: bool | None = None
    #: max |x| of a float array: its scale, for the tolerance floor (record/draft.py `tolerance_floor`).
    scale: float | None = None
    is_ids: bool = False  # a JSON list of strings: the identifiers of another output's rows
    #: Measured over the reruns: {"runs": N, "max_abs": x, "min_cosine": y, "identical": bool}
    spread: dict[str, object] = field(default_factory=dict)
    #: Measured by `--vary NAME=v1,v2`: one rerun per setting, keyed "NAME=value", same keys as `spread`.
    varied: dict[str, dict[str, object]] = field(default_factory=dict)


def observe_output(path: Path, relative: str) -> ObservedOutput:
    kind = _FORMATS.get(path.suffix)
    observed = ObservedOutput(file=relative, format=kind, sha256=file_sha256(path))
    if kind == "npy":
        try:
            array = read_npy(path)
        except (ArrayFormatError, OSError) as exc:
            observed.format = None
            observed.spread["note"] = f"not a .npy orch reads: {exc}"
            return observed
        try:
            observed.shape, observed.dtype = list(array.shape), array.dtype
            if array.dtype.startswith(("float", "bfloat")):
                observed.finite = count_non_finite(array) == 0
                observed.scale = largest_magnitude(array)
        finally:
            array.close()
    elif kind == "json":
        try:
            value = json.loads(path.read_bytes())
        except ValueError:
            observed.format = None
            return observed
        observed.is_ids = isinstance(value, list) and all(isinstance(item, str) for item in value)
    return observed


def observed_outputs(folder: Path) -> list[ObservedOutput]:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    return [observe_output(path, path.relative_to(folder).as_posix()) for path in files]


def measure_spread(reference: Path, rerun: Path, output: ObservedOutput) -> dict[str, object]:
    """How far a rerun's file is from the reference's: bytes, and for float arrays max |a-b| and row cosine
    (the same metrics, from orchestrator/checks/metrics.py, the sample stage compares with)."""
    if not rerun.is_file():
        return {"missing": True}
    if file_sha256(rerun) == output.sha256:
        return {"identical": True, "max_abs": 0.0, "min_cosine": 1.0 if output.dtype else None}
    if output.format != "npy" or output.dtype not in _DTYPES:
        return {"identical": False}
    a, b = read_npy(reference), read_npy(rerun)
    try:
        if a.shape != b.shape:
            return {"identical": False, "shape": list(b.shape)}
        worst = worst_abs(b, a)[0]
        cosine = min_row_cosine(b, a)[1]
        return {"identical": False, "max_abs": worst, "min_cosine": cosine}
    finally:
        a.close()
        b.close()


def merge_spread(into: dict[str, object], one: dict[str, object]) -> None:
    into["runs"] = int(str(into.get("runs", 0))) + 1
    into["identical"] = bool(into.get("identical", True)) and bool(one.get("identical"))
    if one.get("missing"):
        into["missing"] = True
    for key, pick in (("max_abs", max), ("min_cosine", min)):
        value = one.get(key)
        if isinstance(value, float):
            current = into.get(key)
            into[key] = pick(current, value) if isinstance(current, float) else value
