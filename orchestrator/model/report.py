"""`report.json`, the contract (format `orch.report/1`): four stages, each with its own verdict.

A stage that could not meaningfully run is `not_run`, and `reason` cites the stage that stopped it.
A failed stage carries `first_error`: the step and the first error seen. Fields are only ever added
within a format version.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestrator.model.checks import Check
from orchestrator.model.facts import FACTS_BY_STAGE, ImageStageFacts, StageFacts
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
    # The validator below always sets facts of the stage's own type; the default only tells type checkers
    # that `facts` may be left out (a stage that recorded none).
    facts: StageFacts = Field(
        default_factory=ImageStageFacts, description="What the stage saw; its type follows `name` (model/facts.py)."
    )
    checks: list[Check] = Field(default_factory=list)
    duration_s: float = 0.0
    first_error: StageError | None = None
    warnings: list[str] = Field(
        default_factory=list,
        description="What a reader must know although no check failed (e.g. no reference inventory to compare).",
    )

    @model_validator(mode="before")
    @classmethod
    def _facts_of_the_stage(cls, data: Any) -> Any:
        """The stage's name picks its facts model; a stage with no facts gets an empty one."""
        if isinstance(data, dict) and data.get("name") in FACTS_BY_STAGE:
            model = FACTS_BY_STAGE[data["name"]]
            facts = data.get("facts")
            if facts is None:
                data = {**data, "facts": model()}
            elif not isinstance(facts, model):
                data = {**data, "facts": model.model_validate(facts)}
        return data


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


def first_failed_stage(report: Report) -> StageResult | None:
    """The stage a reader of a failed report looks at first: the first `failed` one in stage order, else the
    first `not_run` one; None when no stage failed or was left not run (`skipped` is a deliberate choice)."""
    ordered = [report.stages[name] for name in STAGES if name in report.stages]
    for status in ("failed", "not_run"):
        found = next((stage for stage in ordered if stage.status == status), None)
        if found is not None:
            return found
    return None
