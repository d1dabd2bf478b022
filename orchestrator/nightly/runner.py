"""One night, one bounded run: expand the cells, dispatch them, record, compare, summarise.

Dispatch: a thread pool per target (its `concurrency` workers), all targets at once, so endpoints work in
parallel with each other and each within its own limit. A target's `run_cell` never raises for a
cell's own failure; anything that escapes it is recorded as the cell's `error` outcome, never lost.

Interrupt-safety (docs/nightly.md, "History"): the night's folder is claimed before the first cell,
`night.json` is rewritten atomically at every cell's start and end, each finished cell also gets its
`outcome.json`; Ctrl-C or a crash leaves the night `incomplete` (a killed runner's `running` night reads
as incomplete too), and `--resume` runs only its unfinished cells (never started, still running when the
runner died, or `cancelled` by the interrupt), in the same folder, each from a clean cell folder. The summary is
written last, and only then is the night `complete` and `latest` pointed at it.

Exit codes (`night_exit_code`): 0 every cell passed; 1 a cell failed on its own (a verdict, a timeout,
a dossier orch refused, a crash); 3 only the environment failed (an unreachable endpoint, a cancelled or
never-started job): nothing says the recipes broke; 130 the night was interrupted (incomplete).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.engine import Connection, Engine, connect
from orchestrator.errors import (
    EXIT_ENVIRONMENT,
    EXIT_INTERRUPTED,
    EXIT_SUCCESS,
    EXIT_VERDICT_FAILED,
    BadInput,
    OrchError,
)
from orchestrator.nightly import history
from orchestrator.nightly.cell import CellOutcome, CellRequest, CellStatus, Target
from orchestrator.nightly.history import CellState, NightState, PublishState
from orchestrator.nightly.plan import LoadedPlan, PlannedCell, expand_cells
from orchestrator.nightly.summary import build_summary, write_summary
from orchestrator.nightly.target_specs import DockerTargetSpec, PodmanTargetSpec
from orchestrator.nightly.targets.podman_endpoint import podman_publish_endpoint
from orchestrator.text import one_line
from orchestrator.timestamps import rfc3339

#: Statuses that say only that the environment around the cell failed, not the recipe.
ENVIRONMENT_STATUSES: frozenset[CellStatus] = frozenset({"environment", "cancelled", "pending-timeout"})

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class NightResult:
    night_dir: Path
    state: NightState
    exit_code: int
    removed_nights: list[str] = field(default_factory=list)


def night_exit_code(state: NightState) -> int:
    if state.status != "complete":
        return EXIT_INTERRUPTED
    statuses = [cell.outcome.status for cell in state.cells if cell.outcome is not None]
    if all(status == "passed" for status in statuses):
        return EXIT_SUCCESS
    if all(status == "passed" or status in ENVIRONMENT_STATUSES for status in statuses):
        return EXIT_ENVIRONMENT
    return EXIT_VERDICT_FAILED


class _Recorder:
    """The night's state, rewritten atomically on every change; one lock because pool threads report."""

    def __init__(self, night_dir: Path, state: NightState) -> None:
        self.night_dir = night_dir
        self.state = state
        self._lock = threading.Lock()
        history.write_state(night_dir, state)

    def update(self, **changes: object) -> None:
        with self._lock:
            self.state = self.state.model_copy(update=changes)
            history.write_state(self.night_dir, self.state)

    def cell(self, cell_id: str, **changes: object) -> None:
        with self._lock:
            cells = tuple(
                cell.model_copy(update=changes) if cell.cell_id == cell_id else cell for cell in self.state.cells
            )
            self.state = self.state.model_copy(update={"cells": cells})
            history.write_state(self.night_dir, self.state)


def _cell_state(planned: PlannedCell) -> CellState:
    request = planned.request
    return CellState(
        cell_id=request.cell_id,
        dossier=str(request.dossier),
        dossier_name=planned.dossier_name,
        variant=request.variant,
        target=planned.target,
        reference_run=str(planned.reference_run) if planned.reference_run else None,
        state="pending",
    )


def _run_one(target: Target, request: CellRequest, recorder: _Recorder, on_event: Callable[[str], None]) -> None:
    recorder.cell(request.cell_id, state="running")
    on_event(f"start {request.cell_id}")
    request.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        outcome = target.run_cell(request)
    except Exception as exc:  # a target's bug must not lose the night: the cell is an `error`
        outcome = CellOutcome(
            cell_id=request.cell_id,
            status="error",
            first_error=one_line(f"{type(exc).__name__}: {exc}", 300),
            duration_s=round(time.monotonic() - started, 3),
        )
    history.write_outcome(request.out, outcome)
    recorder.cell(request.cell_id, state="done", outcome=outcome)
    on_event(f"{outcome.status} {request.cell_id}")


