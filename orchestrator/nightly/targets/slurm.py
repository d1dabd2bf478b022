"""A Slurm partition as a nightly target: each cell is one `sbatch` job running `orch rebuild` on its node.

orch submits, follows and collects; Slurm places and limits. The job's folder lives under the spec's
`shared_dir` (every node sees it): the job script, Slurm's own output, the rebuild's outputs and the file
with `orch rebuild`'s exit code. When the job has ended, the outputs are copied (regular files only) into
the cell's folder in the night's history, and the job folder is removed.

Following: `squeue -t all` while Slurm still holds the job (finished jobs stay listed for MinJobAge),
then `sacct` (a site with slurmdbd). Outcomes: the rebuild's exit code when the job ran it to an end;
CANCELLED (scancel) → cancelled; TIMEOUT → timeout; NODE_FAIL / OUT_OF_MEMORY / BOOT_FAIL / PREEMPTED →
environment; a job still pending after `pending_timeout_s` is cancelled → pending-timeout; a job running
past the cell's own timeout (plus a minute of grace for Slurm's own limit) is cancelled → timeout.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from orchestrator.engine.labels import TAG_NAMESPACE_VAR
from orchestrator.nightly.cell import CellOutcome, CellRequest, CellStatus
from orchestrator.nightly.target_specs import SlurmTargetSpec
from orchestrator.nightly.targets.outcome import (
    LOGS,
    STDERR,
    STDOUT,
    CellTimer,
    first_error,
    rebuild_command,
    status_for_exit_code,
)
from orchestrator.nightly.targets.slurm_jobs import (
    EXIT_CODE_FILE,
    SACCT_FORMAT,
    JobState,
    cluster_verdict,
    parse_exit_code_file,
    parse_sacct,
    parse_sbatch_parsable,
    parse_squeue,
    render_job_script,
    sbatch_arguments,
)

ORCH: tuple[str, ...] = (sys.executable, "-m", "orchestrator")
#: (request, job folder) → the command the job runs; by default `orch rebuild` into `<job folder>/out`.
JobCommand = Callable[[CellRequest, Path], Sequence[str]]

_SCRIPT = "job.sh"
_SLURM_OUTPUT = "slurm-%j.out"
#: Slurm checks time limits about every 30 s and then grants KillWait: beyond this the job is cancelled.
_RUN_GRACE_S = 90.0
#: A job squeue and sacct both no longer know, this many polls in a row, is reported lost.
_UNKNOWN_POLLS = 5
_COMMAND_TIMEOUT_S = 60.0


class SlurmTarget:
    def __init__(
        self,
        spec: SlurmTargetSpec,
        *,
        orch: tuple[str, ...] = ORCH,
        job_command: JobCommand | None = None,
        poll_s: float = 2.0,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.concurrency = spec.concurrency
        self._orch = orch
        self._job_command = job_command
        self._poll_s = poll_s
        #: Extra variables exported by the job script (the test hook's; ORCH_TAG_NAMESPACE is always set).
        self._environment = dict(environment or {})

    # -- the cell -----------------------------------------------------------------------------------

    def run_cell(self, request: CellRequest) -> CellOutcome:
        job_dir = self.spec.shared_dir / f"{request.cell_id}-{uuid.uuid4().hex[:8]}"
        job_logs = job_dir / LOGS
        job_logs.mkdir(parents=True)

        outcome = CellTimer(request.cell_id)

        script = job_dir / _SCRIPT
        script.write_text(self._script(request, job_dir), encoding="utf-8")
        script.chmod(0o755)
        arguments = sbatch_arguments(
            script=script,
            partition=self.spec.partition,
            time_limit_min=self._time_limit_min(request),
            gpus_per_job=self.spec.gpus_per_job,
            job_name=f"orch-{request.cell_id}",
            output=job_logs / _SLURM_OUTPUT,
            extra=self.spec.sbatch_args,
        )
        submitted = _run(arguments, cwd=job_dir)
        job_id = parse_sbatch_parsable(submitted.stdout) if submitted.returncode == 0 else None
        if job_id is None:
            self._collect(job_dir, request.out)
            return outcome("environment", error=f"sbatch refused the job: {_last_line(submitted)}")
        outcome.handle = f"slurm job {job_id}"
        try:
            final, cancelled_by_us = self._follow(job_id, request)
        except BaseException:  # Ctrl-C or the runner stopping: the job does not outlive the night
            _run(["scancel", job_id])
            raise
        exit_code = self._exit_code(job_dir, final)
        self._collect(job_dir, request.out)
        if final is None:
            return outcome("error", error=f"Slurm job {job_id} is no longer known to squeue or sacct")
        verdict = cluster_verdict(final, cancelled_by_us=cancelled_by_us)
        if verdict is not None:
            status, reason = verdict
            return outcome(status, code=exit_code, error=reason)
        if exit_code is None:
            signal = f", exit code {final.exit_code[0]}:{final.exit_code[1]}" if final.exit_code else ""
            last = first_error(request.out, request.out / LOGS / STDERR) or _slurm_output_tail(request.out)
            return outcome(
                "error",
                error=f"Slurm job {job_id} ended {final.state}{signal} before orch rebuild finished"
                + (f": {last}" if last else ""),
            )
        status = status_for_exit_code(exit_code)
        if status == "passed":
            return outcome(status, code=exit_code)
        return outcome(status, code=exit_code, error=first_error(request.out, request.out / LOGS / STDERR))

    def _time_limit_min(self, request: CellRequest) -> int:
        """The job's --time: the spec's limit, shortened to the cell's timeout (rounded up to minutes)."""
        return max(1, min(self.spec.time_limit_min, math.ceil(request.timeout_s / 60)))

    def _script(self, request: CellRequest, job_dir: Path) -> str:
        if self._job_command is not None:
            command = list(self._job_command(request, job_dir))
        else:
            # --gpus only when the plan sets it: by default orch maps the GPUs Slurm allocated to the job.
            gpus = request.gpus if request.gpus is not None else self.spec.gpus
            command = rebuild_command(request, self._orch, out=job_dir / "out", gpus=gpus)
        return render_job_script(
            cell_id=request.cell_id,
            command=command,
            job_dir=job_dir,
            environment={**self._environment, TAG_NAMESPACE_VAR: request.tag_namespace},
            stdout=job_dir / LOGS / STDOUT,
            stderr=job_dir / LOGS / STDERR,
        )

    # -- following the job ----------------------------------------------------------------------------

    def _follow(self, job_id: str, request: CellRequest) -> tuple[JobState | None, CellStatus | None]:
        """Poll until the job ends; cancel it when it pends or runs too long. (final state, why we cancelled)."""
        submitted = time.monotonic()
        running_since: float | None = None
        unknown = 0
        cancelled_by_us: CellStatus | None = None
        while True:
            state = self.job_state(job_id)
            now = time.monotonic()
            if state is None:
                unknown += 1
                if unknown >= _UNKNOWN_POLLS:
                    return None, cancelled_by_us
            elif state.terminal:
                return state, cancelled_by_us
            else:
                unknown = 0
                if state.pending and cancelled_by_us is None and now - submitted > self.spec.pending_timeout_s:
                    cancelled_by_us = "pending-timeout"
                    _run(["scancel", job_id])
                elif not state.pending:
                    running_since = running_since or now
                    if cancelled_by_us is None and now - running_since > request.timeout_s + _RUN_GRACE_S:
                        cancelled_by_us = "timeout"
                        _run(["scancel", job_id])
            time.sleep(self._poll_s)

    def job_state(self, job_id: str) -> JobState | None:
        """What Slurm says of the job now: squeue while it holds the job, else sacct; None when neither knows."""
        queued = _run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%i|%T|%r"])
        if queued.returncode == 0:
            state = parse_squeue(queued.stdout, job_id)
            if state is not None:
                return state
        accounted = _run(["sacct", "--parsable2", "--noheader", "-X", "-j", job_id, "--format", ",".join(SACCT_FORMAT)])
        return parse_sacct(accounted.stdout, job_id) if accounted.returncode == 0 else None

    # -- collecting -----------------------------------------------------------------------------------

    def _exit_code(self, job_dir: Path, final: JobState | None) -> int | None:
        path = job_dir / EXIT_CODE_FILE
        # A shared filesystem may show the node's last write a little later than Slurm reports the end.
        deadline = time.monotonic() + (10.0 if final is not None and final.state in ("COMPLETED", "FAILED") else 0.0)
        while True:
            if path.is_file() and not path.is_symlink():
                return parse_exit_code_file(path.read_text(encoding="utf-8", errors="replace")[:32])
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.5)

    @staticmethod
    def _collect(job_dir: Path, out: Path) -> None:
        """The job's outputs into the cell's folder: regular files only (a link written on a node is not followed)."""
        out.mkdir(parents=True, exist_ok=True)
        sources = [(job_dir / "out", out), (job_dir / LOGS, out / LOGS)]
        for source, dest in sources:
            if not source.is_dir() or source.is_symlink():
                continue
            for path in sorted(source.rglob("*")):
                if path.is_symlink() or not path.is_file():
                    continue
                target = dest / path.relative_to(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
        script = job_dir / _SCRIPT
        if script.is_file():
            (out / LOGS).mkdir(parents=True, exist_ok=True)
            shutil.copy2(script, out / LOGS / "sbatch-job.sh")
        shutil.rmtree(job_dir, ignore_errors=True)


def _run(arguments: Sequence[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A Slurm command; a missing or hanging one answers like a failed one (the caller decides)."""
    try:
        return subprocess.run(
            list(arguments), cwd=cwd, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        return subprocess.CompletedProcess(arguments, 127, "", f"{arguments[0]}: command not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(arguments, 124, "", f"{arguments[0]}: no answer in {_COMMAND_TIMEOUT_S:g}s")


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {done.returncode}"


def _slurm_output_tail(out: Path) -> str | None:
    from orchestrator.nightly.targets.outcome import last_error_line

    for path in sorted((out / LOGS).glob("slurm-*.out")):
        return last_error_line(path)
    return None
