"""What a running program holds between its steps, in memory: each step's handler reads the results of the
steps before it here, never from a document an earlier step wrote (one writer, no read-back)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import BuildOutcome, Engine, ImageInfo
from orchestrator.model.build_record import BuildFailure, BuildRecord, CodeRef, ImageLayer
from orchestrator.model.checks import Check
from orchestrator.model.host import CompatVerdict, HostFacts
from orchestrator.model.inventory import Inventory, InventoryDiff
from orchestrator.model.manifest import Manifest
from orchestrator.model.report import Report, StageName, StageResult
from orchestrator.model.steps import StepStatus
from orchestrator.stages.alongside import Alongside
from orchestrator.stages.code_source import CodeState
from orchestrator.stages.context import RenderedContext

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def _ignore(_: object) -> None:
    return None


@dataclass(frozen=True)
class Hooks:
    """What the caller is told as the program runs (the CLI draws its progress from them)."""

    #: Each build log line, as it comes.
    on_line: Callable[[str], None] = _ignore
    #: Each build step's title ("base image", "render", "build", "inventory").
    on_build_stage: Callable[[str], None] = _ignore
    #: The build is over (passed or failed) and build.json is written.
    on_built: Callable[[BuildRecord], None] = _ignore
    #: Each probe stage ("image", "host", "device", "sample") and the hand-over's parts.
    on_probe_stage: Callable[[str], None] = _ignore


@dataclass(frozen=True)
class StepOutcome:
    status: StepStatus = "done"
    note: str | None = None


DONE = StepOutcome()


@dataclass
class Run:
    """The state of one program's execution. Filled step by step; the executor owns it."""

    loaded: LoadedDossier
    engine: Engine
    out: Path
    hooks: Hooks = field(default_factory=Hooks)
    clock: Clock = utc_now
    started: float = field(default_factory=time.monotonic)
    durations: dict[str, float] = field(default_factory=dict)

    # -- the build's results
    wheel_cache: Path | None = None
    code_state: CodeState | None = None
    code: CodeRef | None = None
    base: ImageInfo | None = None
    previous: ImageInfo | None = None
    rendered: RenderedContext | None = None
    #: BuildKit's wheels image (step `wheels`), found or built; None when the build mounts no wheels image.
    wheels_image: ImageInfo | None = None
    digest: str | None = None
    outcome: BuildOutcome | None = None
    reused: bool = False
    layers: list[ImageLayer] | None = None
    inventory: Inventory | None = None
    inventory_source: str | None = None
    probe_error: str | None = None
    inventory_diff: InventoryDiff | None = None
    checks: list[Check] = field(default_factory=list)
    failure: BuildFailure | None = None
    record: BuildRecord | None = None

    # -- the probe's results
    #: The image the probe stages look at: the built one, or the one observed before the run.
    image: ImageInfo | None = None
    image_ref: str | None = None
    host: HostFacts | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    stop_after_failure: bool = False
    verdict: CompatVerdict | None = None
    #: The sample stage started with the device stage (DeviceStage.sample_alongside), until step sample takes it.
    alongside: Alongside | None = None
    stages: dict[StageName, StageResult] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    report: Report | None = None
    report_paths: dict[str, Path] = field(default_factory=dict)
    manifest: Manifest | None = None
