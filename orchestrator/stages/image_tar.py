"""The image tarball of a hand-over (`docker save`, gzip-compressed), read before `docker load` trusts it.

Two passes over the compressed stream, never extracting anything and never holding more than a small,
bounded member in memory:

1. `inspect_image_tar` reads the tar's own manifest.json and hashes its small members. The image id
   is the sha256 of the image's config, and `docker load` checks every layer against the config, so a
   config whose digest equals the hand-over manifest's image id means the tarball can only load that
   image. Its RepoTags must be exactly the tag the hand-over names.
2. `untagged_stream` yields the same tar with RepoTags emptied and the legacy `repositories` file
   left out, so the load creates no tag at all and cannot re-point one on the verifying host (a
   tarball naming `orch/debian-python:bookworm` would otherwise move that tag onto its own image).
   The caller then tags the image by id with a name that only orch uses.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import posixpath
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import HandoverDamaged

#: The tar's manifest.json and image config are small documents; anything larger is not docker save's.
MAX_DOCUMENT_BYTES = 4 << 20
#: Members hashed on the first pass (a config is a few KiB; layers, far larger, are left to docker load).
MAX_HASHED_BYTES = MAX_DOCUMENT_BYTES
#: Files docker load would read for tags besides manifest.json (legacy `repositories`, OCI `index.json`).
TAG_SOURCES = frozenset({"repositories", "index.json"})
IDENTITY_LABEL = "io.orch.dossier.identity"
_BLOCK = tarfile.BLOCKSIZE
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ImageTarFacts:
    image_id: str  # sha256:<hex> of the config
    repo_tags: tuple[str, ...]
    labels: dict[str, str]
    members: int


class _Damaged(Exception):
    """A problem found while reading; turned into HandoverDamaged with the file's name (`_reading`), never let out."""


def _leaves(path: str) -> bool:
    return path.startswith("/") or "\0" in path or posixpath.normpath(path).split("/")[0] == ".."


def _member_name(member: tarfile.TarInfo) -> str:
    """The member's name, once it and any link target stay inside the tar (docker save links only shared layers)."""
    name = member.name
    if _leaves(name):
        raise _Damaged(f"member {name[:120]!r} is not a relative path inside the tar")
    if member.issym() and _leaves(posixpath.join(posixpath.dirname(name), member.linkname)):
        raise _Damaged(f"member {name[:120]!r} links to {member.linkname[:120]!r}, outside the tar")
    if member.islnk() and _leaves(member.linkname):
        raise _Damaged(f"member {name[:120]!r} links to {member.linkname[:120]!r}, outside the tar")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise _Damaged(f"member {name[:120]!r} is a device, FIFO or other special file")
    return name.removeprefix("./")


