"""Images on a Docker engine: inspect (and history), pull, push, load or import, save, tag, remove.

Each function executes its request; the rules of when (pull only by digest, untag only a name the image keeps
another of) are the callers' (engine/requests.py, stages/).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import IO, Any

import docker
import docker.errors
import docker.utils
import requests.exceptions

from orchestrator.engine import IMAGE_REMOVED_HINT, ImageInfo, LayerEntry
from orchestrator.engine.requests import PullRequest, RegistryAuth, RemoveImage, RootfsImport
from orchestrator.errors import BaseImageMissing, EnvironmentFailure, ImageNotBuilt, RegistryError
from orchestrator.redact import redact


def _env_map(env: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in env or ():
        key, _, value = item.partition("=")
        out[key] = value
    return out


def inspect(client: docker.DockerClient, ref: str, *, layers: bool = False) -> ImageInfo | None:
    try:
        image = client.images.get(ref)
        history: list[dict[str, Any]] = client.api.history(ref) if layers else []  # type: ignore[no-untyped-call]
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        raise EnvironmentFailure(f"inspecting image {ref} failed: {exc.explanation}") from None
    config = image.attrs.get("Config") or {}
    return ImageInfo(
        id=str(image.id),
        tags=tuple(image.tags),
        labels=dict(config.get("Labels") or {}),
        env=_env_map(config.get("Env")),
        repo_digests=tuple(image.attrs.get("RepoDigests") or ()),
        size=int(image.attrs.get("Size") or 0),
        layers=tuple(
            LayerEntry(created_by=str(entry.get("CreatedBy") or ""), size=max(0, int(entry.get("Size") or 0)))
            for entry in reversed(history)  # the engine lists the newest first
        ),
    )


# -- registries ------------------------------------------------------------------------------------


def _auth_config(auth: RegistryAuth | None) -> dict[str, str] | None:
    # None lets docker-py read the user's own `docker login` (~/.docker/config.json), as the CLI does.
    return None if auth is None else {"username": auth.username, "password": auth.password}


def _scrubbed(text: str, auth: RegistryAuth | None) -> str:
    """One line of a registry's answer, with any echo of the password replaced (and URLs redacted)."""
    if auth is not None and auth.password:
        text = text.replace(auth.password, "****")
    return redact(text.strip().splitlines()[0] if text.strip() else "no answer")


def _registry_stream(chunks: Iterable[Any], what: str, auth: RegistryAuth | None) -> str | None:
    """Drain a push or pull stream; the pushed digest (aux.Digest) when there is one; RegistryError on error."""
    digest: str | None = None
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        if "error" in chunk:
            raise RegistryError(f"{what} failed: {_scrubbed(str(chunk['error']), auth)}")
        aux = chunk.get("aux")
        if isinstance(aux, dict) and "Digest" in aux:
            digest = str(aux["Digest"])
    return digest


def pull(client: docker.DockerClient, request: PullRequest) -> ImageInfo:
    """A base that cannot be pulled is `base-image-missing` (only a base is pulled by that request: an image
    orch built that is missing is `ImageNotBuilt` wherever it is used); any other pull's failure is the
    registry's (`RegistryError`)."""
    if request.missing == "base":
        return _pull_base(client, request.ref)
    what = f"pulling {request.ref}"
    name, tag = docker.utils.parse_repository_tag(request.ref)
    try:
        stream = client.api.pull(
            name, tag=tag or "latest", stream=True, decode=True, auth_config=_auth_config(request.auth)
        )
        _registry_stream(stream, what, request.auth)
    except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
        explanation = str(getattr(exc, "explanation", None) or exc)
        raise RegistryError(f"{what} failed: {_scrubbed(explanation, request.auth)}") from None
    pulled = inspect(client, request.ref)
    if pulled is None:
        raise RegistryError(f"{what} reported success but the image is not in the engine")
    return pulled


