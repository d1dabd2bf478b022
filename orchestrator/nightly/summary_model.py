"""The models of a night's summary (`summary.json`): what `summary` builds and `summary_render` renders.

A module of their own so that the builder imports the renderer and the renderer imports only the models:
no import cycle between the two.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.nightly.cell import CellStatus
from orchestrator.nightly.drift import CellDrift, CellFacts
from orchestrator.nightly.history import PublishState

SUMMARY_FORMAT = "orch.nightly-summary/1"
FILES = {"json": "summary.json", "markdown": "summary.md", "html": "summary.html", "junit": "junit.xml"}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TrendPoint(_Frozen):
    night: str
    status: CellStatus | None
    build_s: float | None
    criteria: dict[str, float | None]


class CellSummary(_Frozen):
    cell_id: str
    dossier: str
    variant: str | None
    target: str
    status: CellStatus
    #: The matrix colour: the first stage that failed (image/host/device/sample), else the outcome's status.
    first_failing: str | None
    first_error: str | None
    duration_s: float
    exit_code: int | None
    handle: str | None
    facts: CellFacts
    drift: CellDrift
    #: Oldest first, this night last.
    trend: tuple[TrendPoint, ...]


class NightSummary(_Frozen):
    format: Literal["orch.nightly-summary/1"] = "orch.nightly-summary/1"
    night: str
    date: str
    plan: str
    started: str
    finished: str | None
    counts: dict[str, int]
    rows: tuple[str, ...]  # dossier (and variant) names, plan order
    targets: tuple[str, ...]
    cells: tuple[CellSummary, ...]
    publish: PublishState | None = None

    @property
    def passed(self) -> bool:
        return all(cell.status == "passed" for cell in self.cells)

    def cell(self, row: str, target: str) -> CellSummary | None:
        return next((cell for cell in self.cells if cell.cell_id == f"{row}@{target}"), None)
