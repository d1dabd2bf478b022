"""The result of `orch compare A B` (format `orch.compare/1`): a frozen value, printed by `--json`.

Fields are only ever added within a format version. What each verdict means, and how the rows are
made, is `orchestrator.compare`'s docstring; this module is only the shape.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator import __version__
from orchestrator.model.environment import EnvironmentDiff
from orchestrator.model.inventory import InventoryDiff
from orchestrator.model.report import StageName, StageStatus

COMPARE_FORMAT = "orch.compare/1"

Verdict = Literal["same", "within_tolerance", "intended", "improved", "host", "changed", "regression"]
Overall = Literal["identical", "equivalent", "regressed"]
#: The row verdicts that make B `regressed`.
UNINTENDED: tuple[Verdict, ...] = ("changed", "regression")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class VariantInfo(Frozen):
    """A side's variant, as its dossier declares it (or as the report recorded it)."""

    name: str
    declared: bool
    description: str | None = Field(default=None, description="None when the dossier could not be read.")
    overrides: list[str] | None = Field(
        default=None, description="Sections the variant replaces (system, python, compare); None when unknown."
    )
    source: str = Field(description="Where the declaration was looked up, or why it could not be.")


class SideInfo(Frozen):
    files: list[str]
    dossier: str
    dossier_path: str
    identity: str
    variant: VariantInfo | None
    platform: str | None
    image: str | None
    report_verdict: Literal["passed", "failed"] | None
    build_status: Literal["passed", "failed"] | None


class Difference(Frozen):
    field: str
    a: str
    b: str
    verdict: Verdict
    note: str | None = None


class StageComparison(Frozen):
    stage: StageName
    a: StageStatus | None
    b: StageStatus | None
    verdict: Verdict
    note: str | None = Field(default=None, description="B's first error or reason when B did not pass.")


class NumberComparison(Frozen):
    stage: Literal["device", "sample"]
    name: str
    a_observed: str | None
    b_observed: str | None
    expected: str = Field(description="B's expectation (its tolerance); A's when B has no such check.")
    a_passed: bool | None
    b_passed: bool | None
    verdict: Verdict
    note: str | None = None


class Comparison(Frozen):
    format: Literal["orch.compare/1"] = "orch.compare/1"
    orch_version: str = __version__
    a: SideInfo
    b: SideInfo
    intent: str | None = Field(
        description="The declared variant that explains intended differences: 'variant NAME: description'."
    )
    dossier: list[Difference]
    packages: InventoryDiff | None
    packages_verdict: Verdict | None
    packages_note: str | None = None
    system: list[Difference]
    #: The environment digests (every installed file's sha256): same, or the files that differ. Added in orch
    #: 0.1 within `orch.compare/1`; None when a side records no digest (see not_compared).
    environment: EnvironmentDiff | None = None
    environment_verdict: Verdict | None = None
    environment_note: str | None = None
    stages: list[StageComparison]
    numbers: list[NumberComparison]
    not_compared: list[str]
    notes: list[str]
    unintended: list[str] = Field(description="Every regression, then every unintended change, one line each.")
    verdict: Overall
