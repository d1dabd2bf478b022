"""Reading sample outputs and references on the host with numpy: `.npy` files and JSON lists.

Why numpy is trusted here: it is the host's numpy, installed with orch, not the image's. The image
under test never runs this code, so a broken or tampered numpy inside the image cannot vouch for its
own outputs.

What a container wrote is untrusted and may be large, so a `.npy` file is read the way
`np.load(allow_pickle=False, mmap_mode="r")` would read it, but through the descriptor that
`orchestrator.untrusted.open_output` opened (no link followed, a regular file, its size checked
first): the header is parsed from that file object by `numpy.lib.format`, object and structured dtypes
are refused (nothing is ever unpickled), then the same descriptor is memory-mapped and viewed as an
ndarray at the data offset (tiny files are read whole). `mmap` rather than `np.memmap`, which wraps
the same call, because the checks need the mapping itself: they walk it a bounded chunk at a time and
hand each chunk's pages back to the kernel afterwards (`madvise(MADV_DONTNEED)`), so host memory stays
O(chunk) however large the file is (its size is bounded by `expect.limits`). The mapping is safe from
`SIGBUS` because the container that wrote the file has exited before the host reads it; the file's
size is still re-checked before every chunk, so one truncated meanwhile is a clear error, not a crash.

`bfloat16` has no numpy type: `ml_dtypes` supplies it. numpy and ml_dtypes save it with the descr
`<V2` (two opaque bytes), so such a file is read as bfloat16 when the dossier declares
`dtype: bfloat16` for the output, and refused otherwise. JSON outputs are parsed in memory, so their
size limit is smaller.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import struct
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
import numpy.typing as npt
from numpy.lib import format as npy_format

from orchestrator.errors import ArrayFormatError, UnsafeOutput
from orchestrator.untrusted import parse_json, parse_json_lines

MAGIC = b"\x93NUMPY"
#: numpy's own reader refuses headers over 10 000 bytes by default; a little room beyond it.
MAX_HEADER_BYTES = 65_536
#: Values per chunk when a check walks an array (8 MiB once widened to float64).
CHUNK_VALUES = 1 << 20
#: Bytes of values per block handed out as Python lists by `Array.blocks` (about 2.5 MiB of objects).
BLOCK_BYTES = 256 << 10
#: `.npy` data up to this size is read whole rather than mapped.
SMALL_BYTES = 64 << 10

# numpy kind + item size → the dtype's name as the dossier spells it.
_KINDS: dict[tuple[str, int], str] = {
    ("f", 2): "float16",
    ("f", 4): "float32",
    ("f", 8): "float64",
    ("i", 1): "int8",
    ("i", 2): "int16",
    ("i", 4): "int32",
    ("i", 8): "int64",
    ("u", 1): "uint8",
    ("u", 2): "uint16",
    ("u", 4): "uint32",
    ("u", 8): "uint64",
    ("b", 1): "bool",
}
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})

Scalar = float | int | bool | str
NDArray = npt.NDArray[Any]


class Array(ABC):
    """An array read a bounded chunk at a time. Rows: the first axis of a ≥2-D array; a 1-D array is one row."""

    def __init__(self, dtype: str, shape: tuple[int, ...]) -> None:
        self.dtype = dtype
        self.shape = shape
        self.size = math.prod(shape)

    @property
    def row_width(self) -> int:
        return math.prod(self.shape[1:]) if len(self.shape) >= 2 else self.size

    @property
    def n_rows(self) -> int:
        return self.shape[0] if len(self.shape) >= 2 else 1

    @abstractmethod
    def _data(self) -> NDArray:
        """The whole array in its declared shape and order (a view of the mapping, or in memory)."""

    def release(self) -> None:  # noqa: B027 - a no-op for arrays held in memory
        """Hand the pages a chunk touched back to the kernel (a no-op for arrays held in memory)."""

    def _check_intact(self) -> None:  # noqa: B027 - a no-op for arrays held in memory
        """Raise `ArrayFormatError` if the file behind the array shrank (a no-op in memory)."""

    def flat(self, start: int, stop: int) -> NDArray:
        """Values `start`..`stop` in row-major order (a 1-D array; a copy only where the order needs one)."""
        self._check_intact()
        data = self._data()
        if data.ndim < 2 or data.flags.c_contiguous:
            return data.reshape(-1)[start:stop]
        width = self.row_width
        first, last = start // width, -(-stop // width)
        rows = np.ascontiguousarray(data[first:last]).reshape(-1)
        return rows[start - first * width : stop - first * width]

    def row_block(self, first: int, stop: int) -> NDArray:
        """Rows `first`..`stop` as a 2-D array (rows by row_width)."""
        self._check_intact()
        data = self._data()
        if data.ndim < 2:
            return data.reshape(1, self.size)[first:stop]
        rows = data[first:stop]
        return rows.reshape(len(rows), self.row_width)

    def take_rows(self, indices: NDArray) -> NDArray:
        """The rows at `indices` as a 2-D array (a copy)."""
        self._check_intact()
        data = self._data()
        rows = data.reshape(1, self.size) if data.ndim < 2 else data.reshape(data.shape[0], self.row_width)
        taken = rows[indices]
        self.release()
        return taken

    def flat_chunks(self, values: int = CHUNK_VALUES) -> Iterator[tuple[int, NDArray]]:
        """(offset, values) for every bounded chunk in row-major order; pages are released after each."""
        for start in range(0, self.size, values):
            yield start, self.flat(start, min(self.size, start + values))
            self.release()

    def row_chunks(self, values: int = CHUNK_VALUES) -> Iterator[tuple[int, NDArray]]:
        """(first row, rows) for chunks of whole rows of about `values` values; a 1-D array is one chunk."""
        step = max(1, values // max(1, self.row_width))
        rows = self.n_rows if self.size else 0
        for first in range(0, rows, step):
            yield first, self.row_block(first, min(rows, first + step))
            self.release()

    # Python-object views, for small arrays, messages and tests; checks use the numpy chunks above.
    def blocks(self) -> Iterator[list[Scalar]]:
        """Every value in row-major order as Python scalars, a bounded block at a time."""
        itemsize = max(1, self._data().dtype.itemsize)
        values = max(1, BLOCK_BYTES // itemsize)
        for _, chunk in self.flat_chunks(values):
            yield chunk.tolist()

    def rows(self) -> Iterator[list[Scalar]]:
        for _, block in self.row_chunks():
            yield from block.tolist()

    def row(self, index: int) -> list[Scalar]:
        values: list[Scalar] = self.row_block(index, index + 1)[0].tolist()
        self.release()
        return values

    def value_at(self, flat: int) -> Scalar:
        value: Scalar = self.flat(flat, flat + 1).tolist()[0]
        self.release()
        return value

    def to_list(self) -> list[Scalar]:
        """Every value, flattened (for small arrays and tests)."""
        return [value for block in self.blocks() for value in block]

    def close(self) -> None:  # noqa: B027 - a no-op for arrays held in memory; `.npy` arrays unmap their file
        """Release the file behind the array (also done when it is garbage-collected)."""


class ListArray(Array):
    """An array already in memory (a parsed JSON document); `values` keeps the parsed Python scalars."""

    def __init__(self, dtype: str, shape: tuple[int, ...], values: list[Scalar]) -> None:
        super().__init__(dtype, shape)
        self.values = values
        self._array = _json_ndarray(dtype, values).reshape(shape)

    def _data(self) -> NDArray:
        return self._array


def _json_ndarray(dtype: str, values: list[Scalar]) -> NDArray:
    """JSON scalars as numpy values; integers beyond int64 and strings stay Python objects (compared exactly)."""
    kinds: dict[str, Any] = {"bool": np.bool_, "int64": np.int64, "float64": np.float64}
    for kind in (kinds.get(dtype), np.uint64 if dtype == "int64" else None):
        if kind is not None:
            try:
                return np.array(values, dtype=kind)
            except (OverflowError, ValueError, TypeError):
                continue
    objects = np.empty(len(values), dtype=object)
    objects[:] = values
    return objects


class NpyArray(Array):
    """A `.npy` file's values, memory-mapped (or read whole when tiny)."""

    def __init__(self, dtype: str, shape: tuple[int, ...], data: NDArray, mapping: mmap.mmap | None, end: int) -> None:
        super().__init__(dtype, shape)
        self._array: NDArray | None = data
        self._mapping, self._end = mapping, end

    def _data(self) -> NDArray:
        if self._array is None:
            raise ArrayFormatError("the array was read after it was closed")
        return self._array

    def _check_intact(self) -> None:
        if self._mapping is not None and self._mapping.size() < self._end:
            raise ArrayFormatError("the file shrank while it was read")

    def release(self) -> None:
        # Touched pages of a shared read-only mapping count in the process's RSS until dropped.
        if self._mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
            self._mapping.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        self._array = None
        if self._mapping is not None:
            # A chunk handed out may still be referenced; then the mapping closes when it is collected.
            with contextlib.suppress(BufferError):
                self._mapping.close()
            self._mapping = None


