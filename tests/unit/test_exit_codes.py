"""One exit-code table (orchestrator/errors.py): `orch --help`, docs/cli.md, the error classes and the
entry point all say the same thing; the first to drift fails here."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli, main
from orchestrator.cli.reference import _import_package, cli_reference_markdown
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_CODES, OrchError
from tests.paths import REPO


def _error_classes() -> list[type[OrchError]]:
    _import_package()  # every module of orchestrator: a class defined anywhere is found
    found: list[type[OrchError]] = []
    pending: list[type[OrchError]] = [OrchError]
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending.extend(kind.__subclasses__())
    return [kind for kind in found if kind.__module__.startswith("orchestrator")]


def test_help_docs_and_error_classes_agree_on_the_exit_code_table() -> None:
    codes = [row.code for row in EXIT_CODES]
    assert len(set(codes)) == len(codes), "a code listed twice"

    help_text = " ".join(CliRunner().invoke(cli, ["--help"], terminal_width=400).output.split())
    for row in EXIT_CODES:
        assert f"{row.code} {row.short}" in help_text, f"orch --help does not list exit {row.code}"

    committed = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    table = committed.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    listed = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert listed == [f"| {row.code} | {row.meaning.replace('|', chr(92) + '|')} |" for row in EXIT_CODES]
    assert committed == cli_reference_markdown(), "docs/cli.md is stale"

    classes = _error_classes()
    assert len(classes) >= 12, classes
    for kind in classes:
        assert kind.__module__ == "orchestrator.errors", f"{kind.__module__}.{kind.__name__} lives outside errors.py"
        assert kind.exit_code in codes, f"{kind.__name__} exits {kind.exit_code}, which the table does not list"


def test_a_usage_error_exits_with_the_tables_bad_input_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["validate", "--no-such-option"])
    assert caught.value.code == EXIT_BAD_INPUT
    assert "No such option" in capsys.readouterr().err


def test_an_interrupt_exits_with_the_tables_code(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.errors import EXIT_INTERRUPTED

    def interrupted(*args: object, **kwargs: object) -> None:
        raise click.exceptions.Abort

    monkeypatch.setattr(cli, "main", interrupted)
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == EXIT_INTERRUPTED == 130
