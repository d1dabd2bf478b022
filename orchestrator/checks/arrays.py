"""Reading sample outputs on the host, without numpy: `.npy` files and JSON lists, memory-bounded.

The host re-reads what the sample wrote (DESIGN.md §1 step 5) with orch's own dependencies only, so
a broken numpy in the image cannot vouch for itself. `.npy` is a small, documented format (a magic
string, a Python-literal header with dtype, order and shape, then raw little- or big-endian values).

What a container wrote is untrusted and may be large, so a `.npy` array is never loaded whole: its
header is validated, then values are read from the file in blocks of whole rows (`os.pread`, at most
`BLOCK_BYTES` at a time), and every check streams over them. Host memory to check one output is
O(block + row), whatever the file's size (the size itself is bounded by `expect.limits`). JSON
outputs are parsed in memory, so their size limit is smaller.
"""

from __future__ import annotations

import ast
import math
import os
import struct
import sys
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.untrusted import UnsafeOutput, parse_json, parse_json_lines

MAGIC = b"\x93NUMPY"
#: numpy's own reader refuses headers over 10 000 bytes by default; a little room beyond it.
MAX_HEADER_BYTES = 65_536
#: Bytes of values read per block when streaming a `.npy` file. As Python objects a value takes about
#: 40 bytes (10 per float32 byte), so one block costs about 2.5 MiB of host memory.
BLOCK_BYTES = 256 << 10

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


