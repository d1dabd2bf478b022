"""`report.json`, the contract (format `orch.report/1`): four stages, each with its own verdict.

A stage that could not meaningfully run is `not_run`, and `reason` cites the stage that stopped it.
A failed stage carries `first_error`: the step and the first error seen. Fields are only ever added
within a format version.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.model.checks import Check
from orchestrator.model.platform import Platform

REPORT_FORMAT = "orch.report/1"
StageName = Literal["image", "host", "device", "sample"]
STAGES: tuple[StageName, ...] = ("image", "host", "device", "sample")
StageStatus = Literal["passed", "failed", "skipped", "not_run"]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StageError(Frozen):
    step: str
    message: str


class StageResult(Frozen):
    name: StageName
    status: StageStatus
    reason: str | None = Field(default=None, description="Why the stage was skipped or not run.")
    facts: dict[str, Any] = Field(default_factory=dict)
    checks: list[Check] = Field(default_factory=list)
    duration_s: float = 0.0
    first_error: StageError | None = None
    warnings: list[str] = Field(
        default_factory=list,
        description="What a reader must know although no check failed (e.g. no reference inventory to compare).",
    )


class ReportDossier(Frozen):
    name: str
    path: str
    identity: str
    variant: str | None
    platform: Platform
    backend_version: str | None


class ReportImage(Frozen):
    ref: str
    id: str


class Report(Frozen):
    format: Literal["orch.report/1"] = "orch.report/1"
    orch_version: str
    created: str  # RFC 3339, UTC
    dossier: ReportDossier
    image: ReportImage | None
    verdict: Literal["passed", "failed"]
    stages: dict[StageName, StageResult]
    notes: list[str] = Field(default_factory=list)

    def stage(self, name: StageName) -> StageResult:
        return self.stages[name]


def overall_verdict(stages: dict[StageName, StageResult]) -> Literal["passed", "failed"]:
    """Passed only when no stage failed and none was left not run; `skipped` is a deliberate choice."""
    return "passed" if all(stage.status in ("passed", "skipped") for stage in stages.values()) else "failed"
