"""`orch init`: a base image, Python and torch build that exist together, from the tables; impossible
combinations are refused with the working ones named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.errors import BadInput
from orchestrator.record.start import choose


def test_cuda_124_gets_its_image_and_the_newest_torch_built_for_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "d"), "--platform", "cuda", "--version", "12.4"])
    assert result.exit_code == 0, result.output
    document = yaml.safe_load((tmp_path / "d" / "dossier.yaml").read_text())
    assert document["system"] == {
        "platform": "cuda",
        "version": "12.4",
        "base_image": {"ref": "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"},
    }
    assert document["python"]["version"] == "3.11"
    assert document["python"]["indexes"] == [{"url": "https://download.pytorch.org/whl/cu124"}]
    assert "torch==2.6.*" in (tmp_path / "d" / "requirements.in").read_text()
    again = CliRunner().invoke(cli, ["init", str(tmp_path / "d"), "--platform", "cpu"])
    assert isinstance(again.exception, BadInput) and "never overwrites" in again.exception.message


def test_pypi_torch_is_chosen_when_it_is_the_cuda_build_asked_for() -> None:
    choices = choose("x", "cuda", "13.0", None, None)
    assert (choices.python, choices.torch_series, choices.torch_index) == ("3.12", "2.14", None)
    cpu = choose("x", "cpu", None, None, "orch/debian-python:bookworm")
    assert cpu.torch_index == "https://download.pytorch.org/whl/cpu" and cpu.python == "3.11"


@pytest.mark.parametrize(
    ("platform", "version", "python", "message"),
    [
        ("cuda", "12.3", None, "defaults exist for cuda 12.4, 12.6, 12.8, 13.0"),
        ("rocm", "6.2.4", "3.12", "Python 3.12 does not fit rocm/dev-ubuntu-22.04:6.2.4, which provides 3.10, 3.11"),
        ("cuda", None, None, "needs --version; orch's table has base images for cuda 12.4, 12.6, 12.8, 13.0"),
        ("cpu", "12.4", None, "--version is for cuda and rocm"),
    ],
)
def test_impossible_combinations_name_working_ones(
    platform: str, version: str | None, python: str | None, message: str
) -> None:
    with pytest.raises(BadInput, match=message.replace(".", r"\.").replace("(", r"\(")):
        choose("x", platform, version, python, None)  # type: ignore[arg-type]
