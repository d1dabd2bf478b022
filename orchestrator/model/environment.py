"""The environment digest: one content hash of everything the image installed, and its per-file list.

The inventory probe (`probes/inventory.py`, `environment_section`) walks the venv (`/opt/venv`), the app
folder (`/opt/app`) and the built extensions (`/opt/orch/ext`) inside the image, hashes every file
(a symbolic link: its target, prefixed `link:`, never followed) and folds the list into a digest. Two
builds that installed the same bytes give the same digest, whatever their image ids, layer dates or
build machines. Only bytes known to vary from build to build are left out, each by a named rule
(`NORMALISATION_RULES`; measured in docs/environment.md): the source mtime in a bytecode cache's
header, and uv's install timestamp (`*.dist-info/uv_cache.json`, the only file left out whole, and its
line in RECORD).

The list comes out of a container, so it is untrusted: `EnvironmentListing` bounds its size, accepts
only absolute, normalised paths under the roots the probe reports, and hash values of one shape; the
digest is folded again here (`fold_digest`) and must equal the probe's. What `orch compare` and
`orch verify` say about two environments is `diff_environments`. Pure: no Docker, no clock.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

#: The file next to build.json (and in the image stage's output folder) holding the per-file list.
ENVIRONMENT_FILE = "environment.json"
#: Bounds on what a container may hand back: files listed, and one path's length.
MAX_FILES = 300_000
MAX_PATH = 4096
#: Every rule the probe may apply, and why the bytes it zeroes vary between two builds of one dossier.
NORMALISATION_RULES: dict[str, str] = {
    "source mtime in timestamp-based __pycache__/*.pyc": (
        "pip compiles bytecode while it installs; a timestamp-based .pyc (PEP 552 flags 0) carries, in "
        "bytes 8-11 of its header, the mtime its source file got when pip unpacked the wheel: it differs "
        "in every build. Those 4 bytes are zeroed before hashing; the flags, the source size and the "
        "compiled code are hashed (two cold builds of tiny-embeddings: 5933 .pyc files, only these bytes "
        "differed). A hash-based .pyc is hashed whole."
    ),
    "uv_cache.json in *.dist-info": (
        "uv writes <dist>.dist-info/uv_cache.json holding the moment of the install (seconds and "
        "nanoseconds since the epoch): measured different in every build of tiny-embeddings. Left out."
    ),
    "RECORD lines naming uv_cache.json": (
        "RECORD lists uv_cache.json with its sha256, so that line differs too: a RECORD is hashed "
        "without the lines naming uv_cache.json; every other line is hashed."
    ),
}
#: How many differing files a comparison names; the counts always cover all of them.
MAX_NAMED = 200

Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
_VALUE = re.compile(r"^(link:)?[0-9a-f]{64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def fold_digest(files: dict[str, str]) -> str:
    """sha256 over `path NUL value LF` for every path in sorted order: the same fold as the probe's."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode("utf-8") + b"\0" + files[path].encode("ascii") + b"\n")
    return "sha256:" + digest.hexdigest()


def _under(path: str, roots: list[str]) -> bool:
    return any(path.startswith(root + "/") for root in roots)


class EnvironmentListing(Frozen):
    """The probe's `environment` section: validated before anything reads a path from it."""

    roots: list[str] = Field(max_length=8)
    digest: Digest
    normalised: dict[str, int]
    files: dict[str, str] = Field(max_length=MAX_FILES)

    @field_validator("roots")
    @classmethod
    def _plain_roots(cls, roots: list[str]) -> list[str]:
        for root in roots:
            if root == "/" or _path_shape(root) is not None:
                raise ValueError(f"{root[:100]!r} is not an absolute, normalised folder below /")
        return roots

    @field_validator("normalised")
    @classmethod
    def _known_rules(cls, normalised: dict[str, int]) -> dict[str, int]:
        for rule, count in normalised.items():
            if rule not in NORMALISATION_RULES:
                raise ValueError(f"{rule[:100]!r} is not a normalisation rule orch knows")
            if count < 0:
                raise ValueError(f"{rule}: a negative count")
        return normalised

    @model_validator(mode="after")
    def _paths_and_digest(self) -> EnvironmentListing:
        check_files(self.files, self.roots)
        folded = fold_digest(self.files)
        if folded != self.digest:
            raise ValueError(f"the digest {self.digest} is not the fold of its file list ({folded})")
        return self


def _path_shape(path: str) -> str | None:
    if len(path) > MAX_PATH:
        return f"is longer than {MAX_PATH} characters"
    if _CONTROL.search(path):
        return "holds a control character"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "is not UTF-8"
    if not path.startswith("/") or posixpath.normpath(path) != path or "/../" in path + "/":
        return "is not an absolute, normalised path"
    return None


