"""The Slurm target's text: the sbatch script and arguments it writes, and the parsers of what Slurm answers.

The parsers run on outputs captured from a real cluster (this machine's scripts/slurm.sh, Slurm 22.05) and
from public bug reports (tests/fixtures/slurm/README.md names each source).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from orchestrator.nightly.targets.slurm_jobs import (
    JobState,
    cluster_verdict,
    parse_exit_code_file,
    parse_sacct,
    parse_sbatch_parsable,
    parse_squeue,
    render_job_script,
    sbatch_arguments,
)
from tests.paths import REPO

FIXTURES = REPO / "tests" / "fixtures" / "slurm"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# -- squeue (this machine's cluster) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("job_id", "state", "reason", "terminal", "pending"),
    [
        ("1", "COMPLETED", None, True, False),
        ("2", "FAILED", "NonZeroExitCode", True, False),
        ("3", "CANCELLED", "Resources", True, False),
        ("4", "TIMEOUT", "TimeLimit", True, False),
        ("5", "RUNNING", None, False, False),
        ("7", "PENDING", "Resources", False, True),
    ],
)
def test_squeue_all_states(job_id: str, state: str, reason: str | None, terminal: bool, pending: bool) -> None:
    parsed = parse_squeue(_fixture("squeue-all-states.txt"), job_id)
    assert parsed == JobState(job_id=job_id, state=state, reason=reason)
    assert (parsed.terminal, parsed.pending) == (terminal, pending)


def test_squeue_a_running_job_then_cancelled() -> None:
    assert parse_squeue(_fixture("squeue-cancelled-running.txt"), "5") == JobState("5", "CANCELLED")


def test_squeue_does_not_confuse_job_ids_or_read_its_error() -> None:
    assert parse_squeue(_fixture("squeue-all-states.txt"), "71") is None
    assert parse_squeue(_fixture("squeue-unknown-job.stderr"), "999") is None
    assert parse_squeue("", "1") is None


# -- sacct (public captures; this cluster has no slurmdbd) -------------------------------------------


def test_sacct_cancelled_by_a_user_has_spaces_in_its_state() -> None:
    parsed = parse_sacct(_fixture("sacct-vcell-cancelled-by-user.txt"), "2699001")
    assert parsed is not None and parsed.state == "CANCELLED"
    assert cluster_verdict(parsed) == ("cancelled", "Slurm job 2699001 was cancelled (scancel)")


@pytest.mark.parametrize(
    ("job_id", "status"),
    [("2699101", "timeout"), ("2699102", "environment"), ("2699103", "environment"), ("2699104", None)],
)
def test_sacct_terminal_states_map_to_cell_outcomes(job_id: str, status: str | None) -> None:
    parsed = parse_sacct(_fixture("sacct-vcell-terminal-states.txt"), job_id)
    assert parsed is not None and parsed.terminal
    verdict = cluster_verdict(parsed)
    # FAILED is the job script's own non-zero exit: orch's exit code decides, not Slurm.
    assert (verdict[0] if verdict else None) == status


def test_sacct_reads_the_job_line_not_its_steps() -> None:
    """The job's own line COMPLETED 0:0, although its step `.0` was CANCELLED 0:10 (cluster_utils#87)."""
    parsed = parse_sacct(_fixture("sacct-cluster-utils-steps.txt"), "239024")
    assert parsed == JobState(job_id="239024", state="COMPLETED", exit_code=(0, 0))


def test_sacct_without_a_header_reads_orchs_own_format() -> None:
    text = "4|TIMEOUT|0:15|00:01:21\n4.batch|CANCELLED|0:15|00:01:22\n"
    assert parse_sacct(text, "4") == JobState("4", "TIMEOUT", exit_code=(0, 15), elapsed="00:01:21")


def test_sacct_with_accounting_disabled_knows_no_job() -> None:
    assert parse_sacct(_fixture("sacct-accounting-disabled.txt"), "1") is None


# -- sbatch ------------------------------------------------------------------------------------------


def test_sbatch_parsable_job_id_with_or_without_cluster() -> None:
    assert parse_sbatch_parsable("1\n") == "1"
    assert parse_sbatch_parsable("sbatch: warning: something\n4242;cluster-a\n") == "4242"
    assert parse_sbatch_parsable(_fixture("sbatch-invalid-partition.stderr")) is None


def test_sbatch_arguments_are_a_list_with_gres_only_when_gpus_are_asked(tmp_path: Path) -> None:
    script = tmp_path / "job dir" / "job.sh"
    arguments = sbatch_arguments(
        script=script,
        partition="gpu",
        time_limit_min=30,
        gpus_per_job=2,
        job_name="orch-tiny@slurm",
        output=tmp_path / "slurm-%j.out",
        extra=("--account=ml", "--qos=night"),
    )
    assert arguments[:2] == ["sbatch", "--parsable"]
    assert "--gres=gpu:2" in arguments and "--partition=gpu" in arguments and "--time=30" in arguments
    assert arguments[-3:] == ["--account=ml", "--qos=night", str(script)]
    cpu = sbatch_arguments(
        script=script, partition="cpu", time_limit_min=1, gpus_per_job=0, job_name="x", output=tmp_path / "o"
    )
    assert not any(argument.startswith("--gres") for argument in cpu)


def test_job_script_quotes_every_value(tmp_path: Path) -> None:
    hostile = "x; rm -rf / #"
    job_dir = tmp_path / "cell $(id)"
    text = render_job_script(
        cell_id="tiny@slurm",
        command=["python", "-m", "orchestrator", "rebuild", f"/d/{hostile}/dossier.yaml", "--variant", hostile],
        job_dir=job_dir,
        environment={"ORCH_TAG_NAMESPACE": "orch-nightly"},
        stdout=job_dir / "logs" / "rebuild.stdout",
        stderr=job_dir / "logs" / "rebuild.stderr",
    )
    assert text.startswith("#!/bin/bash\n")
    run_line = next(line for line in text.splitlines() if line.startswith("python "))
    words = shlex.split(run_line)
    assert words[:7] == ["python", "-m", "orchestrator", "rebuild", f"/d/{hostile}/dossier.yaml", "--variant", hostile]
    assert f"cd {shlex.quote(str(job_dir))} || exit 3" in text
    assert "export ORCH_TAG_NAMESPACE=orch-nightly" in text
    assert 'exit "$code"' in text and "mv exit_code.tmp exit_code" in text


def test_exit_code_file() -> None:
    assert parse_exit_code_file("3\n") == 3
    assert parse_exit_code_file("") is None
    assert parse_exit_code_file("garbage") is None


def test_a_job_orch_cancelled_is_reported_for_why_it_was_cancelled() -> None:
    cancelled = JobState("9", "CANCELLED")
    assert cluster_verdict(cancelled, cancelled_by_us="pending-timeout") == (
        "pending-timeout",
        "Slurm job 9 cancelled by orch (pending-timeout)",
    )
    assert cluster_verdict(JobState("9", "COMPLETED", exit_code=(0, 0))) is None
