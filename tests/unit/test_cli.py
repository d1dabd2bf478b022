from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator import __version__
from orchestrator.cli.main import cli, main
from orchestrator.dossier.schema import dossier_json_schema
from orchestrator.errors import from_os_error
from tests.paths import EXAMPLES, REPO

COMMANDS = ["validate", "render", "schema", "base"]


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0
    assert "Usage: cli " + command in result.output or f"Usage: orch {command}" in result.output


def test_help_lists_exit_codes() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert "2 bad input" in result.output and "3 the" in result.output


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["validate"])
    assert exited.value.code == 2
    assert "Missing argument" in capsys.readouterr().err


def test_render_without_out_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["render", str(EXAMPLES / "tiny-embeddings" / "dossier.yaml")])
    assert exited.value.code == 2
    assert "needs --out" in capsys.readouterr().err


def test_validate_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["validate", "--json", str(EXAMPLES / "tiny-embeddings" / "dossier-cuda.yaml"), "--variant", "cpu"])
    assert exited.value.code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["platform"] == "cpu" and summary["variant"] == "cpu" and summary["torch"] == "2.13.0+cpu"


def test_dockerfile_only_prints_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["render", "--dockerfile-only", str(EXAMPLES / "tiny-embeddings" / "dossier-rocm.yaml")])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("# Rendered by orch") and "FROM rocm/dev-ubuntu-22.04:6.2 AS builder" in out


def test_schema_is_committed_and_current(tmp_path: Path) -> None:
    target = tmp_path / "schema.json"
    with pytest.raises(SystemExit) as exited:
        main(["schema", "--out", str(target)])
    assert exited.value.code == 0
    written = json.loads(target.read_text())
    assert written == dossier_json_schema()
    committed = REPO / "docs" / "dossier-schema.json"
    assert json.loads(committed.read_text()) == written, "run `orch schema --out docs/dossier-schema.json`"
    assert written["additionalProperties"] is False
    assert {"dossier", "name", "code", "python", "system", "expect"} <= set(written["required"])


def test_markdown_reference_is_committed_and_current(tmp_path: Path) -> None:
    target = tmp_path / "dossier.md"
    with pytest.raises(SystemExit):
        main(["schema", "--format", "markdown", "--out", str(target)])
    committed = REPO / "docs" / "dossier.md"
    assert committed.read_text() == target.read_text(), "run `orch schema --format markdown --out docs/dossier.md`"
    text = target.read_text()
    for section in ("## Dossier", "## PythonSpec", "## SystemSpec", "## OutputSpec", "## CosineComparison"):
        assert section in text


@pytest.mark.parametrize(
    ("number", "code", "words"),
    [
        (errno.ENOSPC, "disk-full", "no space left"),
        (errno.EDQUOT, "disk-full", "no space left"),
        (errno.EACCES, "environment", "Permission denied"),
    ],
)
def test_os_errors_translate_by_errno(number: int, code: str, words: str) -> None:
    error = from_os_error(OSError(number, os.strerror(number), "/data/out/report.json"))
    assert error.exit_code == 3 and error.code == code
    assert words in error.message and "/data/out/report.json" in error.message


def test_a_full_disk_names_the_folder_written_to_not_the_copy_s_source(tmp_path: Path) -> None:
    """Issue 25, point 7: CPython's sendfile copy raises ENOSPC with the source as `filename` and the destination
    as `filename2`; the folder that was full is the destination's (the --out folder, not orch's wheel cache)."""
    out = tmp_path / "out" / "context" / "wheels"
    out.mkdir(parents=True)
    error = from_os_error(
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/root/.cache/orch/wheels/torch.whl", None, str(out / "t.whl"))
    )
    assert error.code == "disk-full"
    assert error.message == f"no space left on the device: {out} is full (writing {out / 't.whl'})"
    assert ".cache" not in error.message
