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
