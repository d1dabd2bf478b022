"""The dossier's folder is untrusted: how every path it names is located, walked and read.

One rule, checked when the dossier is loaded (so `orch validate` already refuses) and again wherever
files are copied (build context, hand-over):

* Every path the dossier names is **relative to the dossier's folder and stays inside it**: no absolute
  path, no `..`, no NUL byte.
* A **symlink is followed only when its target, fully resolved, lies inside the dossier's folder**. Such
  a link is recorded (`LoadedDossier.links`: link → target, both folder-relative) and read as the file
  or folder it points to: the build context, the image and the hand-over receive the content as a
  regular file, never the link. Any other link — leaving the folder, dangling, or a loop — is refused,
  naming the link and its target.
* Only regular files and folders are read. A FIFO, socket or device is refused by its kind, found with
  `lstat`/`stat` and never opened (opening a FIFO would block); a folder where a file is expected (and
  the reverse) is said as such, not as "does not exist".

There is no "allowed root" outside the folder: the dossier is the untrusted party, so it cannot widen
its own boundary. A file that lives elsewhere (big weights on a shared disk) is copied or hard-linked
into the folder; its sha256 in the dossier is what makes it the reference.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from orchestrator.errors import DossierError
from orchestrator.sparse_copy import copy_fd_preserving_holes

# Files and folders that never belong to an application's identity or build context.
IGNORED_NAMES = frozenset({".git", "__pycache__", ".mypy_cache", ".pytest_cache", ".venv", ".DS_Store"})

#: What a path must be: a regular file, a folder, or either ("any": data, weights and sample inputs, where a
#: folder is one item with a tree fingerprint).
Kind = Literal["file", "folder", "any"]
#: Called with the number of bytes just hashed (drives a progress bar over a large dossier).
OnBytes = Callable[[int], None]

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Where:
    """The dossier field an error is about: its file, field path and line."""

    file: str
    field: str | None = None
    line: int | None = None

    def error(self, message: str) -> DossierError:
        return DossierError(self.file, message, field=self.field, line=self.line)


class NotRegularFile(OSError):
    """A path that was expected to be a regular file is something else (found without blocking)."""


def describe_mode(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def _open_regular(path: Path, flags: int) -> int:
    """A descriptor on `path`, checked with fstat to be a regular file (else closed and refused)."""
    fd = os.open(path, flags)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(errno.EINVAL, f"{describe_mode(mode)}, not a regular file", str(path))
    return fd


def file_sha256(path: Path, on_bytes: OnBytes | None = None) -> str:
    """sha256 of a regular file, streamed. Anything else raises `NotRegularFile` without blocking.

    O_NONBLOCK makes opening a FIFO return at once (a plain open waits for a writer forever); fstat on
    the open descriptor then tells what was really opened, whatever was checked before.
    """
    fd = _open_regular(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        digest = hashlib.sha256()
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return digest.hexdigest()


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _shown(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if _inside(path, root) and path != root else str(path)


def check_relative(relative: str, where: Where) -> PurePosixPath:
    """The lexical rule: relative, normal, no NUL byte. Checked before any system call sees the path."""
    if "\0" in relative:
        raise where.error(f"the path {relative!r} contains a NUL byte; give a plain relative path")
    if not relative.strip():
        raise where.error("the path is empty; give a path relative to the dossier's folder")
    pure = PurePosixPath(relative)
    if pure.is_absolute():
        raise where.error(
            f"{relative!r} is an absolute path: paths in a dossier are relative to its folder and stay inside it "
            "(move or copy it into the dossier's folder)"
        )
    if ".." in pure.parts:
        raise where.error(
            f"{relative!r} uses '..': paths in a dossier stay inside its folder (copy the file into the folder)"
        )
    return pure


def _follow(link: Path, root: Path, where: Where) -> Path:
    """The resolved target of the symlink `link`, which must lie inside `root`."""
    try:
        target = os.readlink(link)
    except OSError as exc:
        raise where.error(f"cannot read the symlink {_shown(link, root)!r}: {exc.strerror}") from None
    try:
        real = Path(os.path.realpath(link, strict=True))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise where.error(f"{_shown(link, root)!r} is a symlink loop (it points to {target!r})") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise where.error(f"{_shown(link, root)!r} is a symlink to {target!r}, which does not exist") from None
        raise where.error(f"cannot follow the symlink {_shown(link, root)!r}: {exc.strerror}") from None
    if not _inside(real, root):
        resolved = "" if target == str(real) else f" (resolved: {real})"
        raise where.error(
            f"{_shown(link, root)!r} is a symlink to {target!r}{resolved}, outside the dossier's folder {root}: "
            "orch never follows a link out of it; copy the file into the folder instead"
        )
    return real


def locate(root: Path, relative: str, kind: Kind, where: Where, links: dict[str, str] | None = None) -> Path:
    """The real path of `relative` under `root` (the dossier's resolved folder), checked against the rule.

    Walks one component at a time with lstat, so a link anywhere on the way is seen, named and checked
    before it is followed. Links that are followed are added to `links`.
    """
    pure = check_relative(relative, where)
    current = root
    for part in pure.parts:
        candidate = current / part
        try:
            mode = os.lstat(candidate).st_mode
        except FileNotFoundError:
            raise where.error(f"{kind} {relative!r} does not exist (looked at {candidate})") from None
        except NotADirectoryError:
            raise where.error(f"{_shown(current, root)!r} is a file, so {relative!r} cannot be under it") from None
        except OSError as exc:
            raise where.error(f"cannot read {candidate}: {exc.strerror}") from None
        if stat.S_ISLNK(mode):
            real = _follow(candidate, root, where)
            if links is not None:
                links[_shown(candidate, root)] = _shown(real, root) if real != root else "."
            current = real
        else:
            current = candidate
    mode = os.stat(current).st_mode  # `current` is real: no link left to follow
    if kind == "file" and not stat.S_ISREG(mode):
        expected = "a regular file is expected"
        raise where.error(f"{relative!r} is {describe_mode(mode)}; {expected}")
    if kind == "folder" and not stat.S_ISDIR(mode):
        raise where.error(f"{relative!r} is {describe_mode(mode)}; a folder is expected")
    if kind == "any" and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise where.error(f"{relative!r} is {describe_mode(mode)}; a regular file or a folder is expected")
    return current


@dataclass(frozen=True)
class TreeFile:
    relative: PurePosixPath  # where it sits in the tree, as the user sees it (through any link)
    real: Path  # the regular file to read


def walk_tree(folder: Path, root: Path, where: Where, links: dict[str, str] | None = None) -> Iterator[TreeFile]:
    """Regular files under `folder` (a real path inside `root`), in a stable order, by the rule above.

    VCS and cache folders are skipped. A followed link to a folder is walked as that folder; a link back
    to a folder already being walked is refused (it would never end).
    """

    def walk(directory: Path, prefix: PurePosixPath, ancestors: frozenset[Path]) -> Iterator[TreeFile]:
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            raise where.error(f"cannot list {directory}: {exc.strerror}") from None
        for name in names:
            if name in IGNORED_NAMES or name.endswith(".pyc"):
                continue
            path = directory / name
            relative = prefix / name
            mode = os.lstat(path).st_mode
            real = path
            if stat.S_ISLNK(mode):
                real = _follow(path, root, where)
                mode = os.stat(real).st_mode
                if links is not None:
                    links[_shown(path, root)] = _shown(real, root) if real != root else "."
            if stat.S_ISDIR(mode):
                if real in ancestors:
                    raise where.error(
                        f"{_shown(path, root)!r} loops back to a folder that contains it ({_shown(real, root)!r})"
                    )
                yield from walk(real, relative, ancestors | {real})
            elif stat.S_ISREG(mode):
                yield TreeFile(relative, real)
            else:
                raise where.error(
                    f"{_shown(path, root)!r} is {describe_mode(mode)}; only regular files and folders are read"
                )

    yield from walk(folder, PurePosixPath(), frozenset({folder}))


def tree_sha256(files: list[TreeFile], on_bytes: OnBytes | None = None) -> str:
    digest = hashlib.sha256()
    for entry in files:
        digest.update(entry.relative.as_posix().encode() + b"\0" + file_sha256(entry.real, on_bytes).encode() + b"\n")
    return digest.hexdigest()


def path_sha256(root: Path, relative: str, where: Where) -> str:
    """The fingerprint of a dossier path that may be a file or a folder: a file's sha256, or a folder's tree hash
    (each regular file's relative path and sha256, in order: `tree_sha256`), located and walked by the rule."""
    target = locate(root, relative, "any", where)
    return tree_sha256(list(walk_tree(target, root, where))) if target.is_dir() else file_sha256(target)


def copy_tree(files: list[TreeFile], dest: Path) -> None:
    """Copy the walked files into `dest` as regular files (content and executable bit; links never kept)."""
    for entry in files:
        target = dest.joinpath(*entry.relative.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        copy_regular_file(entry.real, target)


def copy_regular_file(source: Path, target: Path) -> None:
    """Copy one regular file (checked on the open descriptor, so a swap to a FIFO or link cannot slip in).

    Holes stay holes (a 2 GB sparse input would otherwise take 2 GB in a context or a hand-over).
    """
    fd = _open_regular(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    info = os.fstat(fd)
    with os.fdopen(fd, "rb") as handle, target.open("wb") as out:
        copy_fd_preserving_holes(handle.fileno(), out.fileno())
    target.chmod(0o755 if info.st_mode & 0o111 else 0o644)