class Array(ABC):
    """A row-major array read in blocks. Rows: the first axis of a ≥2-D array; a 1-D array is one row."""

    def __init__(self, dtype: str, shape: tuple[int, ...]) -> None:
        self.dtype = dtype
        self.shape = shape
        self.size = math.prod(shape)
        # Units are what a block holds whole: rows of a ≥2-D array, single values otherwise.
        self._unit = math.prod(shape[1:]) if len(shape) >= 2 else 1
        self._units = shape[0] if shape else 1

    @property
    def row_width(self) -> int:
        return self._unit if len(self.shape) >= 2 else self.size

    @property
    def n_rows(self) -> int:
        return self.shape[0] if len(self.shape) >= 2 else 1

    @abstractmethod
    def _read_units(self, first: int, count: int) -> list[Scalar]:
        """`count` units (rows, or values of a 1-D array) from unit `first`: held in memory (lists) or read
        from the file (`.npy`)."""

    def _units_per_block(self) -> int:
        return max(1, (1 << 16) // max(1, self._unit))

    def blocks(self) -> Iterator[list[Scalar]]:
        """Every value in row-major order, a bounded block at a time."""
        step = self._units_per_block()
        for first in range(0, self._units if self._unit else 0, step):
            yield self._read_units(first, min(step, self._units - first))

    def rows(self) -> Iterator[list[Scalar]]:
        if len(self.shape) < 2:
            yield [value for block in self.blocks() for value in block]
            return
        width = self._unit
        for block in self.blocks():
            for start in range(0, len(block), width):
                yield block[start : start + width]

    def row(self, index: int) -> list[Scalar]:
        if len(self.shape) < 2:
            return next(self.rows())
        return self._read_units(index, 1)

    def to_list(self) -> list[Scalar]:
        """Every value, flattened (for small arrays and tests; checks stream with `blocks`)."""
        return [value for block in self.blocks() for value in block]

    def close(self) -> None:  # noqa: B027 - a no-op for arrays held in memory; `.npy` arrays close their file
        """Release the file behind the array (also done when it is garbage-collected)."""


class ListArray(Array):
    """An array already in memory (a parsed JSON document)."""

    def __init__(self, dtype: str, shape: tuple[int, ...], values: list[Scalar]) -> None:
        super().__init__(dtype, shape)
        self.values = values

    def _read_units(self, first: int, count: int) -> list[Scalar]:
        return self.values[first * self._unit : (first + count) * self._unit]


class NpyArray(Array):
    """A `.npy` file read on demand through its descriptor: O(block) memory per pass."""

    def __init__(
        self,
        fd: int,
        dtype: str,
        shape: tuple[int, ...],
        offset: int,
        endian: str,
        code: str,
        itemsize: int,
        fortran: bool,
    ) -> None:
        super().__init__(dtype, shape)
        self._fd, self._offset, self._endian, self._code = fd, offset, endian, code
        self._itemsize, self._fortran = itemsize, fortran and len(shape) >= 2
        self._closer = weakref.finalize(self, os.close, fd)
        if self._fortran:
            # C-order position within a row → Fortran-order position within the trailing axes.
            rest = shape[1:]
            f_strides = [math.prod(rest[:axis]) for axis in range(len(rest))]
            c_strides = [math.prod(rest[axis + 1 :]) for axis in range(len(rest))]
            self._f_positions = [
                sum(((c // c_strides[a]) % rest[a]) * f_strides[a] for a in range(len(rest))) for c in range(self._unit)
            ]

    def _units_per_block(self) -> int:
        return max(1, BLOCK_BYTES // max(1, self._unit * self._itemsize))

    def _pread(self, first_value: int, count: int) -> tuple[Any, ...]:
        size = count * self._itemsize
        data = os.pread(self._fd, size, self._offset + first_value * self._itemsize)
        if len(data) < size:
            raise ArrayFormatError("the file shrank while it was read")
        return struct.unpack(f"{self._endian}{count}{self._code}", data)

    def _read_units(self, first: int, count: int) -> list[Scalar]:
        if not self._fortran:
            return list(self._pread(first * self._unit, count * self._unit))
        # Column-major: for each trailing position, the values of rows first..first+count are contiguous.
        n0 = self.shape[0]
        segments = [self._pread(first + n0 * p, count) for p in range(self._unit)]
        return [segments[p][i] for i in range(count) for p in self._f_positions]

    def close(self) -> None:
        self._closer()


def npy_from_fd(fd: int, name: str) -> NpyArray:
    """Validate a `.npy` header read from `fd` (which the array then owns) and map its values lazily."""
    try:
        return _npy_from_fd(fd, name)
    except BaseException:
        os.close(fd)
        raise


def _npy_from_fd(fd: int, name: str) -> NpyArray:
    file_size = os.fstat(fd).st_size
    start = os.pread(fd, 12, 0)
    if not start.startswith(MAGIC) or len(start) < 10:
        raise ArrayFormatError(f"{name} is not a .npy file (no NUMPY magic)")
    major = start[6]
    if major == 1:
        header_len, offset = struct.unpack("<H", start[8:10])[0], 10
    elif major in (2, 3) and len(start) == 12:
        header_len, offset = struct.unpack("<I", start[8:12])[0], 12
    else:
        raise ArrayFormatError(f"{name}: .npy format version {major} is not supported")
    if header_len > MAX_HEADER_BYTES:
        raise ArrayFormatError(f"{name}: .npy header of {header_len} bytes (more than {MAX_HEADER_BYTES})")
    try:
        header = ast.literal_eval(os.pread(fd, header_len, offset).decode("latin-1"))
        descr, fortran, shape = header["descr"], header["fortran_order"], tuple(header["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError, RecursionError, MemoryError):
        raise ArrayFormatError(f"{name}: unreadable .npy header") from None
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape) or len(shape) > 32:
        raise ArrayFormatError(f"{name}: .npy shape {shape!r} is not a tuple of non-negative integers")
    if not isinstance(fortran, bool):
        raise ArrayFormatError(f"{name}: .npy fortran_order must be True or False")
    if not isinstance(descr, str) or len(descr) < 3 or not descr[2:].isdigit():
        raise ArrayFormatError(f"{name}: dtype {str(descr)[:100]!r} is not supported")
    order, kind, size = descr[0], descr[1], int(descr[2:])
    if (kind, size) not in _KINDS or order not in "<>|=":
        raise ArrayFormatError(f"{name}: dtype {descr!r} is not supported")
    dtype, code = _KINDS[(kind, size)]
    endian = ">" if order == ">" else "<"
    if order == "=":
        endian = "<" if sys.byteorder == "little" else ">"
    data_offset = offset + header_len
    expected = math.prod(shape) * size
    if file_size - data_offset < expected:
        raise ArrayFormatError(
            f"{name}: truncated ({max(0, file_size - data_offset)} bytes of data, {expected} expected)"
        )
    return NpyArray(fd, dtype, shape, data_offset, endian, code, size, fortran)


def read_npy(path: Path) -> NpyArray:
    return npy_from_fd(os.open(path, os.O_RDONLY | os.O_CLOEXEC), path.name)


def _shape_of(value: Any) -> tuple[int, ...]:
    # Iterative, not recursive: a JSON document nested thousands deep must not exhaust the stack.
    shape: list[int] = []
    level = [value]
    while all(isinstance(item, list) for item in level):
        lengths = {len(item) for item in level}
        if len(lengths) != 1:
            raise ArrayFormatError("ragged nested lists have no shape")
        length = lengths.pop()
        shape.append(length)
        if length == 0:
            return tuple(shape)
        level = [inner for item in level for inner in item]
    if any(isinstance(item, list) for item in level):
        raise ArrayFormatError("ragged nested lists have no shape")
    return tuple(shape)


def _flatten(value: Any, depth: int) -> list[Scalar]:
    level = [value]
    for _ in range(depth):
        level = [inner for item in level for inner in item]
    return level


def _json_dtype(values: list[Any]) -> str:
    if all(isinstance(v, bool) for v in values):
        return "bool"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int64"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "float64"
    if all(isinstance(v, str) for v in values):
        return "str"
    return "mixed"


def from_json_value(value: Any) -> ListArray:
    if not isinstance(value, list):
        value = [value]
    shape = _shape_of(value)
    values = _flatten(value, len(shape)) if math.prod(shape) else []
    # JSON has no NaN: a sample that writes "NaN"/"Infinity" (Python's json does) still parses.
    return ListArray(dtype=_json_dtype(values), shape=shape, values=values)


def json_array(data: bytes, format: str, display: str) -> ListArray:
    """An array from JSON or JSON Lines bytes; a malformed document is an `UnsafeOutput` naming it."""
    value = parse_json_lines(data, display) if format == "jsonl" else parse_json(data, display)
    try:
        array = from_json_value(value)
    except ArrayFormatError as exc:
        raise UnsafeOutput(display, f"has no array shape: {exc}") from None
    # JSON integers are unbounded; one beyond 64 bits would break every float comparison later.
    if any(isinstance(v, int) and not -(2**63) <= v < 2**64 for v in array.values):
        raise UnsafeOutput(display, "holds an integer that does not fit in 64 bits")
    return array


def read_json_array(path: Path) -> ListArray:
    return json_array(path.read_bytes(), "json", path.name)


def read_jsonl_array(path: Path) -> ListArray:
    return json_array(path.read_bytes(), "jsonl", path.name)


def read_reference(path: Path) -> Array:
    """A reference file of the dossier, by its suffix (.npy, .jsonl, else JSON)."""
    if path.suffix == ".npy":
        return read_npy(path)
    if path.suffix == ".jsonl":
        return read_jsonl_array(path)
    return read_json_array(path)
