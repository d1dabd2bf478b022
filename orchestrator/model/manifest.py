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
    #: `registry/repository@sha256:…` when the image was also pushed (`orch handover --push`): `orch verify`
    #: can pull it by that digest instead of loading image.tar.gz, which such a hand-over may then omit.
    #: Absent from older manifests, which verify as before.
    repository_digest: str | None = None
