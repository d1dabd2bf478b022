"""`manifest.json` of a hand-over folder (format `orch.handover/1`): what was shipped, and every file's hash.

Written by `orch handover`, read back by `orch verify` on another machine, where it is untrusted input
checked against SHA256SUMS before anything is believed. Fields are only ever added within a format version.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.model.platform import Platform

HANDOVER_FORMAT = "orch.handover/1"


class ManifestFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    sha256: str
    size: int


class RemoteItem(BaseModel):
    """A data or weights item handed over by reference: where it comes from and what it must hash to. `orch
    verify` fetches it into its own cache (with the credential in `access`, by name) and checks it before any
    image is loaded; `included`: the folder carries a copy (`orch handover --include-remote`) at that path."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["data", "weights"]
    name: str
    uri: str
    sha256: str
    size: int
    access: str | None = None
    endpoint: str | None = None
    included: str | None = None


class Manifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: str = HANDOVER_FORMAT
    orch_version: str
    created: str
    dossier_name: str
    dossier_file: str  # inside dossier/
    identity: str
    variant: str | None
    platform: Platform
    image_id: str
    image_tag: str
    report_verdict: Literal["passed", "failed"]
    files: list[ManifestFile]
    #: The image's environment digest (model/environment.py); its file list is build/environment.json.
    #: Added within orch.handover/1: None in hand-overs made before it, and when the build recorded none.
    environment_digest: str | None = None
    #: `registry/repository@sha256:…` when the image was also pushed (`orch handover --push`): `orch verify`
    #: can pull it by that digest instead of loading image.tar.gz, which such a hand-over may then omit.
    #: Absent from older manifests, which verify as before.
    repository_digest: str | None = None
    #: The dossier's remote items (a `uri`), handed over by reference; absent when it has none.
    remote: list[RemoteItem] | None = None
