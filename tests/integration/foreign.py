"""Stand-ins for another user's objects on a shared engine: images (tagged and dangling) and containers.

They carry another owner's label, never the session's, and are made with the raw SDK as that user
would make them. The suite must leave every one of them as it found it (conftest.foreign_objects).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors

from orchestrator.dossier.load import load_dossier
from orchestrator.plan.build import default_tag
from tests.integration.helpers import SESSION_ID, SESSION_KEY
from tests.paths import EXAMPLES

OWNER_LABEL = "com.example.owner"
#: The examples whose default tag another user of the engine is most likely to hold (`make demo` builds
#: minilm-embeddings): the suite builds them too, under its own tag namespace.
DEFAULT_TAG_DOSSIERS = (
    EXAMPLES / "tiny-embeddings" / "dossier.yaml",
    EXAMPLES / "minilm-embeddings" / "dossier.yaml",
    EXAMPLES / "same-categories" / "dossier.yaml",
    EXAMPLES / "resume-training" / "dossier.yaml",
)


def foreign_build(client: docker.DockerClient, base: str, body: str, tag: str | None = None) -> str:
    """Build `FROM base` + `body` as another user would (no orch, no session label); returns the image id.

    Its owner label names this session's stand-in user, so two test runs on one engine never share
    a stand-in image through the build cache (each run removes its own at the end).
    """
    dockerfile = f"FROM {base}\nLABEL {OWNER_LABEL}=another-user-{SESSION_ID}\n{body}\n"
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, network_mode="none")
    return str(image.id)


@dataclass
class ForeignObjects:
    tagged_image: str
    tag: str
    dangling_image: str
    running_container: str
    exited_container: str
    extra_images: list[str] = field(default_factory=list)
    #: Another user's images under the default tags (`orch/<name>:<identity>`) of the examples the suite
    #: builds: tag → image id. Present already (a `make demo` on this engine) or made here as stand-ins.
    default_tags: dict[str, str] = field(default_factory=dict)
    made_default_tags: list[str] = field(default_factory=list)

    def missing(self, client: docker.DockerClient) -> list[str]:
        """What is no longer as it was: a removed image or tag, a removed or stopped container."""
        missing = []
        for image_id in [self.tagged_image, self.dangling_image, *self.extra_images]:
            try:
                client.images.get(image_id)
            except docker.errors.ImageNotFound:
                missing.append(f"image {image_id}")
        try:
            if str(client.images.get(self.tag).id) != self.tagged_image:
                missing.append(f"tag {self.tag} re-pointed")
        except docker.errors.ImageNotFound:
            missing.append(f"tag {self.tag}")
        for tag, image_id in self.default_tags.items():
            missing += _default_tag_damage(client, tag, image_id)
        for container_id, status in ((self.running_container, "running"), (self.exited_container, "exited")):
            try:
                observed = client.containers.get(container_id).status
            except docker.errors.NotFound:
                missing.append(f"container {container_id}")
                continue
            if observed != status:
                missing.append(f"container {container_id} is {observed}, was {status}")
        return missing

    def remove(self, client: docker.DockerClient) -> None:
        for container_id in (self.running_container, self.exited_container):
            with contextlib.suppress(docker.errors.NotFound):
                client.containers.get(container_id).remove(force=True)
        for image_id in [*self.extra_images, self.tagged_image, self.dangling_image]:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(image_id, force=True)
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(self.tag)
        for tag in self.made_default_tags:  # the stand-ins made here, by id (the tag may be a real user's now)
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(self.default_tags[tag], force=True)


def _default_tag_damage(client: docker.DockerClient, tag: str, image_id: str) -> list[str]:
    """What this session did to another user's default tag, told apart from what its owner did meanwhile.

    The suite's damage has two signatures: the tag now names an image of this session (a build
    re-pointed it), or the tag is gone while the image it named is still there (re-pointed, then the
    session's image removed with the tag). A user who rebuilt (tag on their own image) or removed their
    image (tag gone with it) during the run is not the suite's doing.
    """
    try:
        now = client.images.get(tag)
    except docker.errors.ImageNotFound:
        try:
            client.images.get(image_id)
        except docker.errors.ImageNotFound:
            return []
        return [f"default tag {tag} taken from image {image_id}"]
    if str(now.id) != image_id and (now.labels or {}).get(SESSION_KEY) == SESSION_ID:
        return [f"default tag {tag} re-pointed to this session's image {now.id}"]
    return []


def make_foreign_objects(client: docker.DockerClient, base: str) -> ForeignObjects:
    tag = f"another-user-{SESSION_ID}/app:1"
    tagged = foreign_build(client, base, "RUN echo finished > /result", tag=tag)
    dangling = foreign_build(client, base, "RUN echo builder-tip > /tip")  # untagged: what a prune would take
    labels = {OWNER_LABEL: f"another-user-{SESSION_ID}"}
    running = client.containers.run(tagged, ["sleep", "infinity"], detach=True, network_mode="none", labels=labels)
    exited = client.containers.run(tagged, ["true"], detach=True, network_mode="none", labels=labels)
    exited.wait(timeout=60)
    foreign = ForeignObjects(tagged, tag, dangling, str(running.id), str(exited.id))
    with _default_tags_lock():
        for dossier in DEFAULT_TAG_DOSSIERS:
            # The tag a user who is not the suite gets for this dossier (namespace `orch`, no ORCH_TAG_NAMESPACE).
            default = default_tag(load_dossier(dossier))
            try:
                # A real user's image, or another test session's stand-in (the other xdist worker's, or
                # another run's): guarded either way. Its maker removing it at its own end leaves the tag
                # and the image gone together, which `_default_tag_damage` does not count as damage.
                foreign.default_tags[default] = str(client.images.get(default).id)
            except docker.errors.ImageNotFound:
                made = foreign_build(client, base, f"RUN echo {SESSION_ID} > /owner", tag=default)
                foreign.default_tags[default] = made
                foreign.made_default_tags.append(default)
    return foreign


@contextlib.contextmanager
def _default_tags_lock() -> Iterator[None]:
    """One test session at a time looks up and makes the default-tag stand-ins on this host.

    Without it the two xdist workers both found a default tag absent, both made a stand-in, the second
    re-pointed the tag, and the second's removal at its end left the first's image without its tag:
    the guard read that as the suite's damage (CI of stop 30). A host-wide lock file also covers two
    test runs started together on one machine.
    """
    path = Path(tempfile.gettempdir()) / "orch-test-default-tag-stand-ins.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class ForeignBuildInProgress(threading.Thread):
    """Another user's build that runs while the suite cleans up: it must finish with its image intact."""

    def __init__(self, client: docker.DockerClient, base: str, seconds: int) -> None:
        super().__init__(daemon=True)
        self.client, self.base, self.seconds = client, base, seconds
        self.image_id: str | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.image_id = foreign_build(
                self.client, self.base, f"RUN sleep {self.seconds} && echo slow > /slow\nRUN echo next > /next"
            )
        except BaseException as exc:  # reported by the test that started it
            self.error = exc
