"""Reading sample outputs on the host, without numpy: `.npy` files and JSON lists.

The host re-reads what the sample wrote (DESIGN.md §1 step 5) with orch's own dependencies only, so
a broken numpy in the image cannot vouch for itself. `.npy` is a small, documented format (a magic
string, a Python-literal header with dtype, order and shape, then raw little- or big-endian values);
samples are small, so plain Python lists are fast enough.
"""

from __future__ import annotations

import ast
import json
import math
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"\x93NUMPY"

# numpy type character + item size → (dtype name as the dossier spells it, struct code)
_KINDS: dict[tuple[str, int], tuple[str, str]] = {
    ("f", 2): ("float16", "e"),
    ("f", 4): ("float32", "f"),
    ("f", 8): ("float64", "d"),
    ("i", 1): ("int8", "b"),
    ("i", 2): ("int16", "h"),
    ("i", 4): ("int32", "i"),
    ("i", 8): ("int64", "q"),
    ("u", 1): ("uint8", "B"),
    ("u", 2): ("uint16", "H"),
    ("u", 4): ("uint32", "I"),
    ("u", 8): ("uint64", "Q"),
    ("b", 1): ("bool", "?"),
}

Scalar = float | int | bool | str


class ArrayFormatError(ValueError):
    """The file is not what its format promises (bad magic, unsupported dtype, truncated data)."""


@dataclass(frozen=True)
class Array:
    dtype: str
    shape: tuple[int, ...]
    values: list[Scalar]  # flattened, row-major

    @property
    def rows(self) -> list[list[Scalar]]:
        """2-D arrays as rows; a 1-D array is one row; a scalar one row of one value."""
        if len(self.shape) == 0:
            return [list(self.values)]
        if len(self.shape) == 1:
            return [list(self.values)]
        width = math.prod(self.shape[1:])
        return [self.values[i * width : (i + 1) * width] for i in range(self.shape[0])]

    def numeric(self) -> list[float]:
        return [float(value) for value in self.values]


def _transpose_fortran(values: list[Scalar], shape: tuple[int, ...]) -> list[Scalar]:
    """Column-major storage → row-major order."""
    if len(shape) < 2:
        return values
    out: list[Scalar] = [0] * len(values)
    strides_f = [math.prod(shape[:axis]) for axis in range(len(shape))]
    strides_c = [math.prod(shape[axis + 1 :]) for axis in range(len(shape))]
    for f_index, value in enumerate(values):
        remainder, c_index = f_index, 0
        for axis in reversed(range(len(shape))):
            coordinate, remainder = divmod(remainder, strides_f[axis])
            c_index += coordinate * strides_c[axis]
        out[c_index] = value
    return out


def read_npy(path: Path) -> Array:
    raw = path.read_bytes()
    if not raw.startswith(MAGIC) or len(raw) < 10:
        raise ArrayFormatError(f"{path.name} is not a .npy file (no NUMPY magic)")
    major = raw[6]
    if major == 1:
        header_len, offset = struct.unpack("<H", raw[8:10])[0], 10
    elif major in (2, 3):
        header_len, offset = struct.unpack("<I", raw[8:12])[0], 12
    else:
        raise ArrayFormatError(f"{path.name}: .npy format version {major} is not supported")
    try:
        header = ast.literal_eval(raw[offset : offset + header_len].decode("latin-1"))
        descr, fortran, shape = header["descr"], bool(header["fortran_order"]), tuple(header["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError):
        raise ArrayFormatError(f"{path.name}: unreadable .npy header") from None
    if not isinstance(descr, str) or len(descr) < 3:
        raise ArrayFormatError(f"{path.name}: structured dtype {descr!r} is not supported")
    order, kind, size = descr[0], descr[1], int(descr[2:])
    if (kind, size) not in _KINDS:
        raise ArrayFormatError(f"{path.name}: dtype {descr!r} is not supported")
    name, code = _KINDS[(kind, size)]
    endian = ">" if order == ">" else "<" if order in "<|" else "="
    if order == "=":
        endian = "<" if sys.byteorder == "little" else ">"
    count = math.prod(shape)
    data = raw[offset + header_len :]
    if len(data) < count * size:
        raise ArrayFormatError(f"{path.name}: truncated ({len(data)} bytes of data, {count * size} expected)")
    values: list[Scalar] = list(struct.unpack(f"{endian}{count}{code}", data[: count * size]))
    if fortran:
        values = _transpose_fortran(values, shape)
    return Array(dtype=name, shape=shape, values=values)


def _shape_of(value: Any) -> tuple[int, ...]:
    if isinstance(value, list):
        if not value:
            return (0,)
        inner = {_shape_of(item) for item in value}
        if len(inner) != 1:
            raise ArrayFormatError("ragged nested lists have no shape")
        return (len(value), *inner.pop())
    return ()


def _flatten(value: Any) -> list[Scalar]:
    if isinstance(value, list):
        return [scalar for item in value for scalar in _flatten(item)]
    return [value]


def _json_dtype(values: list[Scalar]) -> str:
    if all(isinstance(v, bool) for v in values):
        return "bool"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int64"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "float64"
    if all(isinstance(v, str) for v in values):
        return "str"
    return "mixed"


def from_json_value(value: Any) -> Array:
    if not isinstance(value, list):
        value = [value]
    values = _flatten(value)
    # JSON has no NaN: a sample that writes "NaN"/"Infinity" (Python's json does) still parses below.
    return Array(dtype=_json_dtype(values), shape=_shape_of(value), values=values)


def read_json_array(path: Path) -> Array:
    return from_json_value(json.loads(path.read_text(encoding="utf-8")))


def read_jsonl_array(path: Path) -> Array:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return from_json_value(rows)


def read_array(path: Path, format: str) -> Array:
    if format == "npy":
        return read_npy(path)
    if format == "json":
        return read_json_array(path)
    if format == "jsonl":
        return read_jsonl_array(path)
    raise ArrayFormatError(f"unknown output format {format!r}")


def read_reference(path: Path) -> Array:
    """A reference file, by its suffix (.npy, .jsonl, else JSON)."""
    if path.suffix == ".npy":
        return read_npy(path)
    if path.suffix == ".jsonl":
        return read_jsonl_array(path)
    return read_json_array(path)
