"""What a finished `orch rebuild` says, read the same way by every target: its exit code and first error.

The rebuild ran elsewhere (another daemon's host, a Slurm node) and wrote into the cell's folder; its
report.json and its stderr are read size-bounded, and a damaged report is not an error of the target:
the cell then falls back to stderr's last error line.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from pydantic import ValidationError

from orchestrator.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_INTERRUPTED, EXIT_SUCCESS, EXIT_VERDICT_FAILED
from orchestrator.model.checks import first_failure, mismatch
from orchestrator.model.report import Report, first_failed_stage
from orchestrator.nightly.cell import CellOutcome, CellRequest, CellStatus
from orchestrator.text import one_line, strip_ansi

#: Where a target leaves the rebuild's own console output, inside the cell's folder.
LOGS = "logs"
STDOUT = "rebuild.stdout"
STDERR = "rebuild.stderr"

_REPORT_MAX_BYTES = 16 * 2**20
_TAIL_BYTES = 64 * 2**10
_MAX_LINE = 300
# orch's own one-line errors (`error[dossier-invalid]: …`), Python's last traceback line, a shell's complaint.
_ERROR_LINE = re.compile(r"^(error(\[[^\]]*\])?:|[A-Za-z_.]*(Error|Exception)\b|.*: (command )?not found)", re.I)

_BY_EXIT_CODE: dict[int, CellStatus] = {
    EXIT_SUCCESS: "passed",
    EXIT_VERDICT_FAILED: "failed",
    EXIT_BAD_INPUT: "bad-input",
    EXIT_ENVIRONMENT: "environment",
    EXIT_INTERRUPTED: "cancelled",
}


def status_for_exit_code(code: int) -> CellStatus:
    """`orch rebuild`'s exit code as a cell status; a negative code is the signal that killed it (Popen)."""
    if code in _BY_EXIT_CODE:
        return _BY_EXIT_CODE[code]
    if code in (-2, -15, 128 + 15):  # SIGINT / SIGTERM from outside: someone stopped it
        return "cancelled"
    return "error"


def rebuild_command(
    request: CellRequest, orch: tuple[str, ...], *, out: Path | None = None, gpus: str | None = None
) -> list[str]:
    """The `orch rebuild` a cell runs: the same on every target, only where it runs differs."""
    command = [*orch, "rebuild", str(request.dossier), "--out", str(out or request.out)]
    if request.variant is not None:
        command += ["--variant", request.variant]
    if request.cache == "cold":
        command.append("--no-cache")
    if gpus is not None:
        command += ["--gpus", gpus]
    return command


def _one_line(text: str) -> str:
    return one_line(strip_ansi(text), _MAX_LINE)


def report_first_error(out: Path) -> str | None:
    """The first failed stage's first error in `out/report.json` (`sample: run: …`), or None."""
    path = out / "report.json"
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > _REPORT_MAX_BYTES:
            return None
        report = Report.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None
    stage = first_failed_stage(report)
    if stage is None or stage.status != "failed":
        return None
    if stage.first_error is not None:
        return _one_line(f"{stage.name}: {stage.first_error.step}: {stage.first_error.message}")
    failed = first_failure(stage.checks)
    if failed is not None:
        return _one_line(f"{stage.name}: {failed.name}: {mismatch(failed)}")
    return _one_line(f"{stage.name}: failed")


def last_error_line(path: Path) -> str | None:
    """The last line of a log that reads like an error (else its last non-empty line), or None."""
    try:
        if not path.is_file() or path.is_symlink():
            return None
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - _TAIL_BYTES))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    lines = [strip_ansi(line).strip() for line in tail.splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    if errors:
        return _one_line(errors[-1])
    return _one_line(lines[-1]) if lines else None


def first_error(out: Path, stderr: Path) -> str | None:
    return report_first_error(out) or last_error_line(stderr)


class CellTimer:
    """Makes a cell's outcome with its duration since the timer started, and the target's handle on it
    (set once the process or job exists): one place for both targets' `CellOutcome`s."""

    def __init__(self, cell_id: str) -> None:
        self.cell_id = cell_id
        self.started = time.monotonic()
        #: `pid N` (a Docker endpoint's subprocess) or `slurm job N`, once there is one.
        self.handle: str | None = None

    def __call__(self, status: CellStatus, *, code: int | None = None, error: str | None = None) -> CellOutcome:
        return CellOutcome(
            cell_id=self.cell_id,
            status=status,
            exit_code=code,
            first_error=error,
            duration_s=round(time.monotonic() - self.started, 3),
            handle=self.handle,
        )
