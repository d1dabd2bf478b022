"""The content-addressed cache of remote items on the host: one folder, shared by builds, probes, nightly cells
and `orch verify` (they find an item by its declared sha256, whoever fetched it).

Layout under the root (`ORCH_SOURCES_DIR`, else `$ORCH_CACHE_DIR/sources`, else `$XDG_CACHE_HOME/orch/sources`, else
`~/.cache/orch/sources`: beside the wheel cache, `wheels/`):

- `objects/<sha256>`: a fetched file, or a folder whose tree hash (dossier/paths.py: each regular file's
  relative path and sha256, in order) is `<sha256>`. Put there by an atomic rename once verified, never
  written in place; its mtime is bumped on each use (the pruning order).
- `partial/<sha256>/`: a fetch under way or interrupted: the bytes received so far, resumed by the next fetch
  (a ranged request from where it stopped), removed once the object is in place.
- `locks/<sha256>.lock`: one fetch of an item at a time (two cells of a night wanting the same weights wait
  for each other instead of downloading twice).

Verified before use: `get` hashes the object again every time it hands it out (about 1 GB/s here); an object
whose bytes changed is removed and reported, and the caller fetches it again. The size limit
(`ORCH_CACHE_MAX`, default 100G) is kept after every store by removing the least recently used objects;
`orch cache prune` does it on demand (`--max-size 0` empties the cache). Nothing in the cache is a secret:
credentials are never written, only the bytes they gave access to.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.dossier.paths import NotRegularFile, Where, file_sha256, tree_sha256, walk_tree
from orchestrator.dossier.sources import cached_object
from orchestrator.errors import BadInput

CACHE_DIR_VAR = "ORCH_CACHE_DIR"
SOURCES_DIR_VAR = "ORCH_SOURCES_DIR"
CACHE_MAX_VAR = "ORCH_CACHE_MAX"
DEFAULT_MAX_BYTES = 100 << 30
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.I)


def default_root(environ: Mapping[str, str]) -> Path:
    """`ORCH_SOURCES_DIR` when set (the sources cache alone elsewhere, e.g. on a larger disk); else `sources/` in
    orch's cache folder: `ORCH_CACHE_DIR` (which also holds the wheel cache, `wheels/`), else the XDG cache
    folder's `orch/`."""
    if environ.get(SOURCES_DIR_VAR):
        return Path(environ[SOURCES_DIR_VAR]).expanduser()
    if environ.get(CACHE_DIR_VAR):
        return Path(environ[CACHE_DIR_VAR]).expanduser() / "sources"
    base = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "orch" / "sources"


def parse_size(text: str, *, what: str) -> int:
    """`50G`, `512M`, `1.5T`, `0` (binary units) as bytes; BadInput naming `what` otherwise."""
    match = _SIZE.match(text)
    if not match:
        raise BadInput(f"{what}: {text!r} is not a size", hint="write it as 0, 512M, 50G or 1.5T")
    power = " kmgt".index(match.group(2).lower() or " ")
    return int(float(match.group(1)) * (1 << (10 * power)))


def max_bytes_from(environ: Mapping[str, str]) -> int:
    raw = environ.get(CACHE_MAX_VAR)
    return DEFAULT_MAX_BYTES if not raw else parse_size(raw, what=f"${CACHE_MAX_VAR}")


def content_sha256(path: Path) -> str:
    """A file's sha256, or a folder's tree hash: the same fingerprint as a local data or weights path."""
    if path.is_dir():
        return tree_sha256(list(walk_tree(path, path, Where(str(path)))))
    return file_sha256(path)


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    return path.stat().st_size


@dataclass(frozen=True)
class Entry:
    sha256: str
    path: Path
    size: int
    last_used: float


@dataclass(frozen=True)
class Lookup:
    """What `get` found: the verified object, or why there is none (`changed`: its bytes no longer matched)."""

    path: Path | None
    changed: str | None = None


class ContentCache:
    def __init__(self, root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = root
        self.max_bytes = max_bytes

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> ContentCache:
        return cls(default_root(environ), max_bytes_from(environ))

    # -- where things are ---------------------------------------------------------------------------------------

    def object_path(self, sha256: str) -> Path:
        """Where the item with this fingerprint sits once fetched (what a plan mounts, before it is fetched)."""
        return cached_object(self.root, sha256)

    def partial_dir(self, sha256: str) -> Path:
        return self.root / "partial" / sha256

    # -- reading ------------------------------------------------------------------------------------------------

    def get(self, sha256: str) -> Lookup:
        """The object, hashed again now; one whose bytes changed is removed (the caller fetches it again)."""
        path = self.object_path(sha256)
        if not path.exists() and not path.is_symlink():
            return Lookup(None)
        try:
            observed = content_sha256(path) if not path.is_symlink() else "a symbolic link"
        except (OSError, NotRegularFile, BadInput) as exc:
            observed = f"unreadable ({exc})"
        if observed != sha256:
            _remove(path)
            return Lookup(None, changed=f"cached {path} had sha256 {observed}, not {sha256}: removed")
        with contextlib.suppress(OSError):
            os.utime(path)  # the pruning order: least recently used first
        return Lookup(path)

    def entries(self) -> list[Entry]:
        objects = self.root / "objects"
        if not objects.is_dir():
            return []
        found = []
        for path in objects.iterdir():
            if _SHA256.match(path.name):
                with contextlib.suppress(OSError):
                    found.append(Entry(path.name, path, _size(path), path.lstat().st_mtime))
        return sorted(found, key=lambda entry: entry.last_used)

    # -- writing ------------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, sha256: str) -> Iterator[None]:
        """One fetch of this item at a time, across processes (flock: released if the process dies)."""
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with (locks / f"{sha256}.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def store(self, sha256: str, staged: Path) -> Path:
        """Move a verified file or folder into place (one rename), then keep the size limit around it."""
        target = self.object_path(sha256)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            _remove(target)
        os.replace(staged, target)
        self.prune(self.max_bytes, keep={sha256})
        return target

    def prune(self, max_bytes: int, keep: set[str] | None = None) -> list[Entry]:
        """Remove least recently used objects until the cache holds at most `max_bytes`; also every partial
        fetch when `max_bytes` is 0. The removed entries."""
        entries = self.entries()
        total = sum(entry.size for entry in entries)
        removed: list[Entry] = []
        for entry in entries:
            if total <= max_bytes:
                break
            if keep and entry.sha256 in keep:
                continue
            _remove(entry.path)
            total -= entry.size
            removed.append(entry)
        if max_bytes == 0:
            shutil.rmtree(self.root / "partial", ignore_errors=True)
        return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
