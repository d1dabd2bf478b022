"""What the engine is asked to do, as typed values: a build, a pull, an image brought in, something removed.

The container requests (`RunSpec`, `ServiceSpec`, their `Hardening`) are plan vocabulary (plan/specs.py); these
hold what a plan cannot (an open context tar, credentials) or what only a caller decides (the digest-only rule
of a pull). The adapter executes each as it says; every rule about *when* is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from orchestrator.errors import RegistryError
from orchestrator.plan.specs import Builder, BuildNetwork


@dataclass(frozen=True)
class EngineSettings:
    """What `connect()` read for this connection, before connecting (engine/labels.py)."""

    #: Labels put on every container and built layer (`ORCH_LABELS`).
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The repository prefix of orch's default tags (`ORCH_TAG_NAMESPACE`, default `orch`).
    tag_namespace: str = "orch"


@dataclass(frozen=True)
class RegistryAuth:
    """Credentials for one registry, read from environment variables at the moment of use, never stored.

    `repr` hides the password, so a traceback or a debug print of a value holding it shows nothing secret.
    """

    username: str
    password: str = field(repr=False)

    def __repr__(self) -> str:
        return f"RegistryAuth(username={self.username!r}, password='****')"


@dataclass(frozen=True)
class BuildRequest:
    """One `docker build` of a context (its Dockerfile at the top), as the build stage decided it.

    Classic: `context` is the tar the engine receives. BuildKit: `remote` is the URL the engine fetches the
    context tar from (orch's context server, engine.serve), and `context` is None.
    """

    context: IO[bytes] | None
    tag: str
    network: BuildNetwork
    #: The engine's build-label option (only what cannot be in the Dockerfile: the context digest).
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The labels the context's Dockerfile gives its final image (its LABEL instructions, as the plan rendered
    #: them). The engine reads them from the Dockerfile; they are here so the request says what the image will
    #: carry, and a fake engine needs no Dockerfile parser.
    dockerfile_labels: Mapping[str, str] = field(default_factory=dict)
    no_cache: bool = False
    #: The wheel feed's container id (from `engine.serve`), for network `wheel-feed`.
    feed: str | None = None
    #: Called with each line of the build's log as it comes.
    on_line: Callable[[str], None] | None = None
    builder: Builder = "classic"
    remote: str | None = None


@dataclass(frozen=True)
class PullRequest:
    """A pull: of a base image (a missing one is `base-image-missing`), or of a pinned `name@sha256:…`
    (`RegistryError`), as `of_base` and `by_digest` make them."""

    ref: str
    auth: RegistryAuth | None = None
    #: What a failure is: the base the build needs (`base-image-missing`), or a registry's answer.
    missing: Literal["base", "registry"] = "base"

    @classmethod
    def of_base(cls, ref: str) -> PullRequest:
        return cls(ref)

    @classmethod
    def by_digest(cls, reference: str, auth: RegistryAuth | None = None) -> PullRequest:
        """orch pulls a handed-over image by digest only, never by tag (a tag can move)."""
        if not reference.partition("@")[2].startswith("sha256:"):
            raise RegistryError(f"{reference} names no digest; orch pulls only by digest (a tag can move)")
        return cls(reference, auth, "registry")


@dataclass(frozen=True)
class RootfsImport:
    """`docker import` of a root filesystem tar as `repository:tag`, with Dockerfile `changes` (LABEL, ENV …)."""

    tar_path: Path
    repository: str
    tag: str
    changes: Sequence[str] = ()


@dataclass(frozen=True)
class CopyOut:
    """After a clean exit, the engine's tar of the container's folder `path`, written to `dest` (at most
    `max_bytes` + 1 bytes: the reader refuses a larger one). No host mount: the files reach the host only as
    that tar, which the caller reads as untrusted."""

    path: str
    dest: IO[bytes]
    max_bytes: int


@dataclass(frozen=True)
class RemoveImage:
    """Remove an image by `ref` (forced), or with `tag_only` just the name `ref` (never the image: the engine
    refuses when it is the image's last name, so the caller checks that the image keeps another one)."""

    ref: str
    tag_only: bool = False


@dataclass(frozen=True)
class RemoveContainers:
    """Force-remove every container with this label (`key=value`), running or not."""

    label: str
