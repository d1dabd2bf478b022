"""Where a remote data or weights item comes from: its `uri`, parsed and checked to name one fixed content.

Four schemes, each fetched by a maintained client (orchestrator/remote/):

- `https://host/path` — one file (requests);
- `s3://bucket/key` — one object of AWS S3 or an S3-compatible store (`endpoint` on the item; boto3);
  `s3://bucket/prefix/` (a trailing slash) is a folder: every object under the prefix;
- `hf://<owner>/<repo>@<commit>/<path>` — a file of a Hugging Face repository at a commit
  (`hf://datasets/<owner>/<repo>@…` for a dataset; huggingface_hub);
- `oci://<registry>/<repository>@sha256:<hex>` — an OCI artifact by its manifest digest (oras-py): one
  layer is a file, several are a folder named by their `org.opencontainers.image.title` annotations.

Pinning. The item's sha256 pins the *content* whatever the source; the uri must also pin the *name* where the
source can move one: a Hugging Face revision that is a branch or tag (`main`, `v1.0`) and an OCI tag can point
at other bytes tomorrow while the dossier still says the same thing, so both are refused here, at validate,
with the way to find what to pin. An https URL or an S3 key cannot be pinned by name; its sha256 is checked
on every fetch and every use.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

Scheme = Literal["https", "s3", "hf", "oci"]
SCHEMES: tuple[Scheme, ...] = ("https", "s3", "hf", "oci")

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
#: An OCI repository path (the distribution spec's grammar, lower case components separated by / . _ -).
_REPOSITORY = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_HF_REPO = re.compile(r"^(?:(datasets|spaces)/)?([A-Za-z0-9][\w.-]*/[\w.-]+|[\w.-]+)$")
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class Source:
    """A parsed `uri`: the scheme and what each client needs. `folder`: the item is a tree of files."""

    scheme: Scheme
    uri: str
    #: https: the URL; s3: the bucket; hf: the repository id; oci: the registry host[:port].
    location: str
    #: https: ""; s3: the key (or prefix); hf: the path in the repository; oci: the repository.
    path: str = ""
    #: hf: the commit; oci: the manifest digest; otherwise "".
    pin: str = ""
    #: hf: "model", "dataset" or "space".
    repo_type: str = ""
    folder: bool = False

    @property
    def loopback(self) -> bool:
        """An OCI registry on this machine's loopback (localhost, 127.0.0.0/8, ::1): reached over plain HTTP."""
        if self.scheme != "oci":
            return False
        host = self.location.rsplit(":", 1)[0] if not self.location.endswith("]") else self.location
        host = host.strip("[]")
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return host == "localhost"


class SourceError(ValueError):
    """A uri orch cannot fetch or that does not pin its content; the message says what to write instead."""


def parse_source(uri: str) -> Source:
    """The source a `uri` names; SourceError for an unknown scheme, a malformed one, or an unpinned name."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise SourceError(f"{uri!r} is not a URI: write scheme://… ({', '.join(s + '://' for s in SCHEMES)})")
    if scheme == "https":
        return _https(uri)
    if scheme == "s3":
        return _s3(uri, rest)
    if scheme == "hf":
        return _hf(uri, rest)
    if scheme == "oci":
        return _oci(uri, rest)
    if scheme == "http":
        raise SourceError(
            f"{uri!r}: plain http is not fetched (anyone on the path could change the bytes before the "
            "fingerprint check and read the credential); serve it over https"
        )
    raise SourceError(
        f"{uri!r}: orch fetches {', '.join(s + '://' for s in SCHEMES)}; fetch this one yourself and give it "
        "as a local 'path'"
    )


def _https(uri: str) -> Source:
    parts = urlsplit(uri)
    if not parts.hostname or not parts.path.strip("/"):
        raise SourceError(f"{uri!r}: an https source names a host and a file (https://host/path/file)")
    return Source("https", uri, uri)


def _s3(uri: str, rest: str) -> Source:
    bucket, _, key = rest.partition("/")
    if not _S3_BUCKET.match(bucket):
        raise SourceError(f"{uri!r}: {bucket!r} is not an S3 bucket name (3-63 of a-z 0-9 . -)")
    if not key:
        raise SourceError(f"{uri!r}: name the object (s3://bucket/key) or a folder (s3://bucket/prefix/)")
    return Source("s3", uri, bucket, key, folder=key.endswith("/"))


def _hf(uri: str, rest: str) -> Source:
    repo, at, after = rest.partition("@")
    if not at:
        # No revision at all: the repository is the first two components (three for datasets/ and spaces/).
        parts = rest.split("/")
        repo = "/".join(parts[: 3 if parts[0] in ("datasets", "spaces") else 2])
    match = _HF_REPO.match(repo)
    if not match:
        raise SourceError(f"{uri!r}: write hf://<owner>/<repo>@<commit>/<path> (hf://datasets/… for a dataset)")
    if not at:
        raise SourceError(
            f"{uri!r} names no revision: write hf://{repo}@<commit>/<path> with the full 40-hex commit "
            f"(https://huggingface.co/api/{_hf_api_kind(match.group(1))}/{match.group(2)}/revision/main "
            "gives the commit of main as 'sha')"
        )
    revision, _, path = after.partition("/")
    if not _COMMIT.match(revision):
        raise SourceError(
            f"{uri!r}: revision {revision!r} is a branch or tag, which can move to other files; pin the commit it "
            f"points at (the 40-hex 'sha' of https://huggingface.co/api/{_hf_api_kind(match.group(1))}/"
            f"{match.group(2)}/revision/{revision})"
        )
    if not path:
        raise SourceError(f"{uri!r}: name the file (…@<commit>/<path>) or a folder (…@<commit>/<folder>/)")
    kind = {"datasets": "dataset", "spaces": "space"}.get(match.group(1) or "", "model")
    return Source("hf", uri, match.group(2), path.rstrip("/"), revision, kind, folder=path.endswith("/"))


def _hf_api_kind(prefix: str | None) -> str:
    return prefix or "models"


def _oci(uri: str, rest: str) -> Source:
    name, at, digest = rest.partition("@")
    host, slash, repository = name.partition("/")
    if not slash or not host or not repository:
        raise SourceError(f"{uri!r}: write oci://<registry>/<repository>@sha256:<digest>")
    if ":" in repository.rsplit("/", 1)[-1]:
        tag = repository.rsplit(":", 1)[1]
        raise SourceError(
            f"{uri!r}: the tag {tag!r} can move to another artifact; reference it by digest "
            f"(oci://{host}/{repository.rsplit(':', 1)[0]}@sha256:…, the digest `oras manifest fetch --descriptor` "
            "or `crane digest` prints for the tag)"
        )
    if not at:
        raise SourceError(f"{uri!r} has no digest: write oci://{host}/{repository}@sha256:<digest of the manifest>")
    if not _DIGEST.match(digest):
        raise SourceError(f"{uri!r}: {digest!r} is not a sha256 digest (sha256: and 64 lower-case hex)")
    if not _REPOSITORY.match(repository):
        raise SourceError(f"{uri!r}: {repository!r} is not an OCI repository name (lower case, / . _ -)")
    return Source("oci", uri, host, repository, digest)


def cached_object(cache_root: Path, sha256: str) -> Path:
    """Where a remote item sits in the host's content-addressed cache once fetched (orchestrator/remote/cache.py):
    known from its declared sha256 alone, so a plan can mount it before the fetch step has run."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError(f"not a sha256: {sha256!r}")
    return cache_root / "objects" / sha256