def _pull_base(client: docker.DockerClient, ref: str) -> ImageInfo:
    try:
        client.images.pull(ref)
    except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
        explanation = getattr(exc, "explanation", None) or str(exc)
        raise BaseImageMissing(
            f"base image {ref} is not in the engine and cannot be pulled: {redact(str(explanation))}",
            hint="Build a local base with `orch base` (no registry needed) and set system.base_image.ref to it, "
            "or load the image with `docker load`.",
        ) from None
    pulled = inspect(client, ref)
    if pulled is None:
        raise BaseImageMissing(f"pulling {ref} reported success but the image is not there")
    return pulled


def push(client: docker.DockerClient, repository: str, tag: str, auth: RegistryAuth | None) -> str:
    what = f"pushing {repository}:{tag}"
    try:
        stream = client.api.push(repository, tag=tag, stream=True, decode=True, auth_config=_auth_config(auth))
        digest = _registry_stream(stream, what, auth)
    except docker.errors.ImageNotFound:
        raise ImageNotBuilt(f"image {repository}:{tag} is not in the engine", hint=IMAGE_REMOVED_HINT) from None
    except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
        explanation = str(getattr(exc, "explanation", None) or exc)
        raise RegistryError(f"{what} failed: {_scrubbed(explanation, auth)}") from None
    if digest is None:
        raise RegistryError(f"{what}: the engine reported no digest for the pushed image")
    return digest


# -- files -----------------------------------------------------------------------------------------


def load(client: docker.DockerClient, source: IO[bytes] | Iterable[bytes] | RootfsImport) -> list[str]:
    """`docker load` from a (possibly gzip-compressed) tar, a file or chunks as they come; or `docker import`."""
    if isinstance(source, RootfsImport):
        return [_import_rootfs(client, source)]
    loaded: list[str] = []
    try:
        for message in client.api.load_image(source):  # type: ignore[no-untyped-call]
            text = str(message.get("stream", "")).strip()
            if "error" in message:
                raise EnvironmentFailure(f"docker load failed: {message['error']}")
            for prefix in ("Loaded image ID: ", "Loaded image: "):
                if text.startswith(prefix):
                    loaded.append(text[len(prefix) :])
    except docker.errors.APIError as exc:
        raise EnvironmentFailure(f"docker load failed: {exc.explanation}") from None
    return loaded


def _import_rootfs(client: docker.DockerClient, request: RootfsImport) -> str:
    name = f"{request.repository}:{request.tag}"
    try:
        client.api.import_image_from_file(
            str(request.tar_path), repository=request.repository, tag=request.tag, changes=list(request.changes)
        )
    except docker.errors.APIError as exc:
        raise EnvironmentFailure(f"docker import of {name} failed: {exc.explanation}") from None
    imported = inspect(client, name)
    if imported is None:
        raise EnvironmentFailure(f"docker import reported success but {name} is not there")
    return imported.id


def save(client: docker.DockerClient, ref: str, dest: IO[bytes]) -> None:
    try:
        for chunk in client.api.get_image(ref):
            dest.write(chunk)
    except docker.errors.ImageNotFound:
        raise ImageNotBuilt(f"image {ref} is not in the engine", hint=IMAGE_REMOVED_HINT) from None
    except docker.errors.APIError as exc:
        raise EnvironmentFailure(f"docker save of {ref} failed: {exc.explanation}") from None


def tag(client: docker.DockerClient, image_id: str, repository: str, tag: str) -> None:
    try:
        client.api.tag(image_id, repository, tag, force=False)
    except docker.errors.APIError as exc:
        raise EnvironmentFailure(f"tagging {image_id[:19]} as {repository}:{tag} failed: {exc.explanation}") from None


def remove(client: docker.DockerClient, request: RemoveImage) -> None:
    """The image (forced), or with `tag_only` the name alone (not forced, its parents kept)."""
    try:
        if request.tag_only:
            client.api.remove_image(request.ref, force=False, noprune=True)
        else:
            client.images.remove(request.ref, force=True)
    except docker.errors.ImageNotFound:
        return
    except docker.errors.APIError as exc:
        if not request.tag_only:
            raise
        raise EnvironmentFailure(f"removing the tag {request.ref} failed: {exc.explanation}") from None
