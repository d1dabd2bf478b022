"""Taking in a host capture someone sent (`orch doctor --from DIR`): as untrusted as a hand-over (DESIGN.md §5).

A capture is a folder a user mails to the team that owns an image; whoever made it chose every byte, link and
file type in it. So orch never reads it in place. It reads `manifest.json` through the untrusted reader
(`untrusted.py`: no link at any component, regular files only, size checked before a byte is read, opened
non-blocking) and validates it with `CaptureManifest`; then it copies, by the same reader, the files the
manifest names and every file under `root/` into a private folder of its own, and the host collectors read
that copy. A link, a FIFO, a device, a file over its bound, too many files or too deep a tree, a path field
that is not a plain relative path, a field of the wrong type: each is one `CaptureError` (bad input, exit 2)
naming the file or field and what to do; nothing is read from outside the folder.

Memory is bounded: the manifest at `MANIFEST_MAX_BYTES`, any one file at `FILE_MAX_BYTES` (read whole, then
written to the copy), the copy at `TOTAL_MAX_BYTES`, `MAX_FILES` files, `MAX_DEPTH` folders deep. A real
capture is a few hundred KB (its largest file is `nvidia-smi -q` on an 8-GPU host, about 100 KB).
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import CaptureError, OutputMissing, UnsafeOutput
from orchestrator.untrusted import parse_json, read_output_bytes

FORMAT = "orch-host-capture/1"
MANIFEST_MAX_BYTES = 1 << 20
FILE_MAX_BYTES = 8 << 20
TOTAL_MAX_BYTES = 64 << 20
MAX_FILES = 10_000
MAX_DEPTH = 24

_AGAIN = "capture the host again with `orch doctor --capture DIR` and send that folder"
_PLAIN = re.compile(r"[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)*")


def _plain_relative(value: str) -> str:
    """A path the manifest names: relative, inside the capture, no `.`/`..` component, no odd character."""
    if len(value) > 300 or not _PLAIN.fullmatch(value) or any(part in (".", "..") for part in value.split("/")):
        raise ValueError("not a plain relative path inside the capture folder")
    return value


PlainPath = Annotated[str, AfterValidator(_plain_relative)]
Text = Annotated[str, Field(max_length=4096)]


class CommandEntry(BaseModel):
    """One captured command: its argv, and its exit status and stored stdout when it ran."""

    model_config = ConfigDict(extra="allow", strict=True)

    argv: list[Text] = Field(min_length=1, max_length=32)
    missing: bool = False
    error: Text | None = None
    returncode: int | None = None
    stdout: PlainPath | None = None
    stderr_first_line: Text = ""


class LogEntry(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    name: Annotated[str, Field(min_length=1, max_length=200)]
    file: PlainPath


class CaptureManifest(BaseModel):
    """manifest.json of a capture (host/capture.py `write_capture` writes it). Extra keys are kept (a corpus
    entry's provenance), never read."""

    model_config = ConfigDict(extra="allow", strict=True)

    format: Literal["orch-host-capture/1"]
    commands: list[CommandEntry] = Field(default_factory=list, max_length=100)
    files: list[Text] = Field(default_factory=list, max_length=MAX_FILES)
    devices: list[Text] = Field(default_factory=list, max_length=1000)
    env: dict[Text, Text] = Field(default_factory=dict, max_length=200)
    logs: list[LogEntry] = Field(default_factory=list, max_length=100)


def _refused(error: UnsafeOutput | OutputMissing, folder: Path, what: str) -> CaptureError:
    return CaptureError(f"{folder}: {error}; {what}")


def _manifest(folder: Path) -> dict[str, Any]:
    path = folder / "manifest.json"
    try:
        data = read_output_bytes(folder, "manifest.json", MANIFEST_MAX_BYTES)
    except OutputMissing:
        raise CaptureError(f"{path}: not found; is {folder} an `orch doctor --capture` folder?") from None
    except UnsafeOutput as error:
        raise _refused(error, folder, _AGAIN) from None
    try:
        parsed = parse_json(data, str(path))
    except UnsafeOutput as error:
        raise CaptureError(f"{error}; the capture is damaged: {_AGAIN}") from None
    if not isinstance(parsed, dict) or parsed.get("format") != FORMAT:
        raise CaptureError(f"{path}: format is not {FORMAT!r}; capture it again with this orch")
    try:
        return CaptureManifest.model_validate(parsed).model_dump(exclude_none=True)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise CaptureError(f"{path}: field {field!r}: {first['msg']}; the capture is damaged: {_AGAIN}") from None


class _Budget:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.bytes = TOTAL_MAX_BYTES
        self.files = MAX_FILES

    def take(self, relative: str, size: int) -> None:
        self.files -= 1
        self.bytes -= size
        if self.files < 0:
            raise CaptureError(f"{self.folder}: holds more than {MAX_FILES} files; {_AGAIN}")
        if self.bytes < 0:
            raise CaptureError(
                f"{self.folder}/{relative}: the capture is over {TOTAL_MAX_BYTES >> 20} MiB in all; {_AGAIN}"
            )


def _copy_file(folder: Path, relative: str, copy: Path, budget: _Budget) -> None:
    try:
        data = read_output_bytes(folder, relative, FILE_MAX_BYTES)
    except (UnsafeOutput, OutputMissing) as error:
        raise _refused(error, folder, _AGAIN) from None
    budget.take(relative, len(data))
    target = copy / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _copy_tree(folder: Path, relative: str, copy: Path, budget: _Budget, depth: int = 0) -> None:
    """Every regular file under `folder/relative`, copied; a link or any other kind of file refused."""
    if depth > MAX_DEPTH:
        raise CaptureError(f"{folder}/{relative}: folders nested over {MAX_DEPTH} deep; {_AGAIN}")
    (copy / relative).mkdir(parents=True, exist_ok=True)
    with os.scandir(folder / relative) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        child = f"{relative}/{name}"
        if not _PLAIN.fullmatch(name):
            raise CaptureError(
                f"{folder}/{relative}: an entry has a name a capture never holds ({name[:80]!r}); {_AGAIN}"
            )
        info = os.lstat(folder / child)
        if stat.S_ISLNK(info.st_mode):
            raise CaptureError(
                f"{folder}/{child}: is a symbolic link; orch never follows links in a capture (it copies files "
                f"as text); {_AGAIN}"
            )
        if stat.S_ISDIR(info.st_mode):
            _copy_tree(folder, child, copy, budget, depth + 1)
        elif stat.S_ISREG(info.st_mode):
            _copy_file(folder, child, copy, budget)
        else:
            raise CaptureError(
                f"{folder}/{child}: is not a regular file (a FIFO, socket or device); a capture holds regular "
                f"files only (device nodes are empty placeholder files); {_AGAIN}"
            )


def take_in(folder: Path) -> tuple[dict[str, Any], Path]:
    """The capture's validated manifest and a private copy of its files (the caller removes the copy)."""
    try:
        info = os.lstat(folder)
    except OSError as error:
        raise CaptureError(
            f"{folder}: not readable ({error.strerror}); give an `orch doctor --capture` folder"
        ) from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise CaptureError(f"{folder}: is not a folder (a link to one is refused too); give the capture folder itself")
    manifest = _manifest(folder)
    copy = Path(tempfile.mkdtemp(prefix="orch-capture-"))
    try:
        budget = _Budget(folder)
        named = [entry["stdout"] for entry in manifest.get("commands", []) if "stdout" in entry]
        named += [entry["file"] for entry in manifest.get("logs", [])]
        for relative in sorted(set(named)):
            _copy_file(folder, relative, copy, budget)
        root = folder / "root"
        if os.path.lexists(root):
            if stat.S_ISLNK(os.lstat(root).st_mode) or not root.is_dir():
                raise CaptureError(f"{root}: is not a folder (a link is refused); {_AGAIN}")
            _copy_tree(folder, "root", copy, budget)
    except BaseException:
        shutil.rmtree(copy, ignore_errors=True)
        raise
    return manifest, copy


def confined_spec_dir(spec_dir: str, source: str) -> str:
    """A CDI spec directory named in a captured `docker info`, as an absolute path with no `..`: it is read
    inside the capture's copy of the host's files, never on this host."""
    normal = posixpath.normpath(spec_dir)
    if (
        not spec_dir.startswith("/")
        or ".." in spec_dir.split("/")
        or normal != spec_dir.rstrip("/")
        or "\0" in spec_dir
    ):
        raise CaptureError(
            f"{source}: CDI spec directory {spec_dir[:120]!r} is not a plain absolute path; the capture is damaged: "
            f"{_AGAIN}"
        )
    return normal
