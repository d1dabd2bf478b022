"""`orch lock` (the rebuild's lock, computed for the dossier's target) and `orch tables` (the vendor tables)."""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.dossier_cmds import dossier_argument, variant_option


@click.command()
@dossier_argument
@variant_option
@click.option(
    "--input",
    "input_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Loose requirements to lock (requirements.in or pyproject.toml). Default: <lock>.in, requirements.in, "
    "the code's pyproject.toml, the reference inventory.",
)
@click.option(
    "--arch", type=click.Choice(["x86_64", "aarch64"]), default="x86_64", show_default=True, help="Target CPU."
)
@click.option(
    "--find-links",
    "find_links",
    multiple=True,
    metavar="DIR",
    help="A wheel folder of this host to search too (a mirror); named in the lock's header.",
)
@click.option("--upgrade-package", "-P", "upgrade_packages", multiple=True, metavar="NAME", help="Move only NAME.")
@click.option("--upgrade", is_flag=True, help="Move every package to the newest version the input allows.")
@click.option(
    "--skip-unreachable", is_flag=True, help="Lock without the sources that do not answer; the header says which."
)
@click.option("--check", is_flag=True, help="Exit 1 when the lock no longer matches its inputs (offline; for CI).")
@click.option("--dry-run", is_flag=True, help="Compute and print the lock; write nothing.")
def lock(
    dossier: Path,
    variant: str | None,
    input_path: Path | None,
    arch: str,
    find_links: tuple[str, ...],
    upgrade_packages: tuple[str, ...],
    upgrade: bool,
    skip_unreachable: bool,
    check: bool,
    dry_run: bool,
) -> None:
    """Compute the hash-locked requirements for the dossier's TARGET (its Python, glibc, CPU and PyTorch index).

    Resolves with uv for the target, never the host; records the index each package came from and the file
    it installs; checks the result with the dossier's coherence tables. Credentials of private indexes are
    read from the environment variable the dossier names, never written.
    """
    from orchestrator.cli.console import make_console
    from orchestrator.lock.compute import compute_lock, plan_lock, raise_if_stale, write_lock

    plan = plan_lock(
        dossier,
        variant=variant,
        arch=arch,  # type: ignore[arg-type]  # click.Choice keeps it to the Literal's values
        find_links=find_links,
        input_path=input_path,
    )
    console = make_console()
    if check:
        raise_if_stale(plan)
        console.print(f"[green]✓[/] {plan.lock_path.name} matches {plan.input.shown} and the target")
        return
    console.print(f"locking {plan.input.shown} for {plan.target.describe()}")
    result = compute_lock(plan, upgrade=upgrade, upgrade_packages=upgrade_packages, skip_unreachable=skip_unreachable)
    for missing in result.unreachable:
        console.print(f"[yellow]not reached:[/] {missing.source.url} ({missing.source.origin}): {missing.reason}")
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")
    counts: dict[str, int] = {}
    for package in result.packages:
        counts[package.source or "unknown"] = counts.get(package.source or "unknown", 0) + 1
    for source, count in sorted(counts.items()):
        console.print(f"  {count:>3} packages from {source}")
    if dry_run:
        click.echo(result.text, nl=False)
        return
    if result.changed:
        write_lock(result)
        console.print(f"[green]✓[/] wrote {plan.lock_path} ({len(result.packages)} packages, all hashed)")
    else:
        console.print(f"[green]✓[/] {plan.lock_path} is already current ({len(result.packages)} packages)")
