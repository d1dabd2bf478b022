"""The build context as the daemon receives it: one tar, normalised so the layer cache can hit.

Every entry is owned by root (uid/gid 0, no names), has a fixed mtime and a mode that only keeps the
executable bit, and entries come in sorted order. Two renders of the same dossier therefore give the
same tar byte for byte, wherever the files came from (a git checkout, a copy, another user's umask).
The tar is spooled: it stays in memory up to `MEMORY_LIMIT` and spills to a temporary file beyond it,
so a multi-gigabyte CUDA wheelhouse does not need gigabytes of RAM.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from orchestrator.context import MARKER

MEMORY_LIMIT = 256 * 1024 * 1024
#: 2000-01-01T00:00:00Z: any fixed instant works; a recognisable one makes the normalisation visible.
FIXED_MTIME = 946_684_800
_SKIP = {MARKER}


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = FIXED_MTIME
    if info.isdir():
        info.mode = 0o755
    elif info.isfile():
        info.mode = 0o755 if info.mode & 0o111 else 0o644
    return info


def context_tar(directory: Path) -> IO[bytes]:
    """A normalised tar of `directory`, positioned at its start (the caller closes it)."""
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=MEMORY_LIMIT)  # noqa: SIM115 - returned open
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for root, dirs, files in os.walk(directory):
            dirs.sort()
            base = Path(root)
            for name in [*sorted(dirs), *sorted(files)]:
                path = base / name
                relative = path.relative_to(directory).as_posix()
                if relative in _SKIP:
                    continue
                info = _normalise(tar.gettarinfo(str(path), arcname=relative))
                if info.isfile():  # links and folders carry no content
                    with path.open("rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info)
    spool.seek(0)
    return spool


def context_digest(directory: Path) -> str:
    """sha256 of the normalised tar: equal digests mean the daemon receives identical contexts."""
    digest = hashlib.sha256()
    with context_tar(directory) as tar:
        for chunk in iter(lambda: tar.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
