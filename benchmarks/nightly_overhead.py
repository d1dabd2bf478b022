"""The orchestration overhead of a night against the same cells' `orch rebuild` commands run by hand.

    .venv/bin/python benchmarks/nightly_overhead.py [--cells 2] [--rounds 2]

One plan: examples/tiny-embeddings on N targets that are all this machine's default engine (the local
stand-in target, one cell at a time per target; warm cache, so the figure is not a torch install). In
one run, alternating: the N `orch rebuild` commands the cells run, by hand, one after the other; then
`orch nightly run`'s runner over the same plan with the targets' concurrency at 1 and the targets
serialised (`--cells` targets share one pool of one), so both sides do the same work in the same order.

Printed: the median wall time of each side and their ratio, and the runner's own time measured
directly (the night's wall time minus the time spent inside the cells: plan, dispatch, recording,
drift, summary), which is the stable figure on a shared machine. Target: <= 5 %. Record the result in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator.nightly.cell import CellOutcome, CellRequest  # noqa: E402
from orchestrator.nightly.plan import expand_cells, load_plan  # noqa: E402
from orchestrator.nightly.runner import run_night  # noqa: E402
from tests.nightly_local_target import LocalRebuildTarget, rebuild_command  # noqa: E402

_ONE_AT_A_TIME = threading.Lock()


class Serial(LocalRebuildTarget):
    """All targets behind one lock: the night runs its cells one after the other, like the hand-run."""

    def run_cell(self, request: CellRequest) -> CellOutcome:
        with _ONE_AT_A_TIME:
            return super().run_cell(request)


def _plan(work: Path, cells: int) -> Path:
    targets = "".join(f"  - {{name: t{i}, kind: docker}}\n" for i in range(cells))
    file = work / "plan.yaml"
    file.write_text(
        f"nightly: 1\ndossiers: [{{path: {REPO / 'examples' / 'tiny-embeddings' / 'dossier.yaml'}}}]\n"
        f"targets:\n{targets}cache: warm\nhistory: history\nretention_nights: 100\n",
        encoding="utf-8",
    )
    return file


def _rebuild(request: CellRequest) -> None:
    done = subprocess.run(rebuild_command(request), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"orch rebuild exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="orch-bench-nightly-"))
    try:
        plan = load_plan(_plan(work, args.cells))
        by_hand, night, inside, own = [], [], [], []
        # Warm-up: the image exists and its layers are cached before anything is timed.
        _rebuild(expand_cells(plan, work / "warm")[0].request)
        for round_ in range(args.rounds):
            requests = [cell.request for cell in expand_cells(plan, work / f"hand-{round_}")]
            started = time.monotonic()
            for request in requests:
                request.out.mkdir(parents=True, exist_ok=True)
                _rebuild(request)
            by_hand.append(time.monotonic() - started)

            targets = {spec.name: Serial(spec.name) for spec in plan.model.targets}
            started = time.monotonic()
            result = run_night(plan, targets, clock=lambda: datetime.now(UTC))
            wall = time.monotonic() - started
            assert result.exit_code == 0, result.state
            cells = sum(cell.outcome.duration_s for cell in result.state.cells if cell.outcome is not None)
            night.append(wall)
            inside.append(cells)
            own.append(wall - cells)
        hand, whole = statistics.median(by_hand), statistics.median(night)
        runner = statistics.median(own)
        print(f"({args.cells} cells of tiny-embeddings, warm cache, {args.rounds} rounds, median)")
        print(f"  orch rebuild by hand, one after the other   {hand:7.2f} s")
        print(f"  orch nightly run (runner), same cells        {whole:7.2f} s   ratio {whole / hand:5.3f}")
        print(f"  of which inside the cells                    {statistics.median(inside):7.2f} s")
        print(
            f"  the runner's own time (plan, dispatch, record, drift, summary) {runner:5.2f} s"
            f" = {100 * runner / hand:4.2f} % of the hand-run, {100 * runner / statistics.median(inside):4.2f} %"
            " of the night's own cells  (target <= 5 %)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
