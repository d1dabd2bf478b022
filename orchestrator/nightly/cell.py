"""The contract between the nightly runner and its targets: what a cell asks, what it answers.

A *cell* is one dossier (or one of its variants) rebuilt on one target. The runner (plan, history,
summary) hands a `CellRequest` to a `Target`; the target runs `orch rebuild` for it wherever it runs
(a Docker endpoint's own daemon, a Slurm job on the allocated node), leaves the rebuild's outputs in
`request.out` (build.json, report.json, report.html/md, logs) and answers a `CellOutcome`. The runner
never looks inside a target and a target never writes outside `request.out`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

#: How a cell ended. `passed`/`failed` are orch's own verdict (exit 0 / exit 1 of `orch rebuild`);
#: the others are named outcomes of the environment around it, never confused with a verdict:
#: `environment` (exit 3, or the endpoint/daemon unreachable), `bad-input` (exit 2), `timeout` (the
#: cell's timeout or the Slurm time limit), `cancelled` (scancel, Ctrl-C), `pending-timeout` (a Slurm job
#: that never started within the plan's limit), `error` (anything else: a crash, an unknown exit code).
CellStatus = Literal["passed", "failed", "environment", "bad-input", "timeout", "cancelled", "pending-timeout", "error"]

#: `cold`: `--no-cache` (the nightly default: the point is to learn that the recipe still rebuilds);
#: `warm`: the engine's cache is used.
CachePolicy = Literal["cold", "warm"]


class CellRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: `<dossier-name>[.<variant>]@<target>`: unique within a night, safe as a folder name.
    cell_id: str
    dossier: Path
    variant: str | None = None
    #: The cell's own folder in the night's history; the rebuild writes its outputs here.
    out: Path
    cache: CachePolicy = "cold"
    #: Seconds before the cell is stopped and reported `timeout`.
    timeout_s: int = Field(gt=0)
    #: `--gpus` for the rebuild (`all`, `none`, `0,1`, `count:2`); None: orch's default.
    gpus: str | None = None
    #: The image tag namespace on the target (ORCH_TAG_NAMESPACE), so nightly images never take a user's tag.
    tag_namespace: str = "orch-nightly"


class CellOutcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cell_id: str
    status: CellStatus
    #: `orch rebuild`'s exit code, when it ran to an end.
    exit_code: int | None = None
    #: One line: the first error of the failed stage, or why the environment stopped the cell.
    first_error: str | None = None
    duration_s: float
    #: The target's own handle on the cell (a Slurm job id, a process id) for the morning's reader.
    handle: str | None = None


class Target(Protocol):
    """Where cells run. Implementations: nightly/targets/docker_endpoint.py, nightly/targets/slurm.py."""

    #: The plan's name for this target (`gpu-a`, `slurm-batch`).
    name: str
    #: How many of its cells may run at once.
    concurrency: int

    def run_cell(self, request: CellRequest) -> CellOutcome:
        """Run one cell to its end (or its timeout); never raise for a cell's own failure."""
        ...
