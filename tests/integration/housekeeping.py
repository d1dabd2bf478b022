"""The suite's own housekeeping on a shared engine: remove this session's objects, and only those.

What was seen before this module existed: the suite force-removed every image made since a test
started, whoever made it, and pruned all dangling images — on a shared engine it destroyed another
user's finished image and two of their builds in progress. Now every object is found by the session
label (helpers.SESSION_FILTER); nothing is pruned; an image that cannot be removed (a kept image still
needs it as a parent, or a container uses it) is left for the session's final sweep.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import docker
import docker.errors

from tests.integration.helpers import SESSION_FILTER


def session_images(client: docker.DockerClient) -> set[str]:
    """Every image layer this session made: tagged images, dangling tips and intermediate layers."""
    return {str(image.id) for image in client.images.list(all=True, filters={"label": SESSION_FILTER})}


def remove_session_images(client: docker.DockerClient, keep: AbstractSet[str] = frozenset()) -> set[str]:
    """Remove this session's images that are not in `keep`; returns the ids that could not go.

    Top-level images first (removing one also removes its unused untagged parents), then whatever
    layers are left, newest first (a failed build's leftovers). A layer that still has children (an
    image in `keep` builds on it) cannot be removed, even forced: the engine refuses, and it stays.
    """
    for image in client.images.list(filters={"label": SESSION_FILTER}):
        if str(image.id) not in keep:
            _remove(client, str(image.id))
    left = [
        image for image in client.images.list(all=True, filters={"label": SESSION_FILTER}) if str(image.id) not in keep
    ]
    for image in sorted(left, key=lambda image: str(image.attrs.get("Created", "")), reverse=True):
        _remove(client, str(image.id))
    return session_images(client) - set(keep)


def remove_session_containers(client: docker.DockerClient) -> list[str]:
    """Remove this session's containers (orch removes its own; this is the safety net). Returns their ids."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": SESSION_FILTER}):
        try:
            container.remove(force=True)
            removed.append(str(container.id))
        except docker.errors.NotFound:
            continue
    return removed


def _remove(client: docker.DockerClient, image_id: str) -> None:
    try:
        client.images.remove(image_id, force=True)
    except docker.errors.ImageNotFound:
        pass  # already gone with a child removed before it
    except docker.errors.APIError:
        pass  # still a parent of a kept image, or in use: the session's final sweep takes it
