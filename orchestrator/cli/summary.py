"""Terminal summaries of records (rich), shared by the commands that produce them."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.build_record import BuildRecord


def print_build_summary(console: Console, record: BuildRecord, out: Path) -> None:
    mark = "[green]✓[/]" if record.status == "passed" else "[red]✗[/]"
    console.print(f"{mark} image stage {record.status}: {record.dossier.name} ({record.dossier.identity[:12]})")
    if record.image is not None:
        size = record.image.size_bytes / 1e9
        console.print(f"  image   {record.image.tag}  {record.image.id[:19]}  {size:.2f} GB")
    cache = record.cache
    build_s = record.durations_s.get("build", 0.0)
    console.print(f"  cache   {cache.cached}/{cache.steps} steps from the layer cache; build {build_s:.1f}s")
    if record.code.variant:
        console.print(f"  code    recorded variant {record.code.variant} (uncommitted changes)")
    if record.checks:
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1))
        for column in ("check", "expected", "observed"):
            table.add_column(column)
        for check in record.checks:
            name = f"[green]✓[/] {escape(check.name)}" if check.passed else f"[red]✗[/] {escape(check.name)}"
            table.add_row(name, escape(check.expected), escape(check.observed))
        console.print(table)
    if record.failure is not None:
        console.print(f"  [red]failed at[/] {escape(record.failure.step or '?')}: {escape(record.failure.first_error)}")
    console.print(f"  record  {out / 'build.json'}")
