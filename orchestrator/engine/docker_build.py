"""A build on a Docker engine, its log streamed line by line and kept within a bound.

docker-py's `images.build()` drains the whole stream before returning, so the build uses the low-level
streaming `api.build(decode=True)` and reports each line as it comes. Docker calls only: reading the log
(the failed step, pip's and apt's errors) is engine/build_log.py's job, called by the build stage.
"""

from __future__ import annotations

import re

import docker
import docker.errors

from orchestrator.engine import BuildOutcome
from orchestrator.engine.requests import BuildRequest
from orchestrator.plan.specs import BuildNetwork
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


def build(client: docker.DockerClient, request: BuildRequest) -> BuildOutcome:
    """The outcome; its image id as the stream said it (None without an error: the caller looks up the tag)."""
    # A RUN step is code from the packages being installed: what it prints is kept within a bound.
    log = CappedStream(BUILD_LOG_BYTES)
    image_id: str | None = None
    error: str | None = None
    on_line = request.on_line
    try:
        stream = client.api.build(
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
        for chunk in stream:
            if "stream" in chunk:
                for raw in str(chunk["stream"]).splitlines():
                    line = redact(_ANSI.sub("", raw))
                    log.feed(line.encode("utf-8", errors="replace") + b"\n")
                    if on_line is not None:
                        on_line(line)
            elif "error" in chunk:
                error = redact(str(chunk["error"]).strip())
                log.feed(f"ERROR: {error}\n".encode())
                if on_line is not None:
                    on_line(f"ERROR: {error}")
            elif "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
                image_id = str(chunk["aux"]["ID"])
    except docker.errors.APIError as exc:
        error = redact(str(exc.explanation))
        log.feed(f"ERROR: {error}\n".encode())
    if error is not None:
        return BuildOutcome(image_id=None, log=log.text(), error=error)
    return BuildOutcome(image_id=image_id, log=log.text())
