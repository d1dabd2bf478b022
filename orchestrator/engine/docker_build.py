"""A build on a Docker engine, its log streamed line by line and kept within a bound.

Two builders. Classic: docker-py's low-level streaming `api.build(decode=True)` (its `images.build()` drains
the whole stream before returning) with the context tar uploaded. BuildKit: docker-py cannot drive it
(docker/docker-py#2230, #3344: it needs the client session), so orch posts `/build?version=2` itself with a
*remote* context, a tar URL the engine fetches (orch's context server, engine.serve): the daemon's BuildKit
needs no client session for that, and it works on a remote TLS endpoint as on the local socket. Its progress
comes as protobuf trace messages, turned into classic-shaped log lines by engine/buildkit_trace.py, so one
reader of the log (engine/build_log.py: the failed step, pip's and apt's errors) serves both builders.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import docker
import docker.errors
from packaging.version import InvalidVersion, Version

from orchestrator.engine import BuildOutcome
from orchestrator.engine.buildkit_trace import ClassicLog
from orchestrator.engine.requests import BuildRequest
from orchestrator.plan.specs import Builder, BuildNetwork
from orchestrator.redact import redact
from orchestrator.untrusted import CappedStream

#: Bytes of a build's log kept (head and tail): a pip install prints a few MB at most.
BUILD_LOG_BYTES = 32 << 20
# The classic builder wraps a step's stderr in colour escapes; they carry nothing a log reader needs.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def build_network_mode(network: BuildNetwork, feed: str | None) -> str | None:
    """The build API's `networkmode`: `container:<feed>` joins the feed's namespace (its loopback, nothing else)."""
    if network == "wheel-feed":
        if feed is None:
            raise ValueError("a wheel-feed build needs the feed's container id")
        return f"container:{feed}"
    return {"none": "none", "default": None, "host": "host"}[network]


#: The API version that has `/build?version=2` (BuildKit) on a Linux engine (Docker 18.09).
BUILDKIT_API = Version("1.39")


def builders(os_type: str, api_version: str, kind: str = "docker") -> tuple[Builder, ...]:
    """The builders an engine offers, preferred first: BuildKit on a Linux Docker engine whose API has it.

    Podman's API service builds with Buildah: it answers `/build` like the classic builder (an uploaded
    context, a JSON stream of `stream` lines) and has no BuildKit session or trace messages, so it offers
    classic only, whatever API version it claims."""
    if kind == "podman":
        return ("classic",)
    try:
        recent = Version(api_version) >= BUILDKIT_API
    except InvalidVersion:
        recent = False
    return ("buildkit", "classic") if os_type == "linux" and recent else ("classic",)


def build(client: docker.DockerClient, request: BuildRequest) -> BuildOutcome:
    """The outcome; its image id as the stream said it (None without an error: the caller looks up the tag)."""
    # A RUN step is code from the packages being installed: what it prints is kept within a bound.
    log = CappedStream(BUILD_LOG_BYTES)
    image_id: str | None = None
    error: str | None = None
    on_line = request.on_line
    trace = ClassicLog()

    def emit(line: str) -> None:
        line = redact(line)
        log.feed(line.encode("utf-8", errors="replace") + b"\n")
        if on_line is not None:
            on_line(line)

    try:
        stream = (
            _buildkit_stream(client, request) if request.builder == "buildkit" else _classic_stream(client, request)
        )
        for chunk in stream:
            if "stream" in chunk:
                for raw in str(chunk["stream"]).splitlines():
                    emit(_ANSI.sub("", raw))
            elif "error" in chunk:
                for line in trace.finish():
                    emit(line)
                error = redact(str(chunk["error"]).strip())
                emit(f"ERROR: {error}")
            elif chunk.get("id") == "moby.buildkit.trace" and isinstance(chunk.get("aux"), str):
                for line in trace.feed(chunk["aux"]):
                    emit(_ANSI.sub("", line))
            elif "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
                image_id = str(chunk["aux"]["ID"])
        for line in trace.finish():
            emit(line)
    except docker.errors.APIError as exc:
        error = redact(str(exc.explanation))
        log.feed(f"ERROR: {error}\n".encode())
    if error is not None:
        return BuildOutcome(image_id=None, log=log.text(), error=error)
    return BuildOutcome(image_id=image_id, log=log.text())


def _classic_stream(client: docker.DockerClient, request: BuildRequest) -> Iterable[dict[str, Any]]:
    if request.context is None:
        raise ValueError("a classic build uploads its context: BuildRequest.context is None")
    stream: Iterable[dict[str, Any]] = client.api.build(
        fileobj=request.context,
        custom_context=True,
        tag=request.tag,
        rm=True,
        forcerm=True,  # intermediate containers go even when a step fails
        decode=True,
        nocache=request.no_cache,
        network_mode=build_network_mode(request.network, request.feed),
        labels=dict(request.labels),
        # docker-py would copy proxy settings from ~/.docker/config.json into build args, which
        # `docker history` shows: a proxy URL with credentials would leak into the image.
        use_config_proxy=False,
    )
    return stream


def _buildkit_stream(client: docker.DockerClient, request: BuildRequest) -> Iterable[dict[str, Any]]:
    """`POST /build?version=2` with the context at `request.remote`; the decoded JSON messages as they come.

    docker-py's private `_post`/`_stream_helper` are the SDK's own transport (the socket, TLS, the negotiated
    API version), used because its public `build()` has no `version` parameter.
    """
    if request.remote is None:
        raise ValueError("a BuildKit build fetches its context: BuildRequest.remote is None")
    if request.network == "wheel-feed":
        raise ValueError("BuildKit builds read the wheels from the context, not from the wheel feed")
    params: dict[str, Any] = {
        "version": "2",
        "remote": request.remote,
        "t": request.tag,
        "rm": "1",
        "forcerm": "1",
        "nocache": "1" if request.no_cache else "0",
        "labels": json.dumps(dict(request.labels)),
    }
    network = build_network_mode(request.network, None)
    if network is not None:
        params["networkmode"] = network
    api: Any = client.api
    response = api._post(api._url("/build"), params=params, stream=True, timeout=None)
    api._raise_for_status(response)
    decoded: Iterable[dict[str, Any]] = api._stream_helper(response, decode=True)
    return decoded
