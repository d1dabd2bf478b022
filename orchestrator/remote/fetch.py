"""Getting a dossier's remote items into the cache: found there (hashed again), or fetched, checked, stored.

`ensure_item` is what `orch fetch`, `orch validate --fetch`, the program's `fetch` step (before the stages of
a probe or rebuild) and `orch verify` (for a hand-over by reference) call. Its outcomes:

- the item's path in the cache (status `cached`, `fetched`, or `refetched` when the cached copy had changed);
- `SourceUnreachable` (exit 3): the source could not be reached, refused the credential, or does not have it; one
  line naming the item, the source and the variable. A download cut midway is resumed at once (up to three
  tries, while each try gets further) and, failing that, by the next fetch;
- `SourceMismatch` (exit 2): the source sent bytes whose fingerprint is not the declared one (the same name,
  other bytes: a moved `latest`, a re-uploaded object), both hashes in full. Nothing is stored.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.credentials import credential
from orchestrator.dossier.fingerprints import where_differ
from orchestrator.dossier.models import Dossier
from orchestrator.dossier.sources import Source, parse_source
from orchestrator.errors import SourceMismatch, SourceUnreachable
from orchestrator.remote.cache import ContentCache, content_sha256
from orchestrator.remote.transfer import FetchRequest, OnBytes

#: Where a CA bundle is named, in the order requests reads them.
CA_BUNDLE_VARS = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
ATTEMPTS = 3
#: What the credential looks like, per scheme (shown in the hint when the variable is not set).
CREDENTIAL_FORM = {"https": "<token>", "hf": "<hub token>", "s3": "KEY_ID:SECRET", "oci": "user:password"}


@dataclass(frozen=True)
class RemoteItem:
    kind: str  # data | weights
    name: str
    source: Source
    sha256: str
    access: str | None
    endpoint: str | None

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"


def remote_items(model: Dossier) -> list[RemoteItem]:
    """The dossier's data and weights items that have a `uri`, in the dossier's order."""
    return [
        RemoteItem(kind, a.name, parse_source(a.uri), a.sha256, a.access, a.endpoint)
        for kind, group in (("data", model.data), ("weights", model.weights))
        for a in group
        if a.uri is not None
    ]


@dataclass(frozen=True)
class Fetched:
    item: RemoteItem
    path: Path
    status: Literal["cached", "fetched", "refetched"]
    #: Why the cached copy was fetched again (its bytes had changed), when it was.
    note: str | None = None


def ca_bundle(environ: Mapping[str, str]) -> str | None:
    return next((environ[var] for var in CA_BUNDLE_VARS if environ.get(var)), None)


def _fetcher(scheme: str) -> Callable[[FetchRequest], Path]:
    # Each client is imported when its scheme is needed (boto3 and huggingface_hub take a second to import).
    if scheme == "https":
        from orchestrator.remote.https_source import fetch_https

        return fetch_https
    if scheme == "s3":
        from orchestrator.remote.s3_source import fetch_s3

        return fetch_s3
    if scheme == "oci":
        from orchestrator.remote.oci_source import fetch_oci

        return fetch_oci
    from orchestrator.remote.hf_source import fetch_hf

    return fetch_hf


def _received(staging: Path) -> int:
    return sum(f.stat().st_size for f in staging.rglob("*") if f.is_file()) if staging.is_dir() else 0


def ensure_item(
    item: RemoteItem, cache: ContentCache, environ: Mapping[str, str], on_bytes: OnBytes | None = None
) -> Fetched:
    with cache.locked(item.sha256):
        found = cache.get(item.sha256)
        if found.path is not None:
            return Fetched(item, found.path, "cached")
        secret = (
            credential(
                item.access,
                environ,
                needed_by=f"{item.label} ({item.source.uri})",
                form=CREDENTIAL_FORM[item.source.scheme],
            )
            if item.access
            else None
        )
        staging = cache.partial_dir(item.sha256)
        request = FetchRequest(
            label=item.label,
            source=item.source,
            sha256=item.sha256,
            access=item.access,
            credential=secret,
            endpoint=item.endpoint,
            ca_bundle=ca_bundle(environ),
            staging=staging,
            on_bytes=on_bytes or (lambda done, total: None),
        )
        fetch = _fetcher(item.source.scheme)
        for attempt in range(1, ATTEMPTS + 1):
            before = _received(staging)
            try:
                made = fetch(request)
                break
            except SourceUnreachable:
                # Resumed at once while each try gets further (a connection cut midway); otherwise it is the
                # source's answer, and the bytes so far stay for the next fetch.
                if attempt == ATTEMPTS or _received(staging) <= before:
                    raise
        observed = content_sha256(made)
        if observed != item.sha256:
            shutil.rmtree(staging, ignore_errors=True)
            raise SourceMismatch(
                f"{item.label}: {item.source.uri} sent other bytes than the dossier declares: declared sha256 "
                f"{item.sha256}, fetched {observed} ({where_differ(item.sha256, observed)}); nothing was stored",
                hint="If the source changed on purpose, check the new content and write its sha256 into the item; "
                "otherwise restore the object at the source (or pin a source that cannot move).",
            )
        stored = cache.store(item.sha256, made)
        shutil.rmtree(staging, ignore_errors=True)
        return Fetched(item, stored, "refetched" if found.changed else "fetched", found.changed)


def fetch_all(
    model: Dossier,
    cache: ContentCache,
    environ: Mapping[str, str] | None = None,
    on_item: Callable[[RemoteItem], OnBytes] | None = None,
) -> list[Fetched]:
    """Every remote item of the dossier in the cache, in order; the first failure stops (and says which)."""
    env = os.environ if environ is None else environ
    return [ensure_item(item, cache, env, on_item(item) if on_item else None) for item in remote_items(model)]


def seed_item(item: RemoteItem, copy: Path, cache: ContentCache) -> Fetched:
    """The item in the cache from a copy at hand (a hand-over made with --include-remote) instead of its source:
    checked against the declared sha256 first; SourceMismatch when the copy is not those bytes."""
    with cache.locked(item.sha256):
        found = cache.get(item.sha256)
        if found.path is not None:
            return Fetched(item, found.path, "cached")
        observed = content_sha256(copy)
        if observed != item.sha256:
            raise SourceMismatch(
                f"{item.label}: the copy at {copy} has sha256 {observed}, not the declared {item.sha256} "
                f"({where_differ(item.sha256, observed)})"
            )
        staging = cache.partial_dir(item.sha256)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        target = staging / "copy"
        if copy.is_dir():
            shutil.copytree(copy, target, symlinks=False)
        else:
            shutil.copyfile(copy, target)
        stored = cache.store(item.sha256, target)
        shutil.rmtree(staging, ignore_errors=True)
        return Fetched(item, stored, "fetched", f"from {copy}")
