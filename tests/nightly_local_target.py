"""A minimal local nightly target for tests, the demo and the benchmark: `orch rebuild` as a subprocess.

It runs against whatever engine the environment names (the default one), with the cell's tag namespace,
and maps `orch rebuild`'s exit code to the cell's status. The real targets (Docker endpoints, Slurm) are
orchestrator/nightly/targets/; this stand-in exists so the runner can be tested end to end without them
(`ORCH_NIGHTLY_TARGET_FACTORY=tests.nightly_local_target:local_target`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.nightly.cell import CellOutcome, CellRequest, CellStatus

_BY_EXIT: dict[int, CellStatus] = {0: "passed", 1: "failed", 2: "bad-input", 3: "environment", 130: "cancelled"}


def rebuild_command(request: CellRequest) -> list[str]:
    """The `orch rebuild` a cell runs; the benchmark runs the same commands by hand."""
    command = [sys.executable, "-m", "orchestrator", "rebuild", str(request.dossier), "--out", str(request.out)]
    if request.variant:
        command += ["--variant", request.variant]
    if request.cache == "cold":
        command.append("--no-cache")
    if request.gpus:
        command += ["--gpus", request.gpus]
    return command


def _first_error(out: Path, log: Path) -> str | None:
    report = out / "report.json"
    if report.is_file():
        try:
            document: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
        except ValueError:
            document = {}
        for stage in (document.get("stages") or {}).values():
            error = stage.get("first_error") if isinstance(stage, dict) else None
            if error:
                return f"{stage.get('name')}: {error.get('step')}: {error.get('message')}"
    lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else None)


@dataclass
class LocalRebuildTarget:
    name: str
    concurrency: int = 1

    def run_cell(self, request: CellRequest) -> CellOutcome:
        started = time.monotonic()
        request.out.mkdir(parents=True, exist_ok=True)
        log = request.out / "rebuild.log"
        environment = {**os.environ, "ORCH_TAG_NAMESPACE": request.tag_namespace}
        with log.open("w", encoding="utf-8") as handle:
            process = subprocess.Popen(
                rebuild_command(request), stdout=handle, stderr=subprocess.STDOUT, env=environment
            )
            try:
                code = process.wait(timeout=request.timeout_s)
                status = _BY_EXIT.get(code, "error")
            except subprocess.TimeoutExpired:
                # SIGINT first: orch removes its containers; then it is killed. (Same process group as the
                # runner on purpose: a Ctrl-C at the terminal reaches the rebuild too, which ends `cancelled`.)
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                code, status = None, "timeout"
        return CellOutcome(
            cell_id=request.cell_id,
            status=status,
            exit_code=code,
            first_error=None if status == "passed" else _first_error(request.out, log),
            duration_s=round(time.monotonic() - started, 3),
            handle=f"pid {process.pid}",
        )


def local_target(spec: Any) -> LocalRebuildTarget:
    """The stand-in factory: every target of the plan is this machine's default engine."""
    return LocalRebuildTarget(name=spec.name, concurrency=spec.concurrency)
