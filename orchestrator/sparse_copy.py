"""Copying a file without filling its holes.

`shutil.copy2` writes every byte of a sparse file: a 2 GB file holding a few MB of data became
2.1 GB on disk in a hand-over. Here only the data extents are copied (found with SEEK_DATA /
SEEK_HOLE) and the copy is extended to the same length, so the holes stay holes. On a file system
without SEEK_DATA the whole file is copied, as before.
"""

from __future__ import annotations

import errno
import os

_CHUNK = 1 << 20


def _copy_range(source: int, target: int, start: int, end: int) -> None:
    os.lseek(source, start, os.SEEK_SET)
    os.lseek(target, start, os.SEEK_SET)
    position = start
    while position < end:
        chunk = os.read(source, min(_CHUNK, end - position))
        if not chunk:
            break  # the file shrank while being copied; the size check of the caller's hash will tell
        view = memoryview(chunk)
        while view:
            written = os.write(target, view)
            view = view[written:]
        position += len(chunk)


def _data_extents(fd: int, size: int) -> list[tuple[int, int]] | None:
    """(start, end) of every data region, or None when the file system cannot say."""
    extents = []
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                break  # only a hole remains
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return None
            raise
        end = os.lseek(fd, start, os.SEEK_HOLE)
        extents.append((start, end))
        offset = end
    return extents


def copy_fd_preserving_holes(source: int, target: int) -> None:
    """Copy the open file `source` into the open, empty file `target`, keeping holes as holes."""
    size = os.fstat(source).st_size
    extents = _data_extents(source, size)
    for start, end in extents if extents is not None else [(0, size)]:
        _copy_range(source, target, start, end)
    os.ftruncate(target, size)
