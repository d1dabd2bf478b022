"""`https://` items, with requests (the HTTP client the Docker SDK already brings): a bearer token from the
item's variable, the CA bundle the environment names, resumed with `Range` + `If-Range`.

requests drops the Authorization header when a redirect leaves the host, so a token meant for the source is
not handed to wherever it redirects (a signed CDN URL, typically, which needs none).
"""

from __future__ import annotations

from pathlib import Path

import requests

from orchestrator.redact import redact
from orchestrator.remote.transfer import CHUNK, FetchRequest, Resumable, fetch_failed


def fetch_https(request: FetchRequest) -> Path:
    part = Resumable(request.staging)
    headers = {"Accept-Encoding": "identity"}  # the bytes as stored: their sha256 is the fingerprint
    if request.credential:
        headers["Authorization"] = f"Bearer {request.credential}"
    offset, validator = part.offset, part.validator
    if offset and validator:
        headers["Range"] = f"bytes={offset}-"
        headers["If-Range"] = validator
    verify: str | bool = request.ca_bundle or True
    try:
        with requests.get(
            request.source.uri, headers=headers, stream=True, timeout=request.timeout_s, verify=verify
        ) as response:
            if response.status_code == 416 and offset:
                part.restart(None)  # the partial is longer than the object now: start over
                return fetch_https(request)
            if response.status_code in (401, 403):
                raise fetch_failed(request, f"the server refused the credential (HTTP {response.status_code})")
            if response.status_code == 404:
                raise fetch_failed(request, "not found (HTTP 404)")
            if response.status_code not in (200, 206):
                raise fetch_failed(request, f"HTTP {response.status_code} {response.reason}")
            total = _length(response)
            if response.status_code == 200:
                part.restart(response.headers.get("ETag"))  # whole (no ranges, or the object changed)
            else:
                total = None if total is None else offset + total
            part.append(response.iter_content(CHUNK), total, request.on_bytes)
    except requests.exceptions.SSLError as exc:
        raise fetch_failed(
            request,
            f"TLS: {redact(_first_line(exc))} (a private CA: point REQUESTS_CA_BUNDLE or SSL_CERT_FILE at its bundle)",
        ) from None
    except requests.exceptions.RequestException as exc:
        raise fetch_failed(request, redact(_first_line(exc))) from None
    if total is not None and part.offset != total:
        raise fetch_failed(
            request, f"the connection ended after {part.offset} of {total} bytes (fetch again to resume)"
        )
    return part.data


def _length(response: requests.Response) -> int | None:
    raw = response.headers.get("Content-Length")
    return int(raw) if raw and raw.isdigit() else None


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]
