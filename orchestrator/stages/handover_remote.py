"""A hand-over's remote items, by reference (docs/remote-sources.md).

`orch handover` lists each data or weights item with a `uri` in manifest.json (source, sha256, size, the name of
the variable that grants access; never a value) and does not copy it, unless `--include-remote`: then the
cached copy goes into `remote/<sha256>` and is checked like every other file of the folder. `orch verify`
gets each item before any image is loaded: from that copy when the folder has one, else from its source into
the verifier's own cache, with the credential in the variable ACCESS.md names; the fingerprint is checked
either way, and the probe's step `fetch` then finds it in the cache.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from orchestrator.dossier.load import LoadedDossier
from orchestrator.dossier.paths import Where, copy_regular_file, copy_tree, walk_tree
from orchestrator.errors import HandoverDamaged, SourceMismatch
from orchestrator.model.manifest import Manifest, RemoteItem
from orchestrator.remote.cache import ContentCache
from orchestrator.remote.fetch import Fetched, ensure_item, remote_items, seed_item

REMOTE_FOLDER = "remote"
#: orch's cache of remote items as a shell expression (remote/cache.py `default_root`).
CACHE_IN_SHELL = "${ORCH_SOURCES_DIR:-${ORCH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/orch}/sources}"


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(entry.real.stat().st_size for entry in walk_tree(path, path, Where(str(path))))
    return path.stat().st_size


def remote_manifest(
    loaded: LoadedDossier, staging: Path, *, include: bool, environ: Mapping[str, str] | None = None
) -> list[RemoteItem]:
    """The manifest's `remote` list; with `include`, each item's cached copy written under `staging/remote/`."""
    env = os.environ if environ is None else environ
    cache = ContentCache.from_environment(env)
    listed: list[RemoteItem] = []
    for item in remote_items(loaded.model):
        path = ensure_item(item, cache, env).path  # in the cache after the rebuild; fetched again otherwise
        included = None
        if include:
            target = staging / REMOTE_FOLDER / item.sha256
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                copy_tree(list(walk_tree(path, path, Where(str(path)))), target)
            else:
                copy_regular_file(path, target)
            included = f"{REMOTE_FOLDER}/{item.sha256}"
        listed.append(
            RemoteItem(
                kind="data" if item.kind == "data" else "weights",
                name=item.name,
                uri=item.source.uri,
                sha256=item.sha256,
                size=_size(path),
                access=item.access,
                endpoint=item.endpoint,
                included=included,
            )
        )
    return listed


def get_handed_over(
    folder: Path, manifest: Manifest, loaded: LoadedDossier, environ: Mapping[str, str] | None = None
) -> list[Fetched]:
    """Every remote item of a checked hand-over in this host's cache, fingerprint checked, before any load.

    The manifest's list must be the shipped dossier's (the same kinds, names, sources and hashes): a manifest that
    adds, drops or redirects an item is a damaged hand-over, exit 1."""
    env = os.environ if environ is None else environ
    items = remote_items(loaded.model)
    listed: dict[tuple[str, str, str, str], RemoteItem] = {
        (r.kind, r.name, r.uri, r.sha256): r for r in manifest.remote or []
    }
    declared = {(i.kind, i.name, i.source.uri, i.sha256) for i in items}
    if set(listed) != declared:
        raise HandoverDamaged(
            f"{folder}/manifest.json lists other remote items than the shipped dossier declares "
            f"(manifest: {sorted(k[1] for k in listed) or 'none'}; dossier: {sorted(k[1] for k in declared) or 'none'})"
        )
    cache = ContentCache.from_environment(env)
    done: list[Fetched] = []
    for item in items:
        entry = listed[(item.kind, item.name, item.source.uri, item.sha256)]
        if entry.included is None:
            done.append(ensure_item(item, cache, env))
            continue
        if entry.included != f"{REMOTE_FOLDER}/{item.sha256}":
            raise HandoverDamaged(f"{folder}/manifest.json: {item.label} is included at {entry.included!r}")
        try:
            done.append(seed_item(item, folder / entry.included, cache))
        except SourceMismatch as exc:
            raise HandoverDamaged(f"{folder}/{entry.included}: {exc.message}") from None
    return done