def path_problem(path: str, roots: list[str]) -> str | None:
    """Why `path` may not be listed (None when it may): absolute, normalised, no `..`, inside a root."""
    shape = _path_shape(path)
    if shape is not None:
        return shape
    if not _under(path, roots):
        return "is not under the listed roots"
    return None


def check_files(files: dict[str, str], roots: list[str]) -> None:
    """Every listed path may be listed (`path_problem`) and every value is `[link:]<64 hex>`; else ValueError."""
    for path, value in files.items():
        problem = path_problem(path, roots)
        if problem is not None:
            raise ValueError(f"{path[:200]!r} {problem}")
        if not _VALUE.match(value):
            raise ValueError(f"{path[:200]!r}: {value[:80]!r} is not a sha256 (or link:sha256)")


class EnvironmentSummary(Frozen):
    """What build.json, the report and the hand-over manifest record: the digest and how it was made."""

    digest: Digest
    files: int = Field(description="Files listed (and hashed) in the digest.")
    roots: list[str] = Field(description="The folders walked inside the image.")
    normalised: dict[str, int] = Field(
        description="Files whose varying bytes were zeroed before hashing, per rule (NORMALISATION_RULES says why)."
    )


class EnvironmentFile(Frozen):
    """`environment.json`: the per-file list next to build.json, what compare and verify diff."""

    format: Literal["orch.environment/1"] = "orch.environment/1"
    summary: EnvironmentSummary
    files: dict[str, str] = Field(max_length=MAX_FILES)

    @model_validator(mode="after")
    def _agrees(self) -> EnvironmentFile:
        check_files(self.files, self.summary.roots)
        if fold_digest(self.files) != self.summary.digest or len(self.files) != self.summary.files:
            raise ValueError("the file list does not fold to the recorded digest")
        return self


def environment_file(listing: EnvironmentListing) -> EnvironmentFile:
    summary = EnvironmentSummary(
        digest=listing.digest, files=len(listing.files), roots=list(listing.roots), normalised=dict(listing.normalised)
    )
    return EnvironmentFile(summary=summary, files=dict(sorted(listing.files.items())))


class EnvironmentDiff(Frozen):
    """Two environments: same digest, or the files added, removed and changed (B against A)."""

    same: bool
    digest_a: str
    digest_b: str
    added: list[str] = Field(default_factory=list, description=f"At most {MAX_NAMED} named; see counts.")
    removed: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list)
    counts: dict[Literal["added", "removed", "changed"], int] = Field(default_factory=dict)
    #: Why the files are not named (a side's environment.json is missing), when they are not.
    files_unknown: str | None = None

    def named(self) -> list[tuple[Literal["changed", "added", "removed"], list[str]]]:
        return [("changed", self.changed), ("added", self.added), ("removed", self.removed)]

    def lines(self) -> list[str]:
        """One line per differing file (named ones), then what was left unnamed: for compare and verify."""
        if self.same:
            return []
        if self.files_unknown is not None:
            return [f"environment digest {self.digest_a} → {self.digest_b} ({self.files_unknown})"]
        out = [f"environment file {kind}: {path}" for kind, paths in self.named() for path in paths]
        for kind, paths in self.named():
            left = self.counts.get(kind, 0) - len(paths)
            if left > 0:
                out.append(f"environment: {left} more file(s) {kind} (see environment.json on each side)")
        return out


def diff_environments(
    a: EnvironmentSummary, b: EnvironmentSummary, files_a: dict[str, str] | None, files_b: dict[str, str] | None
) -> EnvironmentDiff:
    """Same environment when the digests match; else the differing files, when both lists are at hand."""
    if a.digest == b.digest:
        return EnvironmentDiff(same=True, digest_a=a.digest, digest_b=b.digest)
    if files_a is None or files_b is None:
        which = "A and B" if files_a is None and files_b is None else ("A" if files_a is None else "B")
        return EnvironmentDiff(
            same=False,
            digest_a=a.digest,
            digest_b=b.digest,
            files_unknown=f"no {ENVIRONMENT_FILE} beside {which}'s record: the differing files cannot be named",
        )
    added = sorted(files_b.keys() - files_a.keys())
    removed = sorted(files_a.keys() - files_b.keys())
    changed = sorted(path for path in files_a.keys() & files_b.keys() if files_a[path] != files_b[path])
    return EnvironmentDiff(
        same=False,
        digest_a=a.digest,
        digest_b=b.digest,
        added=added[:MAX_NAMED],
        removed=removed[:MAX_NAMED],
        changed=changed[:MAX_NAMED],
        counts={"added": len(added), "removed": len(removed), "changed": len(changed)},
    )
