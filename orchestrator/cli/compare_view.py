"""Terminal rendering of `orch compare` (rich), in the style of `orchestrator.cli.summary`.

Rows that are the same on both sides are named in one line, not tabulated: the tables hold what differs.
Stages and numbers are always shown in full, side by side. Every value from the files is escaped.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.model.comparison import Comparison, Difference, Verdict
from orchestrator.report.compare_markdown import (
    OVERALL_TEXT,
    VERDICT_TEXT,
    environment_summary,
    short,
    side_summary,
    verdict_label,
)

_VERDICT_STYLE: dict[Verdict, str] = {
    "same": "green",
    "within_tolerance": "green",
    "intended": "cyan",
    "improved": "green",
    "host": "yellow",
    "changed": "red",
    "regression": "bold red",
}
_OVERALL_MARK = {"identical": "[green]✓[/]", "equivalent": "[green]✓[/]", "regressed": "[red]✗[/]"}


def _verdict(verdict: Verdict, note: str | None = None, intent: str | None = None) -> str:
    return f"[{_VERDICT_STYLE[verdict]}]{escape(verdict_label(verdict, note, intent=intent))}[/]"


#: Below this console width the differences print one per line instead of as a table.
NARROW = 100


def _table(*columns: str) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1))
    for column in columns:
        table.add_column(column)
    return table


def _passed(passed: bool | None) -> str:
    return "" if passed is None else (" [green]✓[/]" if passed else " [red]✗[/]")


def _differences(console: Console, title: str, rows: list[Difference], intent: str | None) -> None:
    differing = [row for row in rows if row.verdict != "same"]
    same = [row.field for row in rows if row.verdict == "same"]
    console.print(f"\n[bold]{title}[/]")
    if differing and console.width < NARROW:
        # A four-column table wraps every cell at 80 columns: one line per difference reads better there.
        for row in differing:
            a, b = (short(row.a), short(row.b)) if row.field == "identity" else (row.a, row.b)
            verdict = _verdict(row.verdict, row.note, intent)
            console.print(f"  {escape(row.field)}: {escape(a)} [dim]→[/] {escape(b)}  {verdict}", overflow="fold")
    elif differing:
        table = _table("", "A", "B", "verdict")
        for row in differing:
            a, b = (short(row.a), short(row.b)) if row.field == "identity" else (row.a, row.b)
            table.add_row(escape(row.field), escape(a), escape(b), _verdict(row.verdict, row.note, intent))
        console.print(table)
    if same:
        console.print(f"  [dim]same on both sides: {escape(', '.join(same))}[/]")
    if not rows:
        console.print("  [dim]nothing recorded on both sides[/]")


def print_compare(console: Console, comparison: Comparison) -> None:
    c = comparison
    console.print(f"{_OVERALL_MARK[c.verdict]} {escape(OVERALL_TEXT[c.verdict])}")
    if c.intent:
        label = escape(verdict_label("intended", c.intent))
        console.print(f"  [cyan]{label}[/]: the rows marked intended are this declared variant's")
    sides = _table("", "A (reference)", "B (rebuild)")
    for (label, value_a), (_, value_b) in zip(side_summary(c.a), side_summary(c.b), strict=True):
        sides.add_row(label, escape(value_a), escape(value_b))
    console.print(sides)
    if c.unintended:
        console.print("\n[bold red]unintended differences[/]")
        for line in c.unintended:
            console.print(f"  [red]•[/] {escape(line)}")

    _differences(console, "dossier", c.dossier, c.intent)

    console.print("\n[bold]packages[/]")
    if c.packages is None:
        console.print("  [dim]not compared (see below)[/]")
    elif c.packages.identical:
        console.print("  [green]identical[/]")
    else:
        assert c.packages_verdict is not None
        console.print(f"  {_verdict(c.packages_verdict, c.packages_note, c.intent)}")
        table = _table("package", "A", "B")
        for change in c.packages.changed:
            table.add_row(escape(change.name), escape(change.reference), escape(change.observed))
        for line in c.packages.removed:
            name, _, version = line.partition("==")
            table.add_row(escape(name), escape(version), "[dim](absent)[/]")
        for line in c.packages.added:
            name, _, version = line.partition("==")
            table.add_row(escape(name), "[dim](absent)[/]", escape(version))
        console.print(table)

    console.print("\n[bold]environment[/]")
    head, *files = environment_summary(c)
    style = (
        "dim"
        if c.environment is None
        else ("green" if c.environment.same else _VERDICT_STYLE[c.environment_verdict or "changed"])
    )
    console.print(f"  [{style}]{escape(head)}[/]")
    for line in files:
        console.print(f"    • {escape(line)}")

    _differences(console, "system", c.system, c.intent)

    console.print("\n[bold]stages[/]")
    if c.stages:
        table = _table("stage", "A", "B", "verdict", "B's first error / reason")
        for stage in c.stages:
            table.add_row(
                stage.stage,
                escape(stage.a or "—"),
                escape(stage.b or "—"),
                f"[{_VERDICT_STYLE[stage.verdict]}]{VERDICT_TEXT[stage.verdict]}[/]",
                escape(stage.note or ""),
            )
        console.print(table)
    else:
        console.print("  [dim]not compared (see below)[/]")

    console.print("\n[bold]numbers[/]")
    if c.numbers:
        table = _table("stage", "check", "A", "B", "expected (B)", "verdict")
        for number in c.numbers:
            verdict = _verdict(number.verdict, number.note, c.intent)
            if number.note and number.verdict != "intended":
                verdict += f" [dim]({escape(number.note)})[/]"
            table.add_row(
                number.stage,
                escape(number.name),
                escape(number.a_observed or "—") + _passed(number.a_passed),
                escape(number.b_observed or "—") + _passed(number.b_passed),
                escape(number.expected),
                verdict,
            )
        console.print(table)
    else:
        console.print("  [dim]no check recorded on both sides[/]")

    for line in c.not_compared:
        console.print(f"  [dim]not compared: {escape(line)}[/]")
    for note in c.notes:
        console.print(f"  note: {escape(note)}")