def _bfloat16(name: str) -> np.dtype[Any]:
    try:
        import ml_dtypes
    except ImportError:
        raise ArrayFormatError(
            f"{name}: bfloat16 needs the ml_dtypes package on the host (pip install ml_dtypes)"
        ) from None
    bfloat16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return bfloat16


def _dtype_name(raw: np.dtype[Any], name: str, declared: str | None) -> tuple[str, np.dtype[Any]]:
    """The dossier's name for a header's dtype, and the dtype to read it with; refusals name the file."""
    if raw.hasobject:
        raise ArrayFormatError(f"{name}: dtype {raw.str!r} holds Python objects; orch never unpickles an output")
    if raw.fields is not None or raw.subdtype is not None:
        raise ArrayFormatError(f"{name}: structured dtype {raw.descr!r} is not supported (plain numbers only)")
    if raw.name == "bfloat16":
        return "bfloat16", raw
    if raw.kind == "V" and raw.itemsize == 2:
        if declared == "bfloat16":
            return "bfloat16", _bfloat16(name)  # void data has no byte order: little-endian, as x86 and ARM write it
        raise ArrayFormatError(
            f"{name}: dtype {raw.str!r} (2 opaque bytes) is not supported; if it is bfloat16 as ml_dtypes "
            "writes it, declare dtype: bfloat16 for the output in the dossier"
        )
    kind = _KINDS.get((raw.kind, raw.itemsize))
    if kind is None:
        raise ArrayFormatError(f"{name}: dtype {raw.str!r} is not supported")
    return kind, raw


