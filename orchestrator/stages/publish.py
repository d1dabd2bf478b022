"""Publishing a built image to a registry, by digest: the one door `orch handover --push` and the night use.

The image is tagged `<registry>/<repository>:<tag>` on the engine that holds it, pushed through that
engine, and known from then on by the registry's digest: `<registry>/<repository>@sha256:…`, the
reference `orch verify` pulls (a tag can move; a digest names one manifest forever). The local push tag
is removed again when the image keeps its own name, so a nightly server does not keep every night's
image alive through its push tag.

Credentials are the *names* of environment variables (from the plan or an option), read at the moment
of the push and handed to the engine only; no value is ever written, logged or put in a result, and a
registry's answer that echoes one is scrubbed (engine adapter). A failure is a `PublishOutcome` with
its reason, never an exception: a registry that is down must not stop a night that already ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.credentials import credential
from orchestrator.engine import Engine, RegistryAuth, RemoveImage
from orchestrator.errors import BadInput, ImageReferenceError, OrchError
from orchestrator.model.image_ref import ImageReference, parse_reference
from orchestrator.text import one_line


class PublishOutcome(BaseModel):
    """What became of one image: pushed (with its pinned reference) or failed (with the reason)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["pushed", "failed"]
    #: The image pushed (`sha256:…`, the engine's image id), when it was known.
    image_id: str | None = None
    #: `registry/repository:tag`, the moving name.
    tagged: str | None = None
    #: `registry/repository@sha256:…`, the reference that cannot move (None when the push failed).
    pinned: str | None = None
    #: One line, when it failed.
    reason: str | None = None


def registry_auth(
    username_env: str | None, password_env: str | None, environ: Mapping[str, str]
) -> RegistryAuth | None:
    """The credentials the two variables hold; None when neither is named (the engine's own login is used).

    BadInput names the variable that is missing, never its value.
    """
    if username_env is None and password_env is None:
        return None
    if username_env is None or password_env is None:
        raise BadInput("registry credentials need both a user name and a password variable (or neither)")
    return RegistryAuth(
        username=credential(username_env, environ, needed_by="the registry login", form="'<user name>'"),
        password=credential(password_env, environ, needed_by="the registry login", form="'<password or token>'"),
    )


def push_target(registry: str, repository: str, tag: str) -> ImageReference:
    """`registry/repository:tag`, checked by the reference grammar (BadInput naming the wrong part)."""
    text = f"{registry}/{repository}:{tag}"
    try:
        reference = parse_reference(text)
    except ImageReferenceError as exc:
        raise BadInput(f"publishing to {text}: {exc}") from None
    if reference.registry != registry or reference.digest is not None:
        raise BadInput(f"publishing to {text}: {registry!r} is not a registry host (it needs a '.' or a ':port')")
    return reference


def _untag(engine: Engine, ref: str) -> None:
    """Remove the tag `ref` only, never an image: nothing unless the image keeps another name (its only name
    gone would remove the image, which is not this stage's to decide)."""
    image = engine.image(ref)
    if image is None or ref not in image.tags or len(image.tags) < 2:
        return
    engine.remove(RemoveImage(ref, tag_only=True))


def publish_image(
    engine: Engine, image: str, target: ImageReference, auth: RegistryAuth | None = None
) -> PublishOutcome:
    """Push `image` (a local tag or id) as `target` and read back its repository digest; never raises."""
    assert target.tag is not None and target.digest is None
    tagged = str(target)
    image_id: str | None = None
    try:
        local = engine.image(image)
        if local is None:
            return PublishOutcome(status="failed", tagged=tagged, reason=f"image {image} is not in the engine")
        image_id = local.id
        holder = engine.image(tagged)
        if holder is not None and holder.id != local.id:
            return PublishOutcome(
                status="failed",
                image_id=image_id,
                tagged=tagged,
                reason=f"{tagged} already names another image here ({holder.id[:19]}); tags are never moved",
            )
        if holder is None:
            engine.tag(local.id, target.name, target.tag)
        try:
            digest = engine.push(target.name, target.tag, auth)
            pinned = f"{target.name}@{digest}"
            # Read back: the engine now knows the image by that repository digest (RepoDigests).
            after = engine.image(pinned)
            if after is None or after.id != local.id:
                return PublishOutcome(
                    status="failed",
                    image_id=image_id,
                    tagged=tagged,
                    reason=f"the push reported {digest}, but the engine does not know image {local.id[:19]} by it",
                )
        finally:
            if holder is None:
                _untag(engine, tagged)
    except OrchError as exc:
        reason = exc.message
        if auth is not None and auth.password:
            reason = reason.replace(auth.password, "****")
        return PublishOutcome(status="failed", image_id=image_id, tagged=tagged, reason=one_line(reason, 400))
    return PublishOutcome(status="pushed", image_id=image_id, tagged=tagged, pinned=pinned)
