"""Reaching a Docker engine: the SDK's client, its TLS, the CLI's current context, and "no engine answers"."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.tls
import requests.exceptions

from orchestrator.errors import EngineUnavailable
from orchestrator.redact import redact

DEFAULT_SOCKET = "unix:///var/run/docker.sock"


class _ApiClient(docker.APIClient):
    """The SDK's API client, keeping a TLS endpoint's own CA (`DOCKER_CERT_PATH/ca.pem`).

    requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE from the environment replace a session's own CA at
    each request (psf/requests#3829): with either set (common on machines behind a TLS proxy), a
    `tcp://` daemon with --tlsverify fails as "certificate verify failed" although the docker CLI reaches it.
    """

    def merge_environment_settings(self, *args: Any, **kwargs: Any) -> Any:
        settings = super().merge_environment_settings(*args, **kwargs)
        if isinstance(self.verify, str):
            settings["verify"] = self.verify
        return settings


class _DockerClient(docker.DockerClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # as the SDK's, with the client above
        self.api = _ApiClient(*args, **kwargs)


def current_context_endpoint() -> tuple[str | None, Any]:
    """The Docker CLI's current context (`docker context use NAME`), when it is not the default one.

    DOCKER_HOST wins when set (as for the CLI); DOCKER_CONTEXT names a context explicitly.
    """
    from docker.context import ContextAPI

    name = os.environ.get("DOCKER_CONTEXT")
    try:
        context = ContextAPI.get_context(name) if name else ContextAPI.get_current_context()
    except docker.errors.DockerException:
        return None, None
    if context is None or context.name == "default":
        return None, None
    return context.Host, context.TLSConfig


def _named_context(context: str) -> tuple[str | None, Any]:
    from docker.context import ContextAPI

    try:
        found = ContextAPI.get_context(context)
    except docker.errors.DockerException as exc:
        raise EngineUnavailable(f"Docker context {context!r}: {redact(str(exc))}") from None
    if found is None:
        raise EngineUnavailable(f"no Docker context named {context!r} (`docker context ls` lists them)")
    return found.Host, found.TLSConfig


def open_client(
    base_url: str | None, tls_files: tuple[str, str, str] | None, context: str | None
) -> tuple[docker.DockerClient, str]:
    """A pinged client and the endpoint it reached; EngineUnavailable when none answers.

    `tls_files`: (CA, client certificate, client key) for a `tcp://` endpoint with TLS, as a nightly
    plan's Docker target names them (otherwise DOCKER_TLS_VERIFY/DOCKER_CERT_PATH, as the CLI reads);
    `context`: a Docker context by name (its endpoint and TLS), instead of `base_url`.
    """
    tls: Any = None
    if context is not None:
        base_url, tls = _named_context(context)
    elif base_url is not None and tls_files is not None:
        ca_cert, client_cert, client_key = tls_files
        tls = docker.tls.TLSConfig(client_cert=(client_cert, client_key), ca_cert=ca_cert, verify=ca_cert)
    if base_url is None and not os.environ.get("DOCKER_HOST"):
        base_url, tls = current_context_endpoint()
    endpoint = base_url or os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
    hint = "Start one (as root: `make engine`, or `dockerd &`), or point DOCKER_HOST at a running engine."
    # docker-py leaks its socket when a unix socket path does not exist; say so before it tries.
    if endpoint.startswith("unix://") and not Path(endpoint.removeprefix("unix://")).exists():
        raise EngineUnavailable(f"no Docker engine answers at {endpoint}: the socket does not exist", hint=hint)
    client: docker.DockerClient | None = None
    try:
        client = _DockerClient(base_url=base_url, tls=tls) if base_url else _DockerClient.from_env()
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        if client is not None:
            client.close()
        raise EngineUnavailable(
            f"no Docker engine answers at {redact(endpoint)}: {redact(str(exc).splitlines()[0])}", hint=hint
        ) from None
    return client, endpoint
