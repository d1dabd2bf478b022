"""`steps.json`: the steps a command planned and what became of each, in the order they ran.

Written once, by the executor (stages/execute.py), when the command ends (also when it fails). `--dry-run`
prints the same step list from the same plan (plan/program.py), so a test compares the two names for names.

Why a file of its own and not a key of `report.json`: the report contract `orch.report/1` is read by earlier
`orch verify` versions with a strict model (an unknown key is refused), so a hand-over made now must still
carry a report they read. `steps.json` stays in the output folder; the hand-over does not ship it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

STEPS_FORMAT = "orch.steps/1"
STEPS_FILE = "steps.json"

#: done: the step's work ran; reused: its result was already there (an image of the same identity and context,
#: an inventory of the same image id); skipped: a condition of the plan left it out (the reason says which);
#: failed: it ran and failed (the command's first error is in its document, build.json or report.json).
StepStatus = Literal["done", "reused", "skipped", "failed"]


class ExecutedStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    status: StepStatus
    seconds: float
    note: str | None = None


class StepsDocument(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["orch.steps/1"] = "orch.steps/1"
    command: str
    planned: list[str]
    executed: list[ExecutedStep]
