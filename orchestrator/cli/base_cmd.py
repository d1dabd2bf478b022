"""`orch base`: make a local base image with debootstrap + docker import (no registry needed)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option(
    "--suite",
    default="bookworm",
    show_default=True,
    help="Debian suite: bookworm (Python 3.11) or trixie (3.13).",
)
@click.option("--mirror", default=None, help="Debian mirror URL (an internal mirror on air-gapped sites).")
@click.option(
    "--snapshot",
    default=None,
    metavar="YYYYMMDDTHHMMSSZ",
    help="Install from snapshot.debian.org at this date.",
)
@click.option("--include", "extra", multiple=True, metavar="PKG", help="Extra Debian package (repeatable).")
@click.option("--force", is_flag=True, help="Rebuild even if the tag exists.")
@click.option(
    "--log-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where the debootstrap log goes.",
)
def base(
    suite: str,
    mirror: str | None,
    snapshot: str | None,
    extra: tuple[str, ...],
    force: bool,
    log_dir: Path | None,
) -> None:
    """Build a Debian base image with Python locally: debootstrap, then docker import. Reuses an existing tag."""
    from orchestrator.cli.console import make_console
    from orchestrator.engine import connect
    from orchestrator.stages.base_image import DEFAULT_MIRROR, BaseRecipe, ensure_base_image

    recipe = BaseRecipe(suite=suite, mirror=mirror or DEFAULT_MIRROR, snapshot=snapshot, extra_packages=tuple(extra))
    console = make_console()
    with connect() as engine, console.status(f"debootstrap {suite} (about a minute)") as status:
        outcome = ensure_base_image(
            engine,
            recipe,
            force=force,
            log_dir=log_dir,
            on_line=lambda line: status.update(f"debootstrap {suite}: {line[:80]}"),
        )
    verb = "reused" if outcome.reused else "built"
    console.print(f"[green]✓[/] {verb} {outcome.ref} ({outcome.image_id[:19]})")
    if outcome.log_path:
        console.print(f"  log: {outcome.log_path}")
