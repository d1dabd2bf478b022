"""Image references (`registry:5000/team/name:tag@sha256:…`), parsed by the distribution project's grammar.

Why our own parser: only the Docker adapter may import docker-py (whose `parse_repository_tag` also
accepts references the registry would refuse), and a hand-over's manifest is untrusted input checked
before an engine is reached. The grammar is distribution/reference's (`reference/regexp.go` in
github.com/distribution/reference), restricted where orch is stricter: the only digest accepted is
`sha256:` with 64 lowercase hex digits, the one form `docker pull` and the registry API both verify.

The first part of a name is a registry when it holds a `.` or a `:`, or is `localhost` (the Docker
CLI's rule, `splitDockerDomain`); otherwise the name is a Docker Hub repository with no registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

# Re-exported until orchestrator/cli and stages/probe.py import it from orchestrator.errors (issue 22 merge).
from orchestrator.errors import ImageReferenceError

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}"

DOMAIN = re.compile(_DOMAIN)
REPOSITORY_PATH = re.compile(_PATH)
TAG = re.compile(_TAG)
DIGEST = re.compile(_DIGEST)
#: The distribution project's limit on a repository name (domain and path together).
NAME_MAX = 255


@dataclass(frozen=True)
class ImageReference:
    #: `registry.example.org:5000`, `127.0.0.1:5055`; None for a Docker Hub name.
    registry: str | None
    #: `team/orch-nightly`
    path: str
    tag: str | None = None
    #: `sha256:<64 hex>`
    digest: str | None = None

    @property
    def name(self) -> str:
        """The repository as the engine names it: `registry/path` (no tag, no digest)."""
        return f"{self.registry}/{self.path}" if self.registry else self.path

    @property
    def pinned(self) -> str | None:
        """`name@sha256:…`, the form that cannot move; None for a tag-only reference."""
        return f"{self.name}@{self.digest}" if self.digest else None

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


class ReferenceParts(NamedTuple):
    """A reference cut where the grammar cuts it, nothing checked: `name` (`[registry/]path`), `tag`, `digest`."""

    name: str
    tag: str | None
    digest: str | None


def split_reference(text: str) -> ReferenceParts:
    """`[registry/]path[:tag][@digest]` cut into its parts without checking them (a reference orch only reads back,
    such as an engine's RepoTags, or a table's row). The digest follows the first `@`; a tag is a `:` after the
    last `/` (before it, a registry's port). `parse_reference` checks the parts this returns."""
    rest, at, digest = text.partition("@")
    slash, colon = rest.rfind("/"), rest.rfind(":")
    tag: str | None = None
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
    return ReferenceParts(rest, tag, digest if at else None)


def parse_reference(text: str) -> ImageReference:
    """`[registry/]path[:tag][@sha256:hex]`, or ImageReferenceError naming the part that is wrong."""
    if not text or len(text) > NAME_MAX + 1 + 128 + 1 + 71:
        raise ImageReferenceError("is empty or too long to be an image reference")
    rest, tag, digest = split_reference(text)
    if digest is not None and not DIGEST.fullmatch(digest):
        raise ImageReferenceError(f"digest {digest[:80]!r} is not 'sha256:' and 64 lowercase hex digits")
    if tag is not None and not TAG.fullmatch(tag):
        raise ImageReferenceError(
            f"tag {tag[:80]!r} is not 1-128 letters, digits, '_', '.', '-' (not starting with . or -)"
        )
    first, separator, remainder = rest.partition("/")
    registry: str | None = None
    path = rest
    if separator and ("." in first or ":" in first or first == "localhost"):
        if not DOMAIN.fullmatch(first):
            raise ImageReferenceError(f"registry {first[:80]!r} is not a host name with an optional :port")
        registry, path = first, remainder
    if not REPOSITORY_PATH.fullmatch(path):
        raise ImageReferenceError(
            f"repository {path[:80]!r} is not lowercase components (a-z, 0-9, separated by '.', '_', '__', '-') "
            "joined by '/'"
        )
    if len(f"{registry}/{path}" if registry else path) > NAME_MAX:
        raise ImageReferenceError(f"the repository name is longer than {NAME_MAX} characters")
    return ImageReference(registry=registry, path=path, tag=tag, digest=digest or None)


def parse_pinned(text: str) -> ImageReference:
    """A reference that names its digest (`name@sha256:…`); a tag alone is refused: a tag can move."""
    reference = parse_reference(text)
    if reference.digest is None:
        raise ImageReferenceError(
            f"names a tag ({reference.tag or 'latest'}) but no digest; a tag can move, so orch pulls only by "
            f"digest: give {reference.name}@sha256:<digest>"
        )
    return reference


def registry_tag(identity: str, night: str, target: str | None = None) -> str:
    """The tag of a published image: `<identity12>-<YYYYMMDD>[.N][-<target>]` (`.N`: a night's second run).

    The dossier identity says what was built, the night when; the target tells apart two cells that
    built the same dossier on two servers the same night (each pushes its own image, never the other's tag).
    """
    if not re.fullmatch(r"[0-9a-f]{12,64}", identity):
        raise ImageReferenceError(f"identity {identity[:80]!r} is not hex")
    if not re.fullmatch(r"[0-9]{8}(?:\.[0-9]+)?", night):
        raise ImageReferenceError(f"night {night!r} is not YYYYMMDD[.N]")
    tag = f"{identity[:12]}-{night}" + (f"-{target}" if target else "")
    if not TAG.fullmatch(tag):
        raise ImageReferenceError(f"tag {tag[:80]!r} is not a valid image tag (the target name {target!r})")
    return tag
