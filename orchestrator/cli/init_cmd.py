"""`orch init`: a first dossier and requirements.in, from the vendor tables (no reference recorded yet)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--platform", type=click.Choice(["cpu", "cuda", "rocm"]), required=True, help="Where the rebuild runs.")
@click.option("--version", "backend_version", default=None, metavar="X.Y", help="CUDA or ROCm version (orch tables).")
@click.option("--python", "python", default=None, metavar="X.Y", help="Default: 3.11 when the base image has it.")
@click.option("--base-image", default=None, metavar="REF", help="Default: orch's table for the platform and version.")
@click.option("--name", default=None, help="The dossier's name (default: the folder's).")
def init(
    folder: Path,
    platform: str,
    backend_version: str | None,
    python: str | None,
    base_image: str | None,
    name: str | None,
) -> None:
    """Start a dossier: pick a base image, Python and torch build that exist together, and write a commented
    dossier.yaml and requirements.in into FOLDER. With a reference run already done, use orch record instead."""
    from orchestrator.cli.console import make_console
    from orchestrator.errors import BadInput
    from orchestrator.fsutil import atomic_write_text
    from orchestrator.record.draft import identifier
    from orchestrator.record.start import choose, dossier_text, requirements_text

    targets = [folder / "dossier.yaml", folder / "requirements.in"]
    existing = [str(path) for path in targets if path.exists()]
    if existing:
        raise BadInput(f"{', '.join(existing)} already exist: orch init never overwrites; choose a new folder")
    choices = choose(
        name or identifier(folder.resolve().name),
        platform,  # type: ignore[arg-type]  # click.Choice keeps it to the Literal's values
        backend_version,
        python,
        base_image,
    )
    atomic_write_text(targets[1], requirements_text(choices))
    atomic_write_text(targets[0], dossier_text(choices))
    console = make_console()
    console.print(f"[green]✓[/] wrote {targets[0]} and {targets[1]}")
    console.print(f"  base image  {choices.base_image} (Python {choices.python})")
    console.print(f"  torch       {choices.torch_series}.* from {choices.torch_index or 'PyPI (its CUDA build)'}")
    console.print("  next        the comments at the top of dossier.yaml; then orch lock, orch rebuild")
