"""`build.json`: the versioned record of one build — the report's **image** section.

A contract read by `orch probe`, `orch compare`, the hand-over and CI dashboards: fields are only ever
added within a format version. Everything in it has passed through redaction.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.model.checks import Check
from orchestrator.model.inventory import Inventory, InventoryDiff
from orchestrator.model.platform import Installer, InstallMode

BUILD_FORMAT = "orch.build/1"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DossierRef(Frozen):
    name: str
    path: str
    identity: str
    variant: str | None


class ImageRef(Frozen):
    tag: str
    id: str
    labels: dict[str, str]
    size_bytes: int


class BaseImageRef(Frozen):
    ref: str
    id: str
    digest: str | None


class WheelRef(Frozen):
    file: str
    sha256: str


class DebRef(Frozen):
    """One Debian package of the extensions' toolchain, collected on the host (stages/debhouse.py)."""

    file: str
    package: str
    version: str
    sha256: str


class ContextRef(Frozen):
    digest: str = Field(
        description="sha256 of the build context's content: every file's path, mode and sha256, in order "
        "(stages/build_context.context_digest); equal digests, identical contexts."
    )
    install_mode: InstallMode
    installer: Installer | None = Field(
        default=None, description="What installed the lock in the builder: uv or pip (absent in older records)."
    )
    network: str
    builder: Literal["buildkit", "classic"] = Field(
        default="classic",
        description="What built the image: BuildKit (the engine's /build?version=2, the context fetched from "
        "orch's context server) or the classic builder (classic in records older than this field).",
    )
    ca_bundle: bool
    wheels: list[WheelRef]
    wheels_image: str | None = Field(
        default=None,
        description="BuildKit: the image the install step mounted the wheels from, as `tag@id` "
        "(plan/wheels_image.py); absent when the wheels came in the context or from the wheel feed.",
    )
    debs: list[DebRef] = Field(
        default_factory=list,
        description="The toolchain's .deb files the build installed from the context (wheelhouse mode with "
        "compiled extensions): apt's download in the base image, collected on the host; empty otherwise.",
    )


class CodeRef(Frozen):
    kind: str
    source: str
    revision: str | None
    dirty: bool
    dirty_diff_sha256: str | None
    variant: str | None


class BuildFailure(Frozen):
    step: str | None = Field(description="The Dockerfile instruction (or orch stage) that failed.")
    first_error: str


class CacheStats(Frozen):
    steps: int
    cached: int
    rebuilt: list[str] = Field(description="Instructions that ran instead of coming from the layer cache.")


class ImageLayer(Frozen):
    """One layer of the built image as the engine's history tells it, mapped to the step that made it."""

    step: str = Field(
        description="The rendered Dockerfile instruction that made the layer (first line, truncated), or "
        "'base image' for the layers the base brought; build-arg values and credentials are never in it."
    )
    created_by: str = Field(description="The engine's own `created_by` text, redacted and truncated.")
    size_bytes: int = Field(ge=0)


class EngineRef(Frozen):
    """The engine that built the image, as its `/version` and `/info` said."""

    kind: Literal["docker", "podman"]
    version: str
    api_version: str
    rootless: bool


class BuildRecord(Frozen):
    format: Literal["orch.build/1"] = "orch.build/1"
    orch_version: str
    status: Literal["passed", "failed"]
    dossier: DossierRef
    image: ImageRef | None
    base_image: BaseImageRef
    context: ContextRef
    code: CodeRef
    failure: BuildFailure | None
    cache: CacheStats
    durations_s: dict[str, float]
    checks: list[Check]
    inventory: Inventory | None
    inventory_source: str | None = Field(
        default=None, description="'inventory probe', or a previous build.json of the same image id (same content)."
    )
    inventory_diff: InventoryDiff | None
    reused: bool = Field(
        default=False,
        description="True when no engine build ran: the tag already named an image of the same dossier "
        "identity and context digest (`--no-cache` always builds).",
    )
    #: The image's layers, oldest first (the base's, then each step of the final stage); None for a failed build
    #: and for records written before orch recorded them.
    layers: list[ImageLayer] | None = None
    #: The engine that built it; None in records written before orch recorded it.
    engine: EngineRef | None = None
