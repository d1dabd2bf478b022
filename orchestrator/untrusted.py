"""Reading what a container wrote: never followed, regular files only, size-bounded, streams capped.

A compromised package controls everything the sample writes to /orch/output and /orch/meta, and every
byte a container prints (DESIGN.md §5, trust boundaries). So the host:

- walks the path one component at a time from the folder it handed to the container, refusing a
  symbolic link at any component (`lstat` first, then `open(O_NOFOLLOW)` relative to the parent's
  descriptor, and the opened inode must be the one checked), so a link planted by the container is
  never followed to a host file;
- accepts only a regular file (a FIFO would block the reader, a device would be read forever) and only
  up to a size stated by the caller, checked before any byte is read;
- parses JSON from bytes it bounded itself, turning every way a document can be wrong (not UTF-8, not
  JSON, a number too long for Python, nesting too deep) into one `UnsafeOutput` naming the file;
- keeps at most a stated number of bytes of a container's stdout/stderr (`CappedStream`): the head and
  the tail, with a note of how many bytes were cut in between.

A refusal is a failed check of the stage that read the file, never a crash and never silently read.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from orchestrator.errors import OutputMissing, UnsafeOutput

_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _display(root: Path, parts: list[str]) -> str:
    return "/".join([root.name, *parts])


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _link_message(fd: int, name: str) -> str:
    try:
        target = os.readlink(name, dir_fd=fd)
    except OSError:
        target = "?"
    # The target is only a string the container wrote; it is named (cut) to help, never opened.
    return f"is a symbolic link (to {target[:200]!r}); orch never follows links a container writes"


def open_output(root: Path, relative: str, max_bytes: int, *, limit_hint: str = "") -> BinaryIO:
    """Open `root/relative` for reading, refusing links, non-regular files and files over `max_bytes`.

    `root` is the folder the host created and mounted into the container; `relative` comes from the
    dossier (already checked to stay inside). The caller closes the returned file.
    """
    parts = relative.split("/")
    if not relative or relative.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise UnsafeOutput(_display(root, [relative]), "is not a plain relative path inside the output folder")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for depth, name in enumerate(parts):
            here = _display(root, parts[: depth + 1])
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                raise OutputMissing(here, "does not exist") from None
            except NotADirectoryError:
                raise OutputMissing(here, "does not exist (a parent is not a folder)") from None
            if stat.S_ISLNK(info.st_mode):
                raise UnsafeOutput(here, _link_message(fd, name))
            last = depth == len(parts) - 1
            if not last:
                if not stat.S_ISDIR(info.st_mode):
                    raise OutputMissing(here, "is not a folder")
                flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            else:
                if not stat.S_ISREG(info.st_mode):
                    raise UnsafeOutput(here, f"is {_kind(info.st_mode)}, not a regular file")
                if info.st_size > max_bytes:
                    raise UnsafeOutput(
                        here, f"is {info.st_size} bytes, over the limit of {max_bytes} bytes{limit_hint}"
                    )
                # O_NONBLOCK: if the entry was swapped for a FIFO since the lstat, opening must not hang.
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                child = os.open(name, flags, dir_fd=fd)
            except OSError as exc:
                raise UnsafeOutput(here, f"could not be opened safely: {exc.strerror or exc}") from None
            opened = os.fstat(child)
            if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                os.close(child)
                raise UnsafeOutput(here, "changed while it was being opened")
            os.close(fd)
            fd = child
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_output_bytes(root: Path, relative: str, max_bytes: int, *, limit_hint: str = "") -> bytes:
    with open_output(root, relative, max_bytes, limit_hint=limit_hint) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew after the size check
        raise UnsafeOutput(_display(root, relative.split("/")), f"is over the limit of {max_bytes} bytes{limit_hint}")
    return data


def parse_json(data: bytes, display: str) -> Any:
    """A JSON document from untrusted bytes; every way it can be wrong is an `UnsafeOutput`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnsafeOutput(display, f"is not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise UnsafeOutput(display, "is not usable JSON: nested too deeply") from None
    except ValueError as exc:
        # json.JSONDecodeError, and the int-max-str-digits ValueError of a number with thousands of digits.
        reason = str(exc).splitlines()[0][:200]
        raise UnsafeOutput(display, f"is not valid JSON: {reason}") from None


def parse_json_lines(data: bytes, display: str) -> list[Any]:
    """JSON Lines from untrusted bytes: one document per non-blank line."""
    out: list[Any] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if line.strip():
            out.append(parse_json(line, f"{display} line {number}"))
    return out


def read_output_json(root: Path, relative: str, max_bytes: int, *, limit_hint: str = "") -> Any:
    data = read_output_bytes(root, relative, max_bytes, limit_hint=limit_hint)
    return parse_json(data, _display(root, relative.split("/")))


class CappedStream:
    """A byte stream kept within `limit` bytes: the first `head` bytes and the last ones, cut counted.

    Why both ends: a sample's start-up lines say what ran, its last lines why it stopped; a probe's JSON
    report is its last line. Memory stays O(limit) however much the container prints.
    """

    def __init__(self, limit: int, head: int | None = None) -> None:
        self.limit = limit
        self.head_limit = min(limit, head if head is not None else limit // 8)
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    @property
    def tail_limit(self) -> int:
        return self.limit - self.head_limit

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            if len(self._tail) > self.tail_limit:
                del self._tail[: len(self._tail) - self.tail_limit]

    @property
    def cut(self) -> int:
        return self.total - len(self._head) - len(self._tail)

    def text(self) -> str:
        if not self.cut:
            return (bytes(self._head) + bytes(self._tail)).decode("utf-8", errors="replace")
        note = f"\n[orch: {self.cut} bytes cut here; the container printed {self.total} bytes, {self.limit} are kept]\n"
        return (
            bytes(self._head).decode("utf-8", errors="replace")
            + note
            + bytes(self._tail).decode("utf-8", errors="replace")
        )


def last_line(text: str, limit: int = 300) -> str | None:
    """The last non-blank line of a container's output, cut to `limit` characters for a report."""
    for line in reversed(text.splitlines()):
        kept = line.strip()
        if kept:
            return kept if len(kept) <= limit else kept[: limit - 1] + "…"
    return None


def last_words(text: str) -> str:
    """A process's last non-blank line (`last_line`), or `no output` when it printed nothing."""
    return last_line(text) or "no output"


def exited(exit_code: int | None, stderr: str) -> str:
    """`exited N: <its last line>`: the one way orch says a process or container stopped on its own."""
    return f"exited {exit_code}: {last_words(stderr)}"
