"""What every fetcher shares: the request it gets, the failure it raises, and a resumable file download.

A fetcher writes what it receives under the item's partial folder (cache.py) and returns the file or folder
it made there; fetch.py checks the fingerprint and moves it into the cache. A download that stops midway
leaves its bytes in `<partial>/data` with the validator the source gave (`<partial>/validator`: an ETag);
the next fetch asks for the rest only (`Range: bytes=N-`, with If-Range/IfMatch so that a source whose
object changed in between sends it whole instead of a tail that would not fit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.dossier.sources import Source
from orchestrator.errors import SourceUnreachable

#: Called as bytes arrive: (bytes so far, total when known).
OnBytes = Callable[[int, int | None], None]
CHUNK = 1 << 20


@dataclass(frozen=True)
class FetchRequest:
    #: How the item is named to people: "weights minilm".
    label: str
    source: Source
    sha256: str
    #: The environment variable the item's `access` names (its value is `credential`), for messages.
    access: str | None
    credential: str | None
    #: s3: an S3-compatible endpoint; None: AWS.
    endpoint: str | None
    #: A CA bundle to trust instead of the system's (REQUESTS_CA_BUNDLE / SSL_CERT_FILE), or None.
    ca_bundle: str | None
    staging: Path
    on_bytes: OnBytes
    #: Seconds to wait for a connection or for the next bytes.
    timeout_s: float = 60.0


def fetch_failed(request: FetchRequest, reason: str) -> SourceUnreachable:
    if request.access:
        hint = (
            f"Check that {request.source.uri} is reachable from this machine and that ${request.access} holds a "
            "credential it accepts; `orch fetch DOSSIER` gets every item ahead of time."
        )
        where = f" (credential from ${request.access})"
    else:
        hint = (
            f"Check that {request.source.uri} is reachable from this machine; if it needs a credential, name the "
            "variable that holds it in the item's 'access'."
        )
        where = " (no credential: the item names no 'access' variable)"
    return SourceUnreachable(f"fetching {request.label} from {request.source.uri}{where} failed: {reason}", hint=hint)


class Resumable:
    """`<partial>/data` and its validator: where a download resumes, and how it restarts."""

    def __init__(self, staging: Path) -> None:
        staging.mkdir(parents=True, exist_ok=True)
        self.data = staging / "data"
        self._validator = staging / "validator"

    @property
    def offset(self) -> int:
        return self.data.stat().st_size if self.data.exists() else 0

    @property
    def validator(self) -> str | None:
        if not self._validator.exists() or self.offset == 0:
            return None
        return self._validator.read_text().strip() or None

    def restart(self, validator: str | None) -> None:
        """Start over: no bytes yet, the source's new validator noted."""
        self.data.write_bytes(b"")
        self._validator.write_text(validator or "")

    def append(self, chunks: Iterable[bytes], total: int | None, on_bytes: OnBytes) -> None:
        """Append what arrives; never past `total` when the source announced one (a source that sends more than
        it said does not fill the disk: the fingerprint check then decides)."""
        done = self.offset
        with self.data.open("ab") as out:
            for received in chunks:
                chunk = received if total is None else received[: max(total - done, 0)]
                if chunk:
                    out.write(chunk)
                    done += len(chunk)
                    on_bytes(done, total)
                if total is not None and done >= total:
                    break

    def forget(self) -> None:
        self.data.unlink(missing_ok=True)
        self._validator.unlink(missing_ok=True)
