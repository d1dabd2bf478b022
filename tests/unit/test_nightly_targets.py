"""The nightly targets without running anything: exit codes, first errors, a Docker endpoint's environment,
the Slurm job's script and limits, and the factory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.engine import RemoveContainers
from orchestrator.errors import BadInput
from orchestrator.nightly.cell import CellRequest
from orchestrator.nightly.target_specs import DockerTargetSpec, PodmanTargetSpec, SlurmTargetSpec, TlsFiles
from orchestrator.nightly.targets import target_from_spec
from orchestrator.nightly.targets.docker_endpoint import CELL_LABEL, DockerTarget
from orchestrator.nightly.targets.endpoint_tool import EXPECT_PODMAN_VAR
from orchestrator.nightly.targets.outcome import (
    last_error_line,
    rebuild_command,
    report_first_error,
    status_for_exit_code,
)
from orchestrator.nightly.targets.podman_endpoint import PodmanTarget, podman_publish_endpoint, ssh_forward_command
from orchestrator.nightly.targets.slurm import SlurmTarget
from tests.paths import REPO


def _request(tmp_path: Path, **changes: object) -> CellRequest:
    fields: dict[str, object] = {
        "cell_id": "tiny-embeddings@gpu-a",
        "dossier": Path("/plans/tiny/dossier.yaml"),
        "out": tmp_path / "cell",
        "timeout_s": 600,
        "tag_namespace": "orch-nightly",
    }
    fields.update(changes)
    return CellRequest.model_validate(fields)


@pytest.mark.parametrize(
    ("code", "status"),
    [(0, "passed"), (1, "failed"), (2, "bad-input"), (3, "environment"), (130, "cancelled"), (-15, "cancelled")],
)
def test_exit_codes_are_cell_statuses(code: int, status: str) -> None:
    assert status_for_exit_code(code) == status


def test_an_unknown_exit_code_is_an_error_not_a_verdict() -> None:
    assert status_for_exit_code(139) == "error"
    assert status_for_exit_code(-9) == "error"


def test_rebuild_command_cold_variant_gpus(tmp_path: Path) -> None:
    request = _request(tmp_path, variant="cu124", cache="cold")
    assert rebuild_command(request, ("orch",), gpus="count:2") == [
        "orch", "rebuild", "/plans/tiny/dossier.yaml", "--out", str(tmp_path / "cell"),
        "--variant", "cu124", "--no-cache", "--gpus", "count:2",
    ]  # fmt: skip
    warm = rebuild_command(_request(tmp_path, cache="warm"), ("orch",))
    assert "--no-cache" not in warm and "--gpus" not in warm and "--variant" not in warm


def test_first_error_of_a_failed_report(tmp_path: Path) -> None:
    """A real report (the minilm replay fixture) whose sample stage failed: the stage, step and message, one line."""
    data = json.loads((REPO / "tests" / "fixtures" / "reports" / "minilm-replay-report.json").read_text("utf-8"))
    assert report_first_error(REPO / "tests" / "fixtures" / "reports") is None  # it passed
    data["verdict"] = "failed"
    data["stages"]["sample"]["status"] = "failed"
    data["stages"]["sample"]["first_error"] = {"step": "run", "message": "exited 1:\nValueError: boom"}
    (tmp_path / "report.json").write_text(json.dumps(data), encoding="utf-8")
    assert report_first_error(tmp_path) == "sample: run: exited 1: ValueError: boom"


def test_first_error_of_a_damaged_report_is_none(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text("{not json", encoding="utf-8")
    assert report_first_error(tmp_path) is None
    assert report_first_error(tmp_path / "missing") is None


def test_last_error_line_of_stderr(tmp_path: Path) -> None:
    log = tmp_path / "rebuild.stderr"
    log.write_text(
        "  Step 6/16 : RUN pip install\n"
        "error[engine-unreachable]: no Docker engine answers at tcp://127.0.0.1:23760: connection refused\n"
        "  hint: Start one (as root: `make engine`, or `dockerd &`)\n",
        encoding="utf-8",
    )
    assert last_error_line(log) == (
        "error[engine-unreachable]: no Docker engine answers at tcp://127.0.0.1:23760: connection refused"
    )
    plain = tmp_path / "plain"
    plain.write_text("one\n\x1b[31mlast words\x1b[0m\n\n", encoding="utf-8")
    assert last_error_line(plain) == "last words"
    assert last_error_line(tmp_path / "none") is None


# -- a Docker endpoint ----------------------------------------------------------------------------------


def test_docker_spec_takes_at_most_one_endpoint_and_none_is_this_machines_engine() -> None:
    with pytest.raises(BadInput, match="one of docker_host and context, not both"):
        DockerTarget(DockerTargetSpec(name="gpu-a", docker_host="ssh://a", context="a"))
    local = DockerTarget(DockerTargetSpec(name="here"), environ={"DOCKER_HOST": "unix:///run/d.sock", "PATH": "/bin"})
    request = CellRequest(cell_id="x@here", dossier=Path("d.yaml"), out=Path("/tmp/x"), timeout_s=60)
    with local._environment(request, None) as env:
        assert env["DOCKER_HOST"] == "unix:///run/d.sock", "the night's own engine is kept"


def test_endpoint_environment_with_tls_links_the_files_and_drops_the_callers_endpoint(tmp_path: Path) -> None:
    files = {}
    for name in ("my-ca.crt", "client.crt", "client.key"):
        files[name] = tmp_path / name
        files[name].write_text(name, encoding="utf-8")
    spec = DockerTargetSpec(
        name="gpu-b",
        docker_host="tcp://gpu-b:2376",
        tls=TlsFiles(ca_cert=files["my-ca.crt"], client_cert=files["client.crt"], client_key=files["client.key"]),
    )
    caller = {"DOCKER_CONTEXT": "laptop", "DOCKER_CERT_PATH": "/elsewhere", "ORCH_LABELS": "io.orch.night=n1", "X": "1"}
    target = DockerTarget(spec, environ=caller)
    with target._environment(_request(tmp_path), f"{CELL_LABEL}=tok") as env:
        assert env["DOCKER_HOST"] == "tcp://gpu-b:2376" and env["DOCKER_TLS_VERIFY"] == "1"
        assert "DOCKER_CONTEXT" not in env and env["X"] == "1"
        cert_path = Path(env["DOCKER_CERT_PATH"])
        assert (cert_path / "ca.pem").read_text(encoding="utf-8") == "my-ca.crt"
        assert (cert_path / "key.pem").read_text(encoding="utf-8") == "client.key"
        assert env["ORCH_LABELS"] == "io.orch.night=n1,io.orch.cell=tok"
        assert env["ORCH_TAG_NAMESPACE"] == "orch-nightly"
    assert not cert_path.exists(), "the folder of links to the key is removed after the cell"


def test_endpoint_environment_by_context(tmp_path: Path) -> None:
    target = DockerTarget(DockerTargetSpec(name="gpu-c", context="gpu-c"), environ={"DOCKER_HOST": "unix:///x"})
    with target._environment(_request(tmp_path), None) as env:
        assert env["DOCKER_CONTEXT"] == "gpu-c" and "DOCKER_HOST" not in env and "ORCH_LABELS" not in env


# -- a Podman endpoint ----------------------------------------------------------------------------------


def test_a_podman_target_names_its_socket_and_asks_the_ping_for_podman(tmp_path: Path) -> None:
    caller = {"DOCKER_HOST": "unix:///var/run/docker.sock", "DOCKER_CONTEXT": "x", "XDG_RUNTIME_DIR": "/run/user/7"}
    default = PodmanTarget(PodmanTargetSpec(name="pod"), environ=caller)
    with default._environment(_request(tmp_path), None) as env:
        assert env["DOCKER_HOST"] == "unix:///run/user/7/podman/podman.sock", "this user's own socket"
        assert "DOCKER_CONTEXT" not in env and env[EXPECT_PODMAN_VAR] == "1"
    named = PodmanTarget(PodmanTargetSpec(name="pod", podman_host="unix:///srv/p.sock"), environ=caller)
    with named._environment(_request(tmp_path), f"{CELL_LABEL}=tok") as env:
        assert env["DOCKER_HOST"] == "unix:///srv/p.sock" and env["ORCH_LABELS"] == "io.orch.cell=tok"
    assert isinstance(target_from_spec(PodmanTargetSpec(name="pod")), PodmanTarget)


def test_a_remote_podman_socket_is_forwarded_by_ssh_in_batch_mode(tmp_path: Path) -> None:
    command = ssh_forward_command("ssh://ops@gpu-a:2222/run/user/1000/podman/podman.sock", tmp_path / "p.sock")
    assert command[:2] == ["ssh", "-N"] and "BatchMode=yes" in command and "ExitOnForwardFailure=yes" in command
    assert command[command.index("-L") + 1] == f"{tmp_path / 'p.sock'}:/run/user/1000/podman/podman.sock"
    assert command[command.index("-p") + 1] == "2222" and command[-2:] == ["--", "ops@gpu-a"]


def test_a_night_publishes_only_from_a_local_podman_socket() -> None:
    spec = PodmanTargetSpec(name="pod", podman_host="ssh://ops@gpu-a/run/user/1000/podman/podman.sock")
    with pytest.raises(BadInput, match="Podman target on this machine"):
        podman_publish_endpoint(spec)
    assert podman_publish_endpoint(PodmanTargetSpec(name="pod"), {"XDG_RUNTIME_DIR": "/run/user/9"}) == (
        "unix:///run/user/9/podman/podman.sock"
    )


# -- Slurm ----------------------------------------------------------------------------------------------


def test_slurm_script_runs_orch_rebuild_without_gpus_unless_the_spec_says(tmp_path: Path) -> None:
    spec = SlurmTargetSpec(name="batch", partition="gpu", gpus_per_job=1, shared_dir=tmp_path / "shared")
    target = SlurmTarget(spec, orch=("orch",))
    script = target._script(_request(tmp_path, cache="cold"), tmp_path / "shared" / "job")
    assert "orch rebuild /plans/tiny/dossier.yaml --out " + str(tmp_path / "shared" / "job" / "out") in script
    assert "--no-cache" in script and "--gpus" not in script
    pinned = SlurmTarget(spec.model_copy(update={"gpus": "all"}), orch=("orch",))
    assert "--gpus all" in pinned._script(_request(tmp_path), tmp_path / "j")


def test_slurm_time_limit_is_the_specs_shortened_to_the_cells_timeout(tmp_path: Path) -> None:
    target = SlurmTarget(SlurmTargetSpec(name="b", partition="p", time_limit_min=60, shared_dir=tmp_path))
    assert target._time_limit_min(_request(tmp_path, timeout_s=600)) == 10
    assert target._time_limit_min(_request(tmp_path, timeout_s=7200)) == 60
    assert target._time_limit_min(_request(tmp_path, timeout_s=5)) == 1


def test_factory_builds_the_target_of_each_kind(tmp_path: Path) -> None:
    docker_target = target_from_spec(DockerTargetSpec(name="gpu-a", docker_host="ssh://ci@gpu-a", concurrency=2))
    slurm_target = target_from_spec(SlurmTargetSpec(name="batch", partition="gpu", shared_dir=tmp_path))
    assert isinstance(docker_target, DockerTarget) and docker_target.concurrency == 2
    assert isinstance(slurm_target, SlurmTarget) and slurm_target.name == "batch"


def test_endpoint_tool_usage_is_bad_input_before_any_connection(capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.nightly.targets.endpoint_tool import main

    assert main([]) == 2
    assert main(["sweep"]) == 2
    assert main(["ping", "extra"]) == 2
    assert "usage: endpoint_tool" in capsys.readouterr().err


def test_sweep_repeats_until_passes_in_a_row_find_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancelled build's step container can appear after empty passes (seen on Docker 20.10 under load)."""
    from orchestrator.nightly.targets import endpoint_tool

    class Passes:
        def __init__(self) -> None:
            self.answers = [[], [], ["c1"], ["c1", "c2"], *([[]] * endpoint_tool._QUIET_PASSES)]
            self.calls = 0

        def remove(self, target: RemoveContainers) -> list[str]:
            assert target == RemoveContainers("io.orch.cell=x")
            self.calls += 1
            return self.answers.pop(0)

    monkeypatch.setattr(endpoint_tool.time, "sleep", lambda seconds: None)
    engine = Passes()
    assert endpoint_tool._sweep(engine, "io.orch.cell=x") == ["c1", "c2"]  # type: ignore[arg-type]
    assert engine.calls == 4 + endpoint_tool._QUIET_PASSES and not engine.answers
