"""The suite's own housekeeping on a shared engine: remove this session's objects, and only those.

What was seen before this module existed: the suite force-removed every image made since a test
started, whoever made it, and pruned all dangling images — on a shared engine it destroyed another
user's finished image and two of their builds in progress. Now every object is found by the session
label (helpers.SESSION_FILTER); nothing is pruned; an image that cannot be removed (a kept image still
needs it as a parent, or a container uses it) is left for the session's final sweep.

A slow or loaded engine leaves things half-way: a container of a stopped build still stopping ("removal
already in progress", "is running"), an image whose child is not removed yet (`409 Conflict … image has
dependent child images`: seen on the second daemon, issue 22). `remove_images` takes the given images
children first and retries what the engine refused for a bounded time; it is given only ids the caller
found by its own label, so nothing another user made is ever touched.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet

import docker
import docker.errors
import docker.models.containers

from tests.integration.helpers import SESSION_FILTER

#: How long a teardown waits for the engine to let go of an object (a container still stopping, a child
#: image still being removed) before it gives up and leaves it to the session's final sweep.
SETTLE_S = 60.0
_PAUSE_S = 1.0
_MAX_PASSES = 200


def session_images(client: docker.DockerClient) -> set[str]:
    """Every image layer this session made: tagged images, dangling tips and intermediate layers."""
    return {str(image.id) for image in client.images.list(all=True, filters={"label": SESSION_FILTER})}


def remove_session_images(
    client: docker.DockerClient, keep: AbstractSet[str] = frozenset(), settle_s: float = 0.0
) -> set[str]:
    """Remove this session's images that are not in `keep`; returns the ids that could not go.

    Children before parents (an image in `keep` builds on a layer: that layer stays, the engine refuses
    it, even forced). `settle_s`: how long to retry what the engine refused (0: one pass per image, as
    a per-test teardown does; the session's final sweep waits for a loaded engine).
    """
    label = SESSION_FILTER

    def listed() -> set[str]:
        return {str(image.id) for image in client.images.list(all=True, filters={"label": label})} - set(keep)

    remove_images(client, listed, settle_s=settle_s)
    return session_images(client) - set(keep)


def remove_images(client: docker.DockerClient, find: Callable[[], set[str]], settle_s: float = SETTLE_S) -> set[str]:
    """Remove the images `find()` names (ids the caller found by its own label), children first.

    Each pass removes the images no other listed image builds on (newest first), then lists again:
    removing a child may take its untagged parents with it, or free the next parent. A refusal (a child
    not yet removed, a container still stopping) is retried until `settle_s` has passed. Returns what is
    left. Never prunes, never removes an id `find` did not name.
    """
    deadline = time.monotonic() + settle_s
    left = find()
    for _ in range(_MAX_PASSES):
        if not left:
            break
        wanted = left
        refused = False
        for image_id in _children_first(client, wanted):
            refused |= not _remove(client, image_id)
        left = find()
        if left != wanted:
            continue  # progress: a parent may be free now
        if not refused or time.monotonic() >= deadline:
            break
        time.sleep(_PAUSE_S)
    return left


def _children_first(client: docker.DockerClient, ids: Iterable[str]) -> list[str]:
    """`ids` ordered so that an image comes before its parent (by each image's `Parent`), newest first."""
    parent: dict[str, str] = {}
    created: dict[str, str] = {}
    for image_id in ids:
        try:
            attrs = client.images.get(image_id).attrs
        except docker.errors.ImageNotFound:
            continue
        parent[image_id] = str(attrs.get("Parent") or "")
        created[image_id] = str(attrs.get("Created") or "")

    def depth(image_id: str) -> int:
        seen, steps = image_id, 0
        while parent.get(seen) in parent and steps < len(parent):
            seen, steps = parent[seen], steps + 1
        return steps

    return sorted(parent, key=lambda image_id: (depth(image_id), created[image_id]), reverse=True)


def remove_session_containers(client: docker.DockerClient, settle_s: float = SETTLE_S) -> list[str]:
    """Remove this session's containers (orch removes its own; this is the safety net). Returns their ids.

    A container the engine is still stopping or already removing refuses (409): retried until `settle_s`.
    """
    return remove_containers(client, {"label": SESSION_FILTER}, settle_s=settle_s)


def remove_containers(
    client: docker.DockerClient,
    filters: dict[str, str | list[str]],
    settle_s: float = SETTLE_S,
    mine: Callable[[docker.models.containers.Container], bool] = lambda _: True,
) -> list[str]:
    """Force-remove the containers `filters` (the caller's own label) and `mine` select, retrying refusals."""
    deadline = time.monotonic() + settle_s
    removed: list[str] = []
    while True:
        refused = False
        for container in client.containers.list(all=True, filters=filters):
            if not mine(container):
                continue
            try:
                container.remove(force=True)
                removed.append(str(container.id))
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError:
                refused = True  # still stopping, or its removal already in progress
        if not refused or time.monotonic() >= deadline:
            return removed
        time.sleep(_PAUSE_S)


def _remove(client: docker.DockerClient, image_id: str) -> bool:
    """Force-remove one image; False when the engine refused (a child left, a container using it)."""
    try:
        client.images.remove(image_id, force=True)
    except docker.errors.ImageNotFound:
        pass  # already gone with a child removed before it
    except docker.errors.APIError:
        return False
    return True


# -- BuildKit's build cache --------------------------------------------------------------------------------
# A BuildKit build keeps its steps in the engine's build cache, not as images: the session label cannot
# find them, and removing the session's images frees none of it (a cold minilm build leaves 1.5 GB). The
# suite removes the records made while a module ran (and, from the controlling process, those made while
# the whole run went on), found by their ids against the ones that were there before. Another user's build
# running at the same moment loses cached steps (never an image, a tag or a container): it builds them again.


def build_cache_ids(client: docker.DockerClient) -> set[str]:
    return {str(record["ID"]) for record in (client.api.df().get("BuildCache") or [])}


def prune_build_cache(client: docker.DockerClient, keep: AbstractSet[str]) -> int:
    """Remove the build-cache records not in `keep` and not in use; how many went.

    The engine removes a record only once no other record has it as a parent, so each pass takes the leaves
    (`/build/prune` filtered by one id: the map form of the filter; the list form matches nothing on 20.10).
    """
    removed = 0
    for _ in range(_MAX_PASSES):
        records = client.api.df().get("BuildCache") or []
        parents = {str(record.get("Parent") or "") for record in records}
        for record in records:
            parents.update(str(parent) for parent in record.get("Parents") or ())
        leaves = [
            str(record["ID"])
            for record in records
            if record["ID"] not in keep and not record.get("InUse") and record["ID"] not in parents
        ]
        went = 0
        for record_id in leaves:
            answer = client.api._post_json(
                client.api._url("/build/prune"),
                data=None,
                params={"filters": json.dumps({"id": {record_id: True}})},
            )
            went += len((answer.json() or {}).get("CachesDeleted") or [])
        removed += went
        if went == 0:
            return removed
    return removed