def _dispatch(
    cells: list[PlannedCell],
    targets: Mapping[str, Target],
    recorder: _Recorder,
    on_event: Callable[[str], None],
) -> None:
    pools = {
        name: concurrent.futures.ThreadPoolExecutor(max_workers=target.concurrency, thread_name_prefix=f"cell-{name}")
        for name, target in targets.items()
        if any(cell.target == name for cell in cells)
    }
    futures: list[concurrent.futures.Future[None]] = []
    try:
        for cell in cells:
            futures.append(pools[cell.target].submit(_run_one, targets[cell.target], cell.request, recorder, on_event))
        pending = set(futures)
        while pending:
            # A timeout, so the main thread wakes up to take Ctrl-C.
            _, pending = concurrent.futures.wait(pending, timeout=0.5)
    finally:
        # On Ctrl-C: cells not started are dropped; cells running get the same SIGINT (same process group)
        # and are waited for, so their outcomes (`cancelled`) are recorded before the night is closed.
        for pool in pools.values():
            pool.shutdown(wait=True, cancel_futures=True)


def _previous_cell(plan_history: Path, night_dir: Path, cell_id: str) -> tuple[str, Path, CellStatus] | None:
    for night in history.previous_nights(plan_history, night_dir):
        try:
            state = history.read_state(night)
        except OrchError:
            continue
        found = state.cell(cell_id)
        if found is not None and found.outcome is not None:
            return night.name, night / cell_id, found.outcome.status
    return None


class _TargetEngines:
    """The engine of the target that built each cell's image, for publishing: one connection per target.

    A Docker target's image lives on that endpoint's daemon (its `docker_host` with its TLS files, or its
    context); a Slurm cell's on the node's daemon, which for a single-node partition is this machine's
    (DOCKER_HOST or the default socket). Cell ids end in `@<target>` (nightly/plan.py).
    """

    def __init__(self, plan: LoadedPlan) -> None:
        self._specs = {spec.name: spec for spec in plan.model.targets}
        self._open: dict[str, Connection] = {}

    def __call__(self, cell_id: str) -> Engine:
        name = cell_id.rsplit("@", 1)[-1]
        if name not in self._open:
            spec = self._specs.get(name)
            if isinstance(spec, DockerTargetSpec) and (spec.docker_host or spec.context):
                tls = spec.tls
                files = (str(tls.ca_cert), str(tls.client_cert), str(tls.client_key)) if tls is not None else None
                self._open[name] = connect(spec.docker_host, files, spec.context)
            elif isinstance(spec, PodmanTargetSpec):
                self._open[name] = connect(podman_publish_endpoint(spec))
            else:
                self._open[name] = connect()
        return self._open[name].engine

    def close(self) -> None:
        for connection in self._open.values():
            connection.close()
        self._open.clear()


def _publish(
    plan: LoadedPlan,
    night_dir: Path,
    state: NightState,
    engine_for: Callable[[str], Engine] | None = None,
) -> PublishState:
    """The hook to the registry: passing cells only; a publishing failure never fails the night.

    nightly/publish.py pushes each passing cell's image by digest (through `engine_for(cell_id)`, the
    engine of the target that built it) and returns a typed record (`<night>/publish.json`); it never
    raises for a push, so `failed` here comes from the record, not from an exception.
    """
    from orchestrator.nightly.publish import publish_passed

    passed = [cell.outcome for cell in state.cells if cell.outcome is not None and cell.outcome.status == "passed"]
    if not passed or plan.model.publish is None:
        return PublishState(status="skipped", detail="no cell passed")
    engines = _TargetEngines(plan) if engine_for is None else None
    try:
        record = publish_passed(plan.model.publish, night_dir, passed, engine_for=engine_for or engines)
    except OrchError as exc:
        return PublishState(status="failed", detail=one_line(exc.message, 300))
    finally:
        if engines is not None:
            engines.close()
    return PublishState(status=record.status, detail=one_line(str(record), 300))


