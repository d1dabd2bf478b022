"""A hand-over folder read as untrusted input: its names, its files and its checksums, checked before use.

A checksum file is not a signature: whoever can change a file can regenerate SHA256SUMS and
manifest.json. So nothing they name is opened until it is known to be a plain, relative name of a
regular file that lies inside the folder, reached through no symlink:

- the folder is walked without following anything; a symlink anywhere (file or folder, listed or
  not), a FIFO, a socket or a device is refused, so an unlisted symlinked folder cannot hide files
  from the "no file added" check and no read can leave the folder;
- every name in SHA256SUMS and manifest.json must be normal (no absolute path, no `..`, no `.`, no
  empty part, no backslash, no NUL or control character) and one of the files found by that walk,
  before any file is hashed — so a line naming a host path is refused unread, never hashed, and
  cannot confirm or deny what that host file holds;
- only then are the files hashed, each opened with O_NOFOLLOW.

image.tar.gz may be missing only when the manifest records the image's repository digest
(`registry/repository@sha256:…`, a digest-pinned reference by the registry grammar): `orch verify` pulls it.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from orchestrator.errors import BadInput, HandoverDamaged, ImageReferenceError
from orchestrator.model.image_ref import parse_pinned
from orchestrator.model.manifest import Manifest
from orchestrator.stages.attestations import ATTESTATION_NAMES
from orchestrator.stages.handover import IMAGE_FILE, MANIFEST_FILE, SUMS_FILE, read_manifest

#: Bounds on the small text files read whole: far above any real hand-over, far below host trouble.
MAX_SUMS_BYTES = 8 << 20
MAX_FILES = 100_000
_HEX64 = re.compile(r"[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def safe_relative(name: str, what: str) -> str:
    """`name` if it is a normal relative POSIX path inside a folder, else HandoverDamaged naming `what`."""
    shown = ascii(name) if len(name) <= 120 else ascii(name[:120]) + "…"
    problem = None
    if not name:
        problem = "is empty"
    elif _CONTROL.search(name):
        problem = "holds a NUL or control character"
    elif "\\" in name:
        problem = "holds a backslash"
    elif name.startswith("/"):
        problem = "is absolute"
    elif any(part in ("", ".", "..") for part in name.split("/")):
        problem = "is not a normal relative path (empty part, '.' or '..')"
    if problem is not None:
        raise HandoverDamaged(f"{what}: the path {shown} {problem}; a hand-over names only files inside its folder")
    return name


def scan_folder(folder: Path) -> dict[str, int]:
    """Every regular file under `folder` (relative POSIX name → size), following nothing.

    A symlink or any other non-regular entry anywhere is refused by name.
    """
    found: dict[str, int] = {}
    pending = [PurePosixPath()]
    while pending:
        relative = pending.pop()
        try:
            entries = sorted(os.scandir(folder / relative), key=lambda entry: entry.name)
        except OSError as exc:
            raise HandoverDamaged(f"{relative.as_posix() or '.'}: cannot be listed ({exc.strerror})") from None
        for entry in entries:
            name = (relative / entry.name).as_posix()
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                raise HandoverDamaged(
                    f"{name} is a symlink; a hand-over folder holds only regular files and folders "
                    "(a symlink could lead outside it)"
                )
            if stat.S_ISDIR(mode):
                pending.append(relative / entry.name)
            elif stat.S_ISREG(mode):
                found[name] = entry.stat(follow_symlinks=False).st_size
                if len(found) > MAX_FILES:
                    raise HandoverDamaged(f"the folder holds more than {MAX_FILES} files; no hand-over is that large")
            else:
                raise HandoverDamaged(f"{name} is not a regular file (a FIFO, socket or device)")
    return found


def open_inside(folder: Path, name: str) -> int:
    """A read-only descriptor of `folder/name`, refusing a symlink in the last part (checked names only)."""
    return os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)


def sha256_inside(folder: Path, name: str) -> str:
    digest = hashlib.sha256()
    with os.fdopen(open_inside(folder, name), "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise HandoverDamaged(f"{name} is not a regular file")
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_sums(folder: Path) -> dict[str, str]:
    """SHA256SUMS as name → sha256, every line and name checked; nothing it names is opened here."""
    try:
        with os.fdopen(open_inside(folder, SUMS_FILE), "rb") as handle:
            raw = handle.read(MAX_SUMS_BYTES + 1)
    except OSError as exc:
        raise HandoverDamaged(f"{SUMS_FILE} cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_SUMS_BYTES:
        raise HandoverDamaged(f"{SUMS_FILE} is larger than {MAX_SUMS_BYTES >> 20} MiB; orch writes one line per file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HandoverDamaged(
            f"{SUMS_FILE} is not UTF-8 text (byte {exc.start}); it was damaged or rewritten"
        ) from None
    listed: dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        if not line and number > text.count("\n"):
            break  # the final newline
        digest, separator, name = line.partition("  ")
        if not separator or not _HEX64.fullmatch(digest):
            raise HandoverDamaged(f"{SUMS_FILE} line {number} is not '<64 lowercase hex digits>  <path>'")
        safe_relative(name, f"{SUMS_FILE} line {number}")
        if name in listed:
            raise HandoverDamaged(f"{SUMS_FILE} line {number} lists {name} a second time")
        listed[name] = digest
    return listed


@dataclass(frozen=True)
class CheckedFolder:
    """A hand-over folder whose every listed file matched its checksum, with what the check read."""

    manifest: Manifest
    #: Every regular file found (relative name → size), attestations included.
    present: dict[str, int]
    #: SHA256SUMS (relative name → sha256), each one already checked against its file's content.
    listed: dict[str, str]


def check_folder(folder: Path) -> Manifest:
    """The hand-over's manifest, once every file is listed, unchanged, and nothing was added or linked."""
    return check_folder_files(folder).manifest


