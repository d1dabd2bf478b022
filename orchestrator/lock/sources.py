"""Where a lock's packages may come from: the dossier's indexes and find-links, PyPI, host wheel folders.

Credentials are never in a URL orch writes: an index's `access` names an environment variable holding
'user:token', read here and handed to uv through uv's own per-index environment variables.
"""

from __future__ import annotations

import base64
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator import vendor
from orchestrator.credentials import credential, user_and_token
from orchestrator.dossier.models import PythonSpec
from orchestrator.lock.target import LockTarget
from orchestrator.redact import redact

PYPI = "https://pypi.org/simple"
#: The origin of a wheel folder given on the command line: a mirror of this host, not an input of the lock.
HOST_FIND_LINKS = "--find-links, this host"


@dataclass(frozen=True)
class Source:
    url: str  # never with credentials
    kind: Literal["index", "find-links"]
    origin: str  # where the source was declared: "python.indexes[0]", "python.use_pypi", "--find-links"
    access: str | None = None  # the environment variable holding 'user:token'
    #: The index's name for uv: its credential goes in UV_INDEX_<NAME>_USERNAME / _PASSWORD.
    uv_name: str = ""

    def line(self) -> str:
        access = f", credential from ${self.access}" if self.access else ""
        return f"{self.url}  ({self.kind}, {self.origin}{access})"


@dataclass(frozen=True)
class Reachability:
    source: Source
    reason: str | None  # None: it answered

    @property
    def reachable(self) -> bool:
        return self.reason is None


def sources_for(python: PythonSpec, target: LockTarget, find_links: list[str]) -> list[Source]:
    """Sources in the order uv searches them: the dossier's indexes, then PyPI, then find-links.

    The dossier must name the PyTorch index its variant needs (the rebuild's pip reads the same list);
    `check_torch_index` says which one when it is missing.
    """
    sources = [
        Source(index.url.rstrip("/"), "index", f"python.indexes[{i}]", index.access, f"orch{i}")
        for i, index in enumerate(python.indexes)
    ]
    if python.use_pypi:
        sources.append(Source(PYPI, "index", "python.use_pypi", uv_name="pypi"))
    sources += [Source(link, "find-links", f"python.find_links[{i}]") for i, link in enumerate(python.find_links)]
    sources += [Source(str(Path(link).resolve()), "find-links", HOST_FIND_LINKS) for link in find_links]
    return sources


def torch_index_hint(target: LockTarget, sources: list[Source]) -> str | None:
    """A sentence when the target's PyTorch index is not among the sources (cpu/cuNNN/rocmX.Y builds live there)."""
    if target.platform == "cuda":
        return None  # PyPI's torch is a CUDA build; the dossier's coherence check says which CUDA.
    wanted = vendor.torch_index_url(target.torch_tag)
    if any(source.url == wanted for source in sources):
        return None
    return (
        f"the dossier's python.indexes do not name {wanted}, where torch's +{target.torch_tag} builds live: "
        f"add '- url: {wanted}' to python.indexes if the app needs torch"
    )


def credentials(sources: list[Source], environ: Mapping[str, str]) -> dict[str, str]:
    """uv's per-index credential variables, read from the variables the dossier names (values never logged)."""
    env: dict[str, str] = {}
    for source in sources:
        if source.access is None:
            continue
        value = credential(
            source.access, environ, needed_by=f"index {source.url} ({source.origin})", form="'user:token'"
        )
        user, password = user_and_token(value)
        key = source.uv_name.upper().replace("-", "_")
        env[f"UV_INDEX_{key}_USERNAME"] = user
        env[f"UV_INDEX_{key}_PASSWORD"] = password
    return env


def ssl_context(environ: Mapping[str, str]) -> ssl.SSLContext:
    """The host's CA bundle when one is named (an intercepting proxy's, PIP_CERT), else the system's."""
    bundle = environ.get("SSL_CERT_FILE") or environ.get("PIP_CERT")
    return ssl.create_default_context(cafile=bundle) if bundle else ssl.create_default_context()


def probe(source: Source, environ: Mapping[str, str], timeout_s: float = 10.0) -> Reachability:
    """Does the source answer from this host? One request to the index root; a folder must exist."""
    if source.kind == "find-links" and not source.url.startswith(("http://", "https://")):
        path = Path(source.url.removeprefix("file://"))
        return Reachability(source, None if path.is_dir() else f"no folder {path}")
    if source.url.startswith("file://"):
        path = Path(source.url.removeprefix("file://"))
        return Reachability(source, None if path.is_dir() else f"no folder {path}")
    request = urllib.request.Request(source.url.rstrip("/") + "/", method="GET")
    if source.access and environ.get(source.access):
        token = base64.b64encode(environ[source.access].encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=ssl_context(environ)) as response:
            response.read(1)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            given = f"the credential in ${source.access}" if source.access else "no credential (no access: set)"
            return Reachability(source, f"HTTP {exc.code}: it refused {given}")
        return Reachability(source, None)  # it answered; some indexes have no root page
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Reachability(source, redact(f"no answer ({reason})"))
    return Reachability(source, None)


def probe_all(sources: list[Source], environ: Mapping[str, str] | None = None) -> list[Reachability]:
    env = os.environ if environ is None else environ
    return [probe(source, env) for source in sources]
