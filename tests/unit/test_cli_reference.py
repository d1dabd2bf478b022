"""docs/cli.md is generated from the Click commands; it must not drift from them.

Regenerate after changing a command or an option:

    .venv/bin/python -c "from orchestrator.cli.reference import cli_reference_markdown; \
print(cli_reference_markdown(), end='')" > docs/cli.md
"""

from __future__ import annotations

import re

import click

from orchestrator.cli.main import cli
from orchestrator.cli.reference import REGENERATE, cli_reference_markdown
from tests.paths import REPO


def test_committed_cli_reference_is_current() -> None:
    committed = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert committed == cli_reference_markdown(), f"docs/cli.md is stale; regenerate it: {REGENERATE}"


def test_reference_is_deterministic() -> None:
    assert cli_reference_markdown() == cli_reference_markdown()


def test_every_command_and_option_is_documented() -> None:
    text = cli_reference_markdown()
    for name, command in cli.commands.items():
        assert f"## `orch {name}`" in text
        for param in command.params:
            if isinstance(param, click.Option):
                for opt in param.opts:
                    assert f"`{opt}`" in text, f"orch {name} {opt} is missing from the reference"


def test_exit_codes_are_listed() -> None:
    text = cli_reference_markdown()
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |"):
        assert code in text


def test_every_error_kind_has_a_troubleshooting_section() -> None:
    """Each `error[code]` the reference lists links to a section of docs/troubleshooting.md that exists."""
    codes = re.findall(r"\[`error\[([a-z-]+)\]`\]\(troubleshooting\.md#error\1\)", cli_reference_markdown())
    assert len(codes) >= 9, codes
    troubleshooting = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    missing = [code for code in codes if f"\n## `error[{code}]`\n" not in troubleshooting]
    assert not missing, f"docs/troubleshooting.md has no section for: {missing}"
