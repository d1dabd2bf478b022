"""On a shared engine the suite and orch touch only what they made (issue 9, defect 7)."""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path

import docker
import docker.errors

from orchestrator.engine import BuildRequest, Engine
from orchestrator.engine.build_log import build_failure
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build_context import context_tar
from tests.integration.foreign import ForeignBuildInProgress, ForeignObjects, _default_tag_damage, foreign_build
from tests.integration.helpers import SESSION_FILTER, SESSION_ID, session_containers
from tests.integration.housekeeping import remove_session_images, session_images


def _failing_build(engine: Engine, base: str, folder: Path) -> None:
    """A build that makes two layers, then fails, opening with the session label as orch's builds do."""
    folder.mkdir()
    (folder / "Dockerfile").write_text(
        f"FROM {base}\nLABEL {SESSION_FILTER}\nRUN echo made > /made\nRUN exit 3\n", encoding="utf-8"
    )
    tar = context_tar(folder)
    with tar.file:
        outcome = engine.build(BuildRequest(tar.file, f"orch-test-{SESSION_ID}/fails:1", network="none"))
    assert outcome.image_id is None and build_failure(outcome.log, outcome.error).step == "RUN exit 3"


def test_every_layer_of_a_failed_build_is_labelled_and_only_the_session_s_are_removed(
    engine: Engine,
    docker_client: docker.DockerClient,
    base_image: BaseOutcome,
    foreign_objects: ForeignObjects,
    tmp_path: Path,
) -> None:
    before = session_images(docker_client)
    _failing_build(engine, base_image.ref, tmp_path / "context")
    leftovers = session_images(docker_client) - before
    # At least the RUN layer is new (its LABEL step may be a cache hit of the warm image's final stage).
    assert leftovers, "the failed build's layers exist and inherit the session label"
    everything = {str(image.id) for image in docker_client.images.list(all=True)}
    assert leftovers <= everything

    # Another user builds while the suite cleans up; their build must finish and keep its image.
    foreign_build = ForeignBuildInProgress(docker_client, base_image.ref, seconds=6)
    foreign_build.start()
    time.sleep(2)
    left = remove_session_images(docker_client, keep=before)
    foreign_build.join(timeout=300)

    assert not left and not (session_images(docker_client) - before), "the session's own layers are removed"
    assert foreign_build.error is None, foreign_build.error
    assert foreign_build.image_id is not None
    foreign_objects.extra_images.append(foreign_build.image_id)
    assert foreign_objects.missing(docker_client) == [], "another user's objects must survive"
    assert session_containers() == set(), "no container of this session is left"


def test_orch_s_containers_carry_the_session_label_and_foreign_ones_are_not_counted(
    engine: Engine, docker_client: docker.DockerClient, foreign_objects: ForeignObjects
) -> None:
    # The foreign containers exist (one running) but are not this session's.
    assert foreign_objects.running_container not in session_containers()
    labelled = docker_client.containers.list(all=True, filters={"label": SESSION_FILTER})
    assert all(c.id not in (foreign_objects.running_container, foreign_objects.exited_container) for c in labelled)
    assert engine.settings.labels.get("io.orch.test-session") == SESSION_FILTER.split("=", 1)[1]


def test_the_default_tag_guard_tells_the_suite_s_damage_from_the_owner_s_own_changes(
    docker_client: docker.DockerClient, base_image: BaseOutcome
) -> None:
    """The guard behind `foreign_objects` (the examples' `orch/…` tags another user holds): it fails on
    what the suite would do (re-point the tag to a session image, then remove that image), not on the
    owner rebuilding or removing their own image meanwhile."""
    tag = f"another-user-{SESSION_ID}/guarded:1"
    owners = foreign_build(docker_client, base_image.ref, "RUN echo owner > /o", tag=tag)
    rebuilt = foreign_build(docker_client, base_image.ref, "RUN echo rebuilt > /o")
    try:
        assert _default_tag_damage(docker_client, tag, owners) == []
        # The owner rebuilds: the tag moves to another image of theirs. Not the suite's doing.
        docker_client.images.get(rebuilt).tag(tag)
        assert _default_tag_damage(docker_client, tag, owners) == []
        docker_client.images.get(owners).tag(tag)  # back, as it was
        # The suite's damage: a session-labelled build takes the tag ...
        # Its own last layer (a bare session LABEL would be the cached first layer of the session's orch builds,
        # which has children and cannot be removed).
        dockerfile = f"FROM {base_image.ref}\nLABEL {SESSION_FILTER}\nRUN echo guard > /guard\n".encode()
        session_image, _ = docker_client.images.build(
            fileobj=io.BytesIO(dockerfile), tag=tag, rm=True, network_mode="none"
        )
        assert "re-pointed to this session's image" in " ".join(_default_tag_damage(docker_client, tag, owners))
        # ... then its clean-up removes the tag with the session image: the owner's image is left untagged.
        docker_client.images.remove(str(session_image.id), force=True)
        assert "taken from image" in " ".join(_default_tag_damage(docker_client, tag, owners))
        # The owner removing their own image (tag and all) is theirs to do.
        docker_client.images.get(owners).tag(tag)
        docker_client.images.remove(owners, force=True)
        assert _default_tag_damage(docker_client, tag, owners) == []
    finally:
        for image_id in (owners, rebuilt):
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(image_id, force=True)