def npy_from_file(handle: BinaryIO, name: str, declared: str | None = None) -> NpyArray:
    """Validate the `.npy` header of an opened file and map its values; the caller closes `handle`.

    `declared` is the dossier's dtype for the output (it tells bfloat16 from other 2-byte void data).
    """
    fd = handle.fileno()
    file_size = os.fstat(fd).st_size
    start = os.pread(fd, 12, 0)
    if not start.startswith(MAGIC) or len(start) < 10:
        raise ArrayFormatError(f"{name} is not a .npy file (no NUMPY magic)")
    major = start[6]
    if major not in (1, 2, 3) or (major > 1 and len(start) < 12):
        raise ArrayFormatError(f"{name}: .npy format version {major} is not supported")
    header_len = struct.unpack("<H", start[8:10])[0] if major == 1 else struct.unpack("<I", start[8:12])[0]
    if header_len > MAX_HEADER_BYTES:
        raise ArrayFormatError(f"{name}: .npy header of {header_len} bytes (more than {MAX_HEADER_BYTES})")
    handle.seek(0)
    try:
        npy_format.read_magic(handle)
        if b"bfloat16" in os.pread(fd, header_len, 10 if major == 1 else 12):
            _bfloat16(name)  # registers the name with numpy, so the header's descr resolves
        # Version 3 differs from 2 only in allowing UTF-8 field names, which are refused below anyway.
        reader = npy_format.read_array_header_1_0 if major == 1 else npy_format.read_array_header_2_0
        shape, fortran, raw = reader(handle, max_header_size=MAX_HEADER_BYTES)
    except ArrayFormatError:
        raise
    except (ValueError, SyntaxError, KeyError, TypeError, RecursionError, MemoryError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise ArrayFormatError(f"{name}: unreadable .npy header ({reason})") from None
    shape = tuple(shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape) or len(shape) > 32:
        raise ArrayFormatError(f"{name}: .npy shape {shape!r} is not a tuple of non-negative integers")
    dtype, read_as = _dtype_name(raw, name, declared)
    data_offset = handle.tell()
    expected = math.prod(shape) * read_as.itemsize
    if file_size - data_offset < expected:
        raise ArrayFormatError(
            f"{name}: truncated ({max(0, file_size - data_offset)} bytes of data, {expected} expected)"
        )
    order: Literal["C", "F"] = "F" if fortran else "C"
    if expected <= SMALL_BYTES:
        data = np.frombuffer(os.pread(fd, expected, data_offset), dtype=read_as)
        return NpyArray(dtype, shape, data.reshape(shape, order=order), None, 0)
    # mmap keeps its own duplicate of the descriptor: the caller may close `handle` at once.
    mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    try:
        data = np.ndarray(shape, dtype=read_as, buffer=mapping, offset=data_offset, order=order)
    except BaseException:
        mapping.close()
        raise
    return NpyArray(dtype, shape, data, mapping, data_offset + expected)


def read_npy(path: Path, declared: str | None = None) -> NpyArray:
    """A host `.npy` file (a dossier's reference; tests)."""
    with path.open("rb") as handle:
        return npy_from_file(handle, path.name, declared)


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


def read_reference(path: Path, declared: str | None = None) -> Array:
    """A reference file of the dossier, by its suffix (.npy, .jsonl, else JSON)."""
    if path.suffix == ".npy":
        return read_npy(path, declared)
    if path.suffix == ".jsonl":
        return read_jsonl_array(path)
    return read_json_array(path)
