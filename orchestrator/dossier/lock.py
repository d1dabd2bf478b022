"""Reading a pinned requirements file (the dossier's lock).

A lock here is pip's requirements format restricted to what a rebuild can trust: one `name==version`
per requirement (environment markers allowed), optional `--hash=sha256:…` options, comments and line
continuations. Index options inside the file are refused: indexes belong to the dossier, where their
credentials are named and redacted, not to a file that gets copied into the build context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from orchestrator.errors import LockError

_HASH = re.compile(r"^--hash[= ]sha256:([0-9a-f]{64})$")


@dataclass(frozen=True)
class LockedRequirement:
    name: str  # canonical (PEP 503) name
    version: Version
    text: str  # the requirement as written, without hashes: 'torch==2.13.0+cpu'
    hashes: tuple[str, ...]
    marker: str | None
    line: int


@dataclass(frozen=True)
class Lock:
    requirements: tuple[LockedRequirement, ...]

    def get(self, name: str) -> LockedRequirement | None:
        wanted = canonicalize_name(name)
        return next((req for req in self.requirements if req.name == wanted), None)

    @property
    def fully_hashed(self) -> bool:
        return all(req.hashes for req in self.requirements)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; strip comments. Returns (first physical line number, content)."""
    out: list[tuple[int, str]] = []
    buffer = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not buffer:
            start = number
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        if buffer.strip():
            out.append((start, buffer.strip()))
        buffer = ""
    if buffer.strip():
        out.append((start, buffer.strip()))
    return out


def parse_lock(text: str) -> Lock:
    requirements: list[LockedRequirement] = []
    seen: dict[str, int] = {}
    for line_no, line in _logical_lines(text):
        tokens = line.split()
        spec_tokens: list[str] = []
        hashes: list[str] = []
        index = 0
        while index < len(tokens):
            token = tokens[index]
            if token == "--hash" and index + 1 < len(tokens):
                token = f"--hash={tokens[index + 1]}"
                index += 1
            if token.startswith("--hash"):
                match = _HASH.match(token)
                if match is None:
                    raise LockError(line_no, f"bad hash option {token!r}: use --hash=sha256:<64 hex digits>")
                hashes.append(match.group(1))
            elif token.startswith("-"):
                raise LockError(
                    line_no,
                    f"option {token!r} is not allowed in the lock: declare indexes and find-links in the "
                    "dossier's python section (credentials by name), editable or local installs are not locks",
                )
            else:
                spec_tokens.append(token)
            index += 1
        spec = " ".join(spec_tokens)
        try:
            requirement = Requirement(spec)
        except InvalidRequirement as exc:
            raise LockError(line_no, f"not a requirement: {spec!r} ({exc})") from None
        if requirement.url:
            raise LockError(line_no, f"{requirement.name}: direct URLs are not allowed in a lock")
        pins = [s for s in requirement.specifier if s.operator in ("==", "===") and "*" not in s.version]
        if len(pins) != 1 or len(requirement.specifier) != 1:
            raise LockError(
                line_no,
                f"{requirement.name} is not pinned: a lock needs exactly 'name==version' (got {spec!r})",
            )
        try:
            version = Version(pins[0].version)
        except InvalidVersion:
            raise LockError(line_no, f"{requirement.name}: invalid version {pins[0].version!r}") from None
        name = canonicalize_name(requirement.name)
        marker = str(requirement.marker) if requirement.marker else None
        if name in seen and marker is None:
            raise LockError(line_no, f"{requirement.name} is pinned twice (first on line {seen[name]})")
        seen.setdefault(name, line_no)
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        requirements.append(
            LockedRequirement(
                name=name,
                version=version,
                text=f"{requirement.name}{extras}=={version}",
                hashes=tuple(hashes),
                marker=marker,
                line=line_no,
            )
        )
    if not requirements:
        raise LockError(1, "the lock pins no package")
    return Lock(requirements=tuple(requirements))
