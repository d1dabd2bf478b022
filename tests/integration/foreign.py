"""Stand-ins for another user's objects on a shared engine: images (tagged and dangling) and containers.

They carry another owner's label, never the session's, and are made with the raw SDK as that user
would make them. The suite must leave every one of them as it found it (conftest.foreign_objects).
"""

from __future__ import annotations

import contextlib
import io
import threading
from dataclasses import dataclass, field

import docker
import docker.errors

from tests.integration.helpers import SESSION_ID

OWNER_LABEL = "com.example.owner"


def foreign_build(client: docker.DockerClient, base: str, body: str, tag: str | None = None) -> str:
    """Build `FROM base` + `body` as another user would (no orch, no session label); returns the image id."""
    dockerfile = f"FROM {base}\nLABEL {OWNER_LABEL}=another-user\n{body}\n"
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


def make_foreign_objects(client: docker.DockerClient, base: str) -> ForeignObjects:
    tag = f"another-user-{SESSION_ID}/app:1"
    tagged = foreign_build(client, base, "RUN echo finished > /result", tag=tag)
    dangling = foreign_build(client, base, "RUN echo builder-tip > /tip")  # untagged: what a prune would take
    labels = {OWNER_LABEL: "another-user"}
    running = client.containers.run(tagged, ["sleep", "infinity"], detach=True, network_mode="none", labels=labels)
    exited = client.containers.run(tagged, ["true"], detach=True, network_mode="none", labels=labels)
    exited.wait(timeout=60)
    return ForeignObjects(tagged, tag, dangling, str(running.id), str(exited.id))


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