def check_folder_files(folder: Path) -> CheckedFolder:
    """`check_folder`, keeping the walk and the checked sums for the checks after it (one walk, one hash per file).

    Raises HandoverDamaged naming the first problem; BadInput when `folder` is not a folder at all.
    """
    if not folder.is_dir():
        raise BadInput(f"{folder} is not a folder")
    if not (folder / SUMS_FILE).is_file():
        raise HandoverDamaged(
            f"{folder} is not a complete hand-over folder: it has no {SUMS_FILE}",
            hint="An interrupted `orch handover` leaves such a folder; hand over again.",
        )
    present = scan_folder(folder)
    listed = read_sums(folder)
    for name in sorted(listed):
        if name not in present:
            raise HandoverDamaged(f"{name} is listed in {SUMS_FILE} but missing from the folder")
    # The signed attestations attest SHA256SUMS, so they cannot be listed in it; no other name is allowed there.
    extra = sorted(set(present) - set(listed) - {SUMS_FILE} - ATTESTATION_NAMES)
    if extra:
        raise HandoverDamaged(f"{extra[0]} is in the folder but not in {SUMS_FILE}: it was added after the hand-over")
    if MANIFEST_FILE not in listed:
        raise HandoverDamaged(f"{SUMS_FILE} does not cover {MANIFEST_FILE}")
    for name in sorted(listed):
        if sha256_inside(folder, name) != listed[name]:
            raise HandoverDamaged(f"{name} does not match its checksum: the file was changed after the hand-over")
    if present[MANIFEST_FILE] > MAX_SUMS_BYTES:
        raise HandoverDamaged(f"{MANIFEST_FILE} is larger than {MAX_SUMS_BYTES >> 20} MiB; orch writes a few KiB")
    try:
        manifest = read_manifest(folder)
    except BadInput as exc:
        raise HandoverDamaged(
            f"{MANIFEST_FILE}: {exc.message.removeprefix(str(folder / MANIFEST_FILE) + ': ')}"
        ) from None
    _check_manifest(manifest, listed, present)
    if IMAGE_FILE not in listed and manifest.repository_digest is None:
        raise HandoverDamaged(
            f"{SUMS_FILE} does not cover {IMAGE_FILE}, and {MANIFEST_FILE} names no repository digest to pull instead"
        )
    return CheckedFolder(manifest, present, listed)


def _check_manifest(manifest: Manifest, listed: dict[str, str], present: dict[str, int]) -> None:
    """The manifest agrees with SHA256SUMS and the folder: same files, hashes and sizes; sane references."""
    named: set[str] = set()
    for index, entry in enumerate(manifest.files):
        where = f"{MANIFEST_FILE} files[{index}]"
        safe_relative(entry.path, where)
        if entry.path in named:
            raise HandoverDamaged(f"{where} lists {entry.path} a second time")
        named.add(entry.path)
        if listed.get(entry.path) != entry.sha256 or present.get(entry.path) != entry.size:
            raise HandoverDamaged(f"{where} ({entry.path}) disagrees with {SUMS_FILE} or the file's size")
    if named != set(listed) - {MANIFEST_FILE}:
        differing = sorted(named.symmetric_difference(set(listed) - {MANIFEST_FILE}))
        raise HandoverDamaged(f"{MANIFEST_FILE} and {SUMS_FILE} list different files (first: {differing[0]})")
    safe_relative(manifest.dossier_file, f"{MANIFEST_FILE} dossier_file")
    if f"dossier/{manifest.dossier_file}" not in listed:
        raise HandoverDamaged(
            f"{MANIFEST_FILE} dossier_file {manifest.dossier_file!r} is not a file of the folder's dossier/"
        )
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", manifest.image_id):
        raise HandoverDamaged(f"{MANIFEST_FILE} image_id {manifest.image_id[:80]!r} is not 'sha256:<64 hex digits>'")
    if not _HEX64.fullmatch(manifest.identity):
        raise HandoverDamaged(f"{MANIFEST_FILE} identity is not 64 hex digits")
    if manifest.repository_digest is not None:
        try:
            parse_pinned(manifest.repository_digest)
        except ImageReferenceError as exc:
            raise HandoverDamaged(f"{MANIFEST_FILE} repository_digest {exc}") from None
