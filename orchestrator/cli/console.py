"""Terminal output. Consoles are made here and passed in, never global, so output is testable."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.errors import OrchError


def make_console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def print_error(error: OrchError, console: Console | None = None) -> None:
    """One message: `error[code]: what failed`, then the hint on its own line when there is one."""
    from rich.markup import escape

    console = console or make_console(stderr=True)
    console.print(f"[bold red]error[/][dim]{escape(f'[{error.code}]')}[/]: {escape(error.message)}")
    if error.hint:
        console.print(f"  [yellow]hint:[/] {escape(error.hint)}")
