"""The wheels image: a BuildKit build's locked wheels in an image of their own, which the install step mounts.

Why. BuildKit reads a bind mount's `source` from the context only after fetching the whole context (orch's
context server serves it as one tar) and checksumming the mounted folder for the step's cache key: for
minilm that was 400 MB served, fetched, unpacked and hashed on every build, a code-only rebuild included
(9.0 s against the classic builder's 5.9 s, docs/benchmarks.md). An image `FROM scratch` that holds only
`/wheels`, made once per wheel set and mounted `from=` it, keys the install step by that image instead, and
the context the engine fetches leaves `wheels/` out: a code change sends the code.

The tag is decided here from what selects the wheels (the lock's sha256, uv's wheel, the Python version, the
platform); the wheels themselves are known after the render step collected them, so the image also carries
`WHEELS_DIGEST_LABEL`, the digest of their names and sha256, and the `wheels` step builds the image again
when that label differs from the wheels just collected (stages/wheels_image.py).

Trust. The tag is a name on a shared engine: anybody who may tag images there can put another image under it,
label included. Nothing in it is trusted: uv installs with `--require-hashes` against the lock the context
carries, and install-venv.sh checks uv's own wheel against the sha256 the Dockerfile names before it runs it,
so an image with other wheels fails the install step; it cannot change the environment.

`orch render` never uses it: its context stays self-contained (wheels/ in the context), as a person's
`docker build` needs. Pure: no engine, no file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from orchestrator.model.platform import LABEL_PREFIX

#: Where the image holds the wheels (the install step mounts this folder at /tmp/orch/wheels).
WHEELS_PATH = "/wheels"
#: The digest of the wheels the image holds: sha256 of their sorted `sha256  file` lines.
WHEELS_DIGEST_LABEL = f"{LABEL_PREFIX}.wheels.digest"
ROLE_LABEL = f"{LABEL_PREFIX}.role"
ROLE = "wheels"
#: The whole Dockerfile of the wheels image: its context is the Dockerfile and the rendered wheels/ folder.
DOCKERFILE = f"FROM scratch\nCOPY wheels {WHEELS_PATH}\n"

#: Why a build has none (step `wheels` is skipped): only BuildKit's wheelhouse install mounts the wheels.
WHY_NONE = "no wheels image: only a BuildKit build with a wheelhouse and uv mounts one"


@dataclass(frozen=True)
class WheelsImageSpec:
    """The wheels image of one build: its tag, and the labels it is built with (besides the digest label)."""

    tag: str
    labels: tuple[tuple[str, str], ...]


def wheels_image_spec(
    namespace: str,
    *,
    lock_sha256: str,
    uv_wheel: str,
    uv_sha256: str,
    python_version: str,
    platform: str,
    stage_labels: Mapping[str, str],
) -> WheelsImageSpec:
    """`<namespace>/wheels:<key>`: the key covers what selects the wheels, so two dossiers with one lock (and
    a dossier's variants) share one image, and a lock change gets its own."""
    selection = f"lock {lock_sha256}\nuv {uv_wheel} {uv_sha256}\npython {python_version}\nplatform {platform}\n"
    key = hashlib.sha256(selection.encode()).hexdigest()[:24]
    labels = {**stage_labels, ROLE_LABEL: ROLE}
    return WheelsImageSpec(tag=f"{namespace}/wheels:{key}", labels=tuple(sorted(labels.items())))


def wheels_digest(wheels: Iterable[tuple[str, str]]) -> str:
    """sha256 of `sha256  file` lines, sorted by file: (file, sha256) pairs of the collected wheels."""
    lines = "".join(f"{sha256}  {name}\n" for name, sha256 in sorted(wheels))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()