def run_night(
    plan: LoadedPlan,
    targets: Mapping[str, Target],
    *,
    resume: bool = False,
    clock: Clock = _utc_now,
    on_event: Callable[[str], None] = lambda _: None,
) -> NightResult:
    """Run (or resume) one night of `plan` on `targets` (by the plan's target names)."""
    missing = [spec.name for spec in plan.model.targets if spec.name not in targets]
    if missing:
        raise BadInput(f"{plan.file}: no target built for {', '.join(missing)}")
    root = plan.history
    night_dir = history.night_to_resume(root) if resume else history.create_night_dir(root, clock().date().isoformat())
    with history.night_lock(night_dir):
        cells = expand_cells(plan, night_dir)
        if resume:
            previous = history.read_state(night_dir)
            # A cell the interrupt cancelled did not finish its work: it runs again, like one never started.
            done = {
                c.cell_id: c
                for c in previous.cells
                if c.state == "done" and c.outcome is not None and c.outcome.status != "cancelled"
            }
            states = tuple(done.get(cell.request.cell_id) or _cell_state(cell) for cell in cells)
            for cell in cells:
                if cell.request.cell_id not in done:
                    history.clear_unfinished(cell.request.out, night_dir)
            state = previous.model_copy(update={"cells": states, "status": "running", "reason": None, "finished": None})
            to_run = [cell for cell in cells if cell.request.cell_id not in done]
        else:
            state = NightState(
                night=night_dir.name,
                date=clock().date().isoformat(),
                plan=str(plan.file),
                started=rfc3339(clock()),
                status="running",
                cells=tuple(_cell_state(cell) for cell in cells),
            )
            to_run = cells
        recorder = _Recorder(night_dir, state)
        on_event(f"night {night_dir} ({len(to_run)} of {len(cells)} cells to run)")
        try:
            _dispatch(to_run, targets, recorder, on_event)
            pending = [cell.cell_id for cell in recorder.state.cells if cell.state != "done"]
            if pending:  # a pool dropped them: only on an interrupt, which re-raises above; kept as a guard
                raise RuntimeError(f"{len(pending)} cells never ran")
            recorder.update(finished=rfc3339(clock()))
            summary = build_summary(
                night_dir,
                recorder.state,
                previous=lambda cell_id: _previous_cell(root, night_dir, cell_id),
                trend_nights=plan.model.trend_nights,
                nights=history.previous_nights(root, night_dir),
            )
            if plan.model.publish is not None:
                recorder.update(publish=_publish(plan, night_dir, recorder.state))
                summary = summary.model_copy(update={"publish": recorder.state.publish})
            write_summary(night_dir, summary)
            recorder.update(status="complete")
        except KeyboardInterrupt:
            recorder.update(status="incomplete", reason="interrupted (Ctrl-C)", finished=rfc3339(clock()))
            raise
        except BaseException as exc:
            recorder.update(
                status="incomplete", reason=one_line(f"{type(exc).__name__}: {exc}", 300), finished=rfc3339(clock())
            )
            raise
    history.point_latest(root, night_dir)
    protected = {
        Path(cell.reference_run).parent if Path(cell.reference_run).is_file() else Path(cell.reference_run)
        for cell in recorder.state.cells
        if cell.reference_run
    }
    protected |= {parent for path in protected for parent in path.parents}
    removed = history.apply_retention(root, plan.model.retention_nights, night_dir, protected)
    return NightResult(night_dir, recorder.state, night_exit_code(recorder.state), removed)


def describe_cells(plan: LoadedPlan) -> list[str]:
    """`--dry-run`: one line per cell, where it would go, nothing started."""
    placeholder = plan.history / history.NIGHTS / "<date>"
    lines = []
    by_name = {spec.name: spec for spec in plan.model.targets}
    for cell in expand_cells(plan, placeholder):
        spec = by_name[cell.target]
        if spec.kind == "slurm":
            where = f"slurm partition {spec.partition}"
        elif spec.kind == "podman":
            where = "podman " + (spec.podman_host or "this user's socket")
        else:
            where = f"docker {spec.docker_host or (f'context {spec.context}' if spec.context else 'default engine')}"
        request = cell.request
        lines.append(
            f"{request.cell_id}: {request.dossier}"
            + (f" --variant {request.variant}" if request.variant else "")
            + f" on {cell.target} ({where}), cache {request.cache}, timeout {request.timeout_s} s"
            + (f", --gpus {request.gpus}" if request.gpus else "")
            + f" → {os.fspath(request.out)}"
        )
    return lines
