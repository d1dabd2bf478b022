"""`oci://registry/repository@sha256:…` items, with oras-py (the ORAS project's Python client): a model pushed
as an OCI artifact (`oras push`), fetched by the digest of its manifest.

What is checked, since the registry is not trusted either: the manifest's bytes hash to the digest the uri
pins (so its list of layers is the one that was pinned), and each layer's bytes hash to the digest the
manifest gives (as they stream, resumed with `Range` when a fetch stopped midway). One layer is a file;
several are a folder, each file named by its `org.opencontainers.image.title` annotation (a relative path:
`..`, absolute paths and duplicates are refused). A layer that is a packed folder (`oras push dir/`, media
type `…tar+gzip` with `io.deis.oras.content.unpack`) is refused with the way out: push the files.

Plain HTTP only for a registry on the loopback (as Docker allows without configuration); HTTPS elsewhere,
with the CA bundle the environment names. The credential is `user:password` (or `user:token`); the
registry's challenge decides between HTTP Basic (htpasswd registries) and a bearer token obtained with it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path, PurePosixPath
from typing import Any

import oras.auth
import oras.provider
import requests

from orchestrator.credentials import user_and_token
from orchestrator.errors import SourceUnreachable
from orchestrator.redact import redact
from orchestrator.remote.transfer import CHUNK, FetchRequest, Resumable, fetch_failed

TITLE = "org.opencontainers.image.title"
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
#: A manifest is a few KB; more is not a manifest.
MANIFEST_MAX_BYTES = 4 << 20


def fetch_oci(request: FetchRequest) -> Path:
    source = request.source
    registry = _registry(request)
    reference = f"{source.location}/{source.path}@{source.pin}"
    try:
        container = registry.get_container(reference)
        layers = _layers(request, registry, container)
        if len(layers) == 1:
            return _blob(request, registry, container, layers[0], Resumable(request.staging))
        tree = request.staging / "tree"
        for index, (layer, relative) in enumerate(zip(layers, _titles(request, layers), strict=True)):
            data = _blob(request, registry, container, layer, Resumable(request.staging / "parts" / str(index)))
            target = tree.joinpath(*relative.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            data.replace(target)
        return tree
    except SourceUnreachable:
        raise
    except (requests.exceptions.RequestException, ValueError, KeyError, TypeError) as exc:
        raise fetch_failed(
            request, redact(str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
        ) from None
    finally:
        registry.session.close()


def _registry(request: FetchRequest) -> Any:
    source = request.source
    insecure = source.loopback
    scheme = "http" if insecure else "https"
    verify: str | bool = request.ca_bundle or True
    backend = "basic"
    if request.credential:
        try:
            with requests.get(f"{scheme}://{source.location}/v2/", timeout=request.timeout_s, verify=verify) as probe:
                challenge = probe.headers.get("WWW-Authenticate", "")
        except requests.exceptions.RequestException as exc:
            raise fetch_failed(request, redact(str(exc).splitlines()[0][:300])) from None
        backend = "token" if challenge.lower().startswith("bearer") else "basic"
    registry = oras.provider.Registry(
        hostname=source.location, insecure=insecure, tls_verify=verify, auth_backend=backend
    )
    if request.credential:
        user, password = user_and_token(request.credential)
        registry.auth.set_basic_auth(user, password)
    return registry


def _layers(request: FetchRequest, registry: Any, container: Any) -> list[dict[str, Any]]:
    url = f"{registry.prefix}://{container.manifest_url()}"
    response = registry.do_request(url, "GET", headers={"Accept": ", ".join(MANIFEST_TYPES)})
    if response.status_code in (401, 403):
        raise fetch_failed(request, f"the registry refused the credential (HTTP {response.status_code})")
    if response.status_code == 404:
        raise fetch_failed(request, "no manifest with that digest in the repository (HTTP 404)")
    if response.status_code != 200:
        raise fetch_failed(request, f"HTTP {response.status_code} for the manifest")
    body = response.content
    observed = "sha256:" + hashlib.sha256(body).hexdigest()
    if len(body) > MANIFEST_MAX_BYTES or observed != request.source.pin:
        raise fetch_failed(
            request, f"the registry sent a manifest whose digest is {observed}, not {request.source.pin}"
        )
    manifest = json.loads(body)
    layers = manifest.get("layers")
    if not isinstance(layers, list) or not layers:
        raise fetch_failed(request, "the manifest lists no layers (is it an image index? pin one manifest's digest)")
    for layer in layers:
        if "tar+gzip" in str(layer.get("mediaType", "")) and (layer.get("annotations") or {}).get(
            "io.deis.oras.content.unpack"
        ):
            raise fetch_failed(request, "a layer is a packed folder (oras push dir/): push the folder's files instead")
    return layers


def _titles(request: FetchRequest, layers: list[dict[str, Any]]) -> list[PurePosixPath]:
    titles: list[PurePosixPath] = []
    for layer in layers:
        title = str((layer.get("annotations") or {}).get(TITLE, ""))
        relative = PurePosixPath(title)
        if (
            not title
            or not relative.parts  # "." names the folder itself
            or relative.is_absolute()
            or ".." in relative.parts
            or "\0" in title
            or relative in titles
        ):
            raise fetch_failed(request, f"layer {layer.get('digest')} has no usable title ({title!r}) for a file name")
        titles.append(relative)
    return titles


def _blob(request: FetchRequest, registry: Any, container: Any, layer: dict[str, Any], part: Resumable) -> Path:
    digest = str(layer.get("digest", ""))
    algorithm, _, expected = digest.partition(":")
    if algorithm != "sha256" or len(expected) != 64:
        raise fetch_failed(request, f"layer digest {digest!r} is not a sha256")
    total = int(layer.get("size") or 0)
    offset = part.offset
    if (offset and part.validator != digest) or offset > total:
        part.restart(digest)
        offset = 0
    elif not offset:
        part.restart(digest)
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    if request.credential and isinstance(registry.auth, oras.auth.BasicAuth):
        # Sent at once: oras would first send none and leave the streamed 401 answer's socket open.
        headers.update(registry.auth.get_auth_header())
    url = f"{registry.prefix}://{container.get_blob_url(digest)}"
    with registry.do_request(url, "GET", headers=headers, stream=True) as response:
        if response.status_code in (401, 403):
            raise fetch_failed(request, f"the registry refused the credential (HTTP {response.status_code})")
        if response.status_code == 200 and offset:
            part.restart(digest)  # the registry sent it whole
        elif response.status_code not in (200, 206):
            raise fetch_failed(request, f"HTTP {response.status_code} for layer {digest}")
        part.append(response.iter_content(CHUNK), total, request.on_bytes)
    if part.offset != total:
        raise fetch_failed(
            request, f"layer {digest} ended after {part.offset} of {total} bytes (fetch again to resume)"
        )
    observed = _sha256(part.data)
    if observed != expected:
        part.forget()
        raise fetch_failed(request, f"layer {digest} arrived with sha256 {observed}: the registry sent other bytes")
    return part.data


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()
