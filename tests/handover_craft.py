"""Tools of someone who tampers with a hand-over folder (importable as `tests.handover_craft`).

A checksum file is not a signature: `reseal` regenerates manifest.json's file list and SHA256SUMS
after a change, as anyone could. `image_tarball` writes a `docker save`-shaped tarball (legacy
layout: `<config digest>.json`, `<layer>/layer.tar`, manifest.json, repositories) from a config.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

IDENTITY_LABEL = "io.orch.dossier.identity"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def files_of(folder: Path) -> list[str]:
    """Every non-directory entry, symlinks included and not followed (os.walk does not descend into them)."""
    names = []
    for root, dirs, files in os.walk(folder):
        for name in [*files, *(d for d in dirs if (Path(root) / d).is_symlink())]:
            names.append((Path(root) / name).relative_to(folder).as_posix())
    return sorted(names)


def reseal(folder: Path, *, manifest_update: dict[str, Any] | None = None, extra_sums: str = "") -> None:
    """Rewrite manifest.json (its file list, plus `manifest_update`) and SHA256SUMS to match the folder."""
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(manifest_update or {})
    entries = []
    for name in files_of(folder):
        path = folder / name
        if name in ("SHA256SUMS", "manifest.json") or not path.is_file() or path.is_symlink():
            continue
        entries.append({"path": name, "sha256": sha256_file(path), "size": path.stat().st_size})
    manifest["files"] = entries
    (folder / "manifest.json").unlink()
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    sums = [(e["path"], e["sha256"]) for e in entries] + [("manifest.json", sha256_file(folder / "manifest.json"))]
    (folder / "SHA256SUMS").unlink(missing_ok=True)
    (folder / "SHA256SUMS").write_text("".join(f"{h}  {p}\n" for p, h in sorted(sums)) + extra_sums)


def image_config(identity: str, *, marker: str = "") -> bytes:
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": {IDENTITY_LABEL: identity, "io.orch.managed": "true"}, "Cmd": ["true"]},
        "rootfs": {"type": "layers", "diff_ids": []},
        "comment": marker,
    }
    return json.dumps(config, sort_keys=True).encode()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def image_tarball(
    dest: Path,
    config: bytes,
    repo_tags: list[str],
    *,
    extra: dict[str, bytes] | None = None,
    leave_out_manifest: bool = False,
) -> str:
    """Write a gzip-compressed docker-save tarball of `config`; its image id (sha256 of the config)."""
    digest = hashlib.sha256(config).hexdigest()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        _add(tar, f"{digest}.json", config)
        _add(tar, "0a1b2c/layer.tar", b"\0" * 2048)
        for name, data in (extra or {}).items():
            _add(tar, name, data)
        if not leave_out_manifest:
            manifest = [{"Config": f"{digest}.json", "RepoTags": repo_tags, "Layers": ["0a1b2c/layer.tar"]}]
            _add(tar, "manifest.json", json.dumps(manifest).encode())
        repositories = {tag.rsplit(":", 1)[0]: {tag.rsplit(":", 1)[1]: digest} for tag in repo_tags}
        _add(tar, "repositories", json.dumps(repositories).encode())
    dest.write_bytes(gzip.compress(raw.getvalue(), mtime=0))
    return "sha256:" + digest


def retag_tarball(source: Path, dest: Path, tags: list[str]) -> None:
    """A copy of a docker-save tarball (gzip) whose manifest.json and repositories name `tags` instead."""
    with (
        tarfile.open(source, mode="r|gz") as original,
        gzip.open(dest, "wb", compresslevel=1) as packed,
        tarfile.open(fileobj=packed, mode="w|") as copy,
    ):
        for member in original:
            if member.name in ("manifest.json", "repositories"):
                document = json.loads(original.extractfile(member).read())  # type: ignore[union-attr]
                if member.name == "manifest.json":
                    document[0]["RepoTags"] = tags
                else:
                    digest = next(iter(next(iter(document.values())).values()))
                    document = {t.rsplit(":", 1)[0]: {t.rsplit(":", 1)[1]: digest} for t in tags}
                data = json.dumps(document).encode()
                info = tarfile.TarInfo(member.name)
                info.size, info.mode, info.mtime = len(data), 0o644, member.mtime
                copy.addfile(info, io.BytesIO(data))
            else:
                copy.addfile(member, original.extractfile(member) if member.isfile() else None)
