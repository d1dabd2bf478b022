"""`orch fetch` and `orch cache`: a dossier's remote items in the host's cache ahead of time, and the cache's
upkeep (docs/remote-sources.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.dossier_cmds import dossier_argument, variant_option

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.dossier.load import LoadedDossier
    from orchestrator.remote.fetch import Fetched


def fetch_remote(loaded: LoadedDossier, console: Console) -> list[Fetched]:
    """Every remote item of the dossier in the cache ($ORCH_CACHE_DIR/sources), a byte bar each; one line per item."""
    from orchestrator.cli.progress import download_progress
    from orchestrator.remote.cache import ContentCache
    from orchestrator.remote.fetch import fetch_all

    cache = ContentCache.from_environment(os.environ)
    with download_progress(console) as open_item:
        done = fetch_all(loaded.model, cache, os.environ, lambda item: open_item(item.label))
    for entry in done:
        note = f" ({entry.note})" if entry.note else ""
        console.print(f"  {entry.status:<10} {entry.item.label} ← {entry.item.source.uri}{note}", highlight=False)
        console.print(f"  {'':<10} sha256 {entry.item.sha256} at {entry.path}", highlight=False)
    return done


@click.command()
@dossier_argument
@variant_option
@click.option("--json", "as_json", is_flag=True, help="Print what was fetched as JSON.")
def fetch(dossier: Path, variant: str | None, as_json: bool) -> None:
    """Get the dossier's remote data and weights into the host's cache ahead of time.

    Each item with a `uri` is found in the cache (hashed again) or fetched from its source with the credential
    in the variable its `access` names, checked against its sha256 and stored by it ($ORCH_CACHE_DIR/sources, default
    ~/.cache/orch/sources). Exit 3 when a source cannot be reached or refuses the credential (the item, the
    source and the variable named); exit 2 when the bytes are not the declared ones (both hashes).
    """
    from orchestrator.cli.console import make_console
    from orchestrator.dossier.load import load_dossier

    loaded = load_dossier(dossier, variant=variant)
    console = make_console(stderr=as_json)
    done = fetch_remote(loaded, console)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "item": entry.item.label,
                        "uri": entry.item.source.uri,
                        "sha256": entry.item.sha256,
                        "status": entry.status,
                        "path": str(entry.path),
                    }
                    for entry in done
                ],
                indent=2,
            )
        )
    elif not done:
        console.print(f"{dossier}: no data or weights item has a uri; nothing to fetch")


@click.group()
def cache() -> None:
    """The host's cache of remote data and weights ($ORCH_CACHE_DIR/sources; size limit ORCH_CACHE_MAX, default 100G)."""


@cache.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON.")
def cache_list(as_json: bool) -> None:
    """The cached items, least recently used first, with their sizes."""
    from orchestrator.cli.console import make_console
    from orchestrator.remote.cache import ContentCache

    store = ContentCache.from_environment(os.environ)
    entries = store.entries()
    if as_json:
        rows = [{"sha256": e.sha256, "path": str(e.path), "bytes": e.size, "last_used": e.last_used} for e in entries]
        click.echo(json.dumps({"root": str(store.root), "max_bytes": store.max_bytes, "entries": rows}, indent=2))
        return
    console = make_console()
    total = sum(entry.size for entry in entries)
    console.print(f"{store.root}: {len(entries)} item(s), {total / 2**20:.1f} MiB of {store.max_bytes / 2**30:.0f} GiB")
    for entry in entries:
        console.print(f"  {entry.sha256}  {entry.size / 2**20:10.1f} MiB", highlight=False)


@cache.command("prune")
@click.option(
    "--max-size",
    metavar="SIZE",
    default=None,
    help="Keep at most this much (0, 512M, 50G), removing the least recently used first (default: ORCH_CACHE_MAX, "
    "else 100G); 0 empties the cache, interrupted fetches included.",
)
def cache_prune(max_size: str | None) -> None:
    """Remove the least recently used items until the cache fits its size limit."""
    from orchestrator.cli.console import make_console
    from orchestrator.remote.cache import ContentCache, parse_size

    store = ContentCache.from_environment(os.environ)
    limit = store.max_bytes if max_size is None else parse_size(max_size, what="--max-size")
    removed = store.prune(limit)
    freed = sum(entry.size for entry in removed)
    make_console().print(f"removed {len(removed)} item(s), {freed / 2**20:.1f} MiB, from {store.root}")
