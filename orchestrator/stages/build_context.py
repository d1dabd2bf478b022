"""The build context as the daemon receives it: one tar, normalised so the layer cache can hit.

Every entry is owned by root (uid/gid 0, no names), has a fixed mtime and a mode that only keeps the
executable bit, and entries come in sorted order. Two renders of the same dossier therefore give the
same tar byte for byte, wherever the files came from (a git checkout, a copy, another user's umask).
The tar is held in memory up to `MEMORY_LIMIT` and written to an unnamed temporary file beyond it, so a
multi-gigabyte CUDA wheelhouse does not need gigabytes of RAM.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import secrets
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from orchestrator.engine import Engine, ServiceSpec
from orchestrator.plan.builder import CONTEXT_SERVER_ROOT
from orchestrator.stages.context import MARKER

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


class _HashingWriter:
    """Writes through to `target` and hashes on the way, so the tar is read once, not twice."""

    def __init__(self, target: IO[bytes]) -> None:
        self.target = target
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.target.write(data)

    def tell(self) -> int:
        return self.target.tell()


@dataclass
class ContextTar:
    file: IO[bytes]  # positioned at the start; the caller closes it
    sha256: str


def _entries(directory: Path, only: Sequence[str] | None = None) -> Iterator[tuple[str, Path]]:
    """(relative path, path) of every entry, in the order the tar holds them; with `only`, the entries at
    or under those top-level names."""
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        base = Path(root)
        for name in [*sorted(dirs), *sorted(files)]:
            path = base / name
            relative = path.relative_to(directory).as_posix()
            if relative in _SKIP or (only is not None and relative.split("/", 1)[0] not in only):
                continue
            yield relative, path


def context_digest(directory: Path, known: Mapping[str, str] | None = None) -> str:
    """sha256 of the context's content, without building its tar: each entry's path, kind, mode as the tar
    normalises it, and content sha256, in the tar's order. Equal digests: the engine would receive the same
    files. `known` maps relative paths to sha256 already verified (the wheelhouse's wheels, checked against
    the lock's hashes), so a warm build does not read hundreds of megabytes to learn what it knows.
    """
    known = known or {}
    digest = hashlib.sha256()
    for relative, path in _entries(directory):
        if path.is_symlink():
            line = f"l {relative} {os.readlink(path)}"
        elif path.is_dir():
            line = f"d {relative}"
        else:
            mode = "755" if path.stat().st_mode & 0o111 else "644"
            content = known.get(relative)
            if content is None:
                with path.open("rb") as handle:
                    content = hashlib.file_digest(handle, "sha256").hexdigest()
            line = f"f {relative} {mode} {content}"
        digest.update(line.encode("utf-8", errors="surrogateescape") + b"\n")
    return digest.hexdigest()


def context_tar(directory: Path, *, only: Sequence[str] | None = None, prefix: str = "") -> ContextTar:
    """A normalised tar of `directory` and its sha256 (equal digests: the engine receives identical contexts).

    `only` keeps the named top-level entries (the wheel feed's lock and wheels), `prefix` puts every entry
    under that folder (the feed's `/feed`). A feed build's context leaves the wheels out: the feed serves them.
    """
    # A BytesIO or a real file, never a SpooledTemporaryFile: requests cannot size the latter and falls
    # back to chunked uploads, which made every build's upload ~60% slower (benchmarks/build_overhead.py).
    entries = list(_entries(directory, only))
    size = sum(path.stat().st_size for _, path in entries if path.is_file() and not path.is_symlink())
    spool: IO[bytes] = (
        io.BytesIO() if size < MEMORY_LIMIT else tempfile.TemporaryFile()  # noqa: SIM115 - returned open
    )
    writer = _HashingWriter(spool)
    with tarfile.open(fileobj=writer, mode="w", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        tar.copybufsize = 1 << 20  # 16 KiB by default: 200 MB of wheels would take 13,000 Python-level copies
        if prefix:
            tar.addfile(_normalise(tar.gettarinfo(str(directory), arcname=prefix)))
        for relative, path in entries:
            info = _normalise(tar.gettarinfo(str(path), arcname=f"{prefix}/{relative}" if prefix else relative))
            if info.isfile():  # links and folders carry no content
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    spool.seek(0)
    return ContextTar(file=spool, sha256=writer.digest.hexdigest())


def served_context_tar(
    directory: Path, member: str, *, only: Sequence[str] | None = None, files: Mapping[str, bytes] | None = None
) -> IO[bytes]:
    """A tar holding one file, `member`: the normalised context tar of `directory` (BuildKit's remote context,
    put into orch's context server with the archive API), and an empty `index.html` at the top so the server
    lists no folder (the member's path holds a random token: only the engine, told the URL, fetches it).
    `only` keeps the named top-level entries of `directory` (the build's context leaves wheels/ out: they
    are mounted from the wheels image); `files` come first, at the top (the wheels image's Dockerfile).

    Written in one pass into one temporary file: the member's header slot is reserved, the context tar is
    written after it, then the header is filled in with the size now known (GNU format: base-256 sizes, so a
    CUDA wheelhouse over 8 GiB fits one header block).
    """
    top, _, _ = member.partition("/")
    spool: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - returned open
    index = tarfile.TarInfo(f"{top}/index.html")
    index.mtime, index.mode = FIXED_MTIME, 0o644
    spool.write(index.tobuf(tarfile.GNU_FORMAT))
    slot = spool.tell()
    spool.write(bytes(tarfile.BLOCKSIZE))
    with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.copybufsize = 1 << 20  # type: ignore[attr-defined]  # tarfile's own knob, not in typeshed
        for name, data in sorted((files or {}).items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), FIXED_MTIME, 0o644
            tar.addfile(info, io.BytesIO(data))
        for relative, path in _entries(directory, only):
            info = _normalise(tar.gettarinfo(str(path), arcname=relative))
            if info.isfile():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    # tarfile closed the inner archive (its end blocks and record padding) without closing `spool`.
    size = spool.tell() - slot - tarfile.BLOCKSIZE
    spool.write(bytes(tarfile.BLOCKSIZE * 2))
    header = tarfile.TarInfo(member)
    header.size, header.mtime, header.mode = size, FIXED_MTIME, 0o644
    spool.seek(slot)
    spool.write(header.tobuf(tarfile.GNU_FORMAT))
    spool.seek(0)
    return spool


@contextlib.contextmanager
def served_build_context(
    engine: Engine,
    server: ServiceSpec,
    directory: Path,
    *,
    only: Sequence[str] | None = None,
    files: Mapping[str, bytes] | None = None,
) -> Iterator[str]:
    """The URL the engine fetches the context tar from, while orch's context server serves it."""
    # Only the engine is told the URL; another container on the bridge cannot guess the path (no listing).
    member = f"{CONTEXT_SERVER_ROOT}/{secrets.token_hex(16)}/context.tar"
    tar = served_context_tar(directory, member, only=only, files=files)
    with tar as served, engine.serve(server, served) as running:
        assert running.url is not None
        yield running.url + member.partition("/")[2]
