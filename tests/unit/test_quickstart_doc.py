"""docs/quickstart.md: every `orch` command it shows exists with the options it uses (the walk-through
itself runs in tests/integration/test_record_lock_rebuild.py)."""

from __future__ import annotations

import re
import shlex

import click

from orchestrator.cli.main import cli
from tests.paths import REPO


def _orch_commands() -> list[list[str]]:
    text = (REPO / "docs" / "quickstart.md").read_text(encoding="utf-8")
    commands: list[list[str]] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith("orch "):
                commands.append(shlex.split(line)[1:])
    # Inline commands with arguments too (a bare `orch rebuild` in a sentence names the command only).
    commands += [shlex.split(m)[1:] for m in re.findall(r"`(orch [^`]+ [^`]+)`", text)]
    return commands


def test_every_quickstart_command_parses() -> None:
    commands = _orch_commands()
    names = {args[0] for args in commands}
    assert {"record", "lock", "validate", "rebuild", "init"} <= names, names
    for args in commands:
        command = cli.commands[args[0]]
        try:
            command.make_context(args[0], list(args[1:]))
        except click.UsageError as exc:  # an unknown option or a missing argument: the page is stale
            raise AssertionError(f"docs/quickstart.md: `orch {' '.join(args)}` does not parse: {exc}") from None
