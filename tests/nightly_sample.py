"""Nightly test material (importable as `tests.nightly_sample`): plans on disk and a fake target.

`FakeTarget` answers each cell from a script (cell id → what to do): write a recorded tiny-embeddings
run (`tests.compare_sample.Run`) as `orch rebuild` would, then answer its outcome, or raise, or block.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.nightly.cell import CellOutcome, CellRequest, CellStatus
from tests.compare_sample import Run, write_run
from tests.paths import EXAMPLES

TINY = EXAMPLES / "tiny-embeddings"


def write_plan(folder: Path, body: str, *, name: str = "plan.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / name
    file.write_text(body, encoding="utf-8")
    return file


def two_target_plan(folder: Path, *, extra: str = "", concurrency: int = 2) -> Path:
    """tiny-embeddings (and its CUDA dossier's `cpu` variant) on two docker targets."""
    return write_plan(
        folder,
        f"""nightly: 1
dossiers:
  - path: {TINY / "dossier.yaml"}
  - path: {TINY / "dossier-cuda.yaml"}
    reference: false
    variants: [cpu]
targets:
  - name: gpu-a
    kind: docker
    docker_host: unix:///var/run/docker.sock
    concurrency: {concurrency}
  - name: gpu-b
    kind: docker
    docker_host: tcp://127.0.0.1:23760
history: history
{extra}""",
    )


@dataclass
class Script:
    """What the fake target does for one cell."""

    status: CellStatus = "passed"
    run: Run | None = field(default_factory=Run)
    first_error: str | None = None
    raises: BaseException | None = None
    before: Callable[[], None] | None = None


@dataclass
class Together:
    """Cells running at once across several fake targets."""

    now: int = 0
    most: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


@dataclass
class FakeTarget:
    name: str
    concurrency: int = 1
    scripts: dict[str, Script] = field(default_factory=dict)
    default: Script = field(default_factory=Script)
    calls: list[str] = field(default_factory=list)
    running_now: int = 0
    most_at_once: int = 0
    delay_s: float = 0.0
    together: Together | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run_cell(self, request: CellRequest) -> CellOutcome:
        with self._lock:
            self.calls.append(request.cell_id)
            self.running_now += 1
            self.most_at_once = max(self.most_at_once, self.running_now)
        if self.together is not None:
            self.together.enter()
        try:
            script = self.scripts.get(request.cell_id, self.default)
            if script.before is not None:
                script.before()
            if self.delay_s:
                time.sleep(self.delay_s)
            if script.raises is not None:
                raise script.raises
            if script.run is not None:
                write_run(script.run, request.out)
            (request.out / "rebuild.log").write_text(f"fake rebuild of {request.cell_id}\n", encoding="utf-8")
            return CellOutcome(
                cell_id=request.cell_id,
                status=script.status,
                exit_code={"passed": 0, "failed": 1, "environment": 3}.get(script.status),
                first_error=script.first_error,
                duration_s=0.01,
                handle=f"fake-{self.name}",
            )
        finally:
            if self.together is not None:
                self.together.leave()
            with self._lock:
                self.running_now -= 1
