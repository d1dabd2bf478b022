"""`orch doctor --from DIR [DOSSIER]`: diagnose a captured host anywhere, without a daemon."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from orchestrator.cli.main import cli
from tests.paths import EXAMPLES

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def test_doctor_from_a_captured_r610_host_reads_its_driver_and_cuda() -> None:
    result = CliRunner().invoke(cli, ["doctor", "--from", str(CORPUS / "smi-r610-b200"), "--json"])
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)["host"]["nvidia"]
    assert (facts["driver_version"], facts["cuda_driver_version"]) == ("610.43.02", "13.3")


def test_doctor_from_a_capture_judges_a_dossier_and_refuses_what_the_host_cannot_run() -> None:
    dossier = EXAMPLES / "tiny-embeddings" / "dossier-cuda.yaml"
    result = CliRunner().invoke(cli, ["doctor", "--from", str(CORPUS / "smi-classic-440-gt1030"), str(dossier)])
    assert result.exit_code == 1
    assert "unsupported" in result.output and "440.95.01" in result.output


def test_doctor_from_a_capture_explains_its_logs_with_the_catalogue() -> None:
    result = CliRunner().invoke(cli, ["doctor", "--from", str(CORPUS / "toolkit-cuda128-tabbyapi")])
    assert result.exit_code == 0, result.output
    assert "NVIDIA_REQUIRE_CUDA asks for a newer CUDA" in " ".join(result.output.split())


def test_doctor_from_a_folder_that_is_not_a_capture_is_bad_input(tmp_path: Path) -> None:
    from orchestrator.errors import BadInput

    result = CliRunner().invoke(cli, ["doctor", "--from", str(tmp_path)])
    assert isinstance(result.exception, BadInput) and result.exception.exit_code == 2
    assert "orch doctor --capture" in str(result.exception)


def _capture_with_commands(folder: Path, commands: list[tuple[list[str], int, str]]) -> Path:
    entries = []
    for number, (argv, returncode, stdout) in enumerate(commands):
        stored = f"commands/{number:02d}-{argv[0]}.txt"
        (folder / "commands").mkdir(parents=True, exist_ok=True)
        (folder / stored).write_text(stdout, encoding="utf-8")
        entries.append({"argv": argv, "returncode": returncode, "stdout": stored})
    manifest = {"format": "orch-host-capture/1", "commands": entries, "files": [], "devices": [], "env": {}, "logs": []}
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def test_doctor_from_explains_a_captured_commands_own_failure_and_names_an_unknown_one(tmp_path: Path) -> None:
    # nvidia-smi's words from https://github.com/ci-for-research/self-hosted-runners/issues/40; the rocm-smi
    # failure is one no catalogue entry knows.
    no_driver = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    folder = _capture_with_commands(
        tmp_path / "capture",
        [
            (["nvidia-smi"], 9, no_driver),
            (["rocm-smi", "--showdriverversion"], 2, "ERROR: the flux capacitor is cold\n"),
        ],
    )
    result = CliRunner().invoke(cli, ["doctor", "--from", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    found = {entry["seen_in"]: entry for entry in json.loads(result.output)["explanations"]}
    assert found["command nvidia-smi"]["id"] == "nvidia-smi-no-driver"
    unknown = found["command rocm-smi --showdriverversion"]
    assert unknown["id"] == "unknown" and unknown["layer"] == "host"
    assert "flux capacitor is cold" in unknown["message"] and "orch doctor --capture" in unknown["next_step"]