def _read_bounded(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    if member.size > MAX_DOCUMENT_BYTES:
        raise _Damaged(f"{member.name} is {member.size} bytes, more than a docker save document holds")
    handle = tar.extractfile(member)
    assert handle is not None  # a regular file
    return handle.read()


def _open_stream(path: Path) -> tarfile.TarFile:
    # "r|gz": a forward-only stream; nothing is seeked, extracted or cached but the current member.
    return tarfile.open(path, mode="r|gz")


def _reading(path: Path, what: str) -> HandoverDamaged:
    return HandoverDamaged(f"{path.name}: {what}; it is not the image tarball orch handed over")


def _parse_manifest(raw: bytes) -> dict[str, Any]:
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        raise _Damaged("its manifest.json is not JSON") from None
    if not isinstance(document, list) or len(document) != 1 or not isinstance(document[0], dict):
        raise _Damaged("its manifest.json does not describe exactly one image")
    entry: dict[str, Any] = document[0]
    tags = entry.get("RepoTags") or []
    if (
        not isinstance(entry.get("Config"), str)
        or not isinstance(tags, list)
        or not all(isinstance(t, str) for t in tags)
    ):
        raise _Damaged("its manifest.json has no Config or malformed RepoTags")
    return entry


def familiar_name(reference: str) -> str:
    """A Docker Hub name as Docker shows it: `docker.io/orch/x:1` and `orch/x:1` are one name to `docker load`.

    Podman's save writes the fully qualified form (`docker.io/orch/minilm-embeddings:…`), Docker's the
    familiar one. Any other registry (`localhost/`, `reg:5000/`) is part of the name and stays."""
    for prefix in ("docker.io/", "index.docker.io/"):
        if reference.startswith(prefix):
            rest = reference.removeprefix(prefix)
            return rest.removeprefix("library/") if rest.count("/") == 1 else rest
    return reference


def inspect_image_tar(path: Path, *, image_id: str, tag: str, identity: str) -> ImageTarFacts:
    """The tarball's own facts, once its config is the image `image_id` and it names only `tag`."""
    manifest_raw: bytes | None = None
    digests: dict[str, str] = {}
    config_raw: bytes | None = None  # the one member whose digest is the expected image id
    count = 0
    seen: set[str] = set()
    try:
        with _open_stream(path) as tar:
            for member in tar:
                count += 1
                name = _member_name(member)
                if name.rstrip("/") in seen:
                    # docker load would take the last copy; a reader of the first would be misled.
                    raise _Damaged(f"member {name[:120]!r} appears twice")
                seen.add(name.rstrip("/"))
                if not member.isfile():
                    continue
                if name == "manifest.json":
                    manifest_raw = _read_bounded(tar, member)
                elif member.size <= MAX_HASHED_BYTES:
                    data = _read_bounded(tar, member)
                    digests[name] = hashlib.sha256(data).hexdigest()
                    if "sha256:" + digests[name] == image_id:
                        config_raw = data
        if manifest_raw is None:
            raise _Damaged("it holds no manifest.json")
        entry = _parse_manifest(manifest_raw)
        config_name = entry["Config"].removeprefix("./")
        if config_name not in digests:
            raise _Damaged(f"its manifest.json names config {config_name[:120]!r}, which is not in the tar")
        found = "sha256:" + digests[config_name]
        if found != image_id:
            raise _Damaged(f"it holds image {found[:19]}…, not the manifest's {image_id[:19]}…")
        try:
            config = json.loads(config_raw or b"")
        except (ValueError, RecursionError):
            raise _Damaged("its image config is not JSON") from None
        labels = ((config.get("config") or {}).get("Labels") or {}) if isinstance(config, dict) else {}
        if not isinstance(labels, dict):
            raise _Damaged("its image config has malformed labels")
        tags = tuple(entry.get("RepoTags") or ())
        if tuple(familiar_name(t) for t in tags) != (familiar_name(tag),):
            raise _Damaged(f"it would tag the image {list(tags)!r}, not the manifest's [{tag!r}]")
        if labels.get(IDENTITY_LABEL) != identity:
            raise _Damaged("its image carries another dossier identity than the manifest")
    except _Damaged as exc:
        raise _reading(path, str(exc)) from None
    except (tarfile.TarError, gzip.BadGzipFile, zlib.error, EOFError) as exc:
        raise _reading(path, f"not a complete gzip-compressed tar ({exc or type(exc).__name__})") from None
    return ImageTarFacts(
        image_id=image_id, repo_tags=tags, labels={str(k): str(v) for k, v in labels.items()}, members=count
    )


def _padding(size: int) -> bytes:
    return b"\0" * (-size % _BLOCK)


def untagged_stream(path: Path) -> Iterator[bytes]:
    """The tar of `path`, uncompressed, with RepoTags emptied and the other tag sources left out.

    Meant for a tarball `inspect_image_tar` accepted; a change between the two passes is caught by
    docker load itself (the layers must match the config) or by the image id check after it.
    """
    try:
        with _open_stream(path) as tar:
            for member in tar:
                name = _member_name(member)
                if name in TAG_SOURCES:
                    continue
                if name == "manifest.json":
                    entry = _parse_manifest(_read_bounded(tar, member))
                    entry["RepoTags"] = []
                    data = json.dumps([entry]).encode()
                    replaced = tarfile.TarInfo("manifest.json")
                    replaced.size, replaced.mode, replaced.mtime = len(data), member.mode, member.mtime
                    yield replaced.tobuf(tarfile.PAX_FORMAT) + data + _padding(len(data))
                    continue
                yield member.tobuf(tarfile.PAX_FORMAT)
                if member.isfile():
                    handle = tar.extractfile(member)
                    assert handle is not None
                    while chunk := handle.read(_CHUNK):
                        yield chunk
                    yield _padding(member.size)
            yield b"\0" * (2 * _BLOCK)
    except _Damaged as exc:
        raise _reading(path, str(exc)) from None
    except (tarfile.TarError, gzip.BadGzipFile, zlib.error, EOFError) as exc:
        raise _reading(path, f"not a complete gzip-compressed tar ({exc or type(exc).__name__})") from None
