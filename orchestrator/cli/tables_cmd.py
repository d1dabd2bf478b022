"""`orch tables`: the vendor tables orch checks dossiers against, printed from orchestrator/data/*.json."""

from __future__ import annotations

import json

import click


@click.command()
@click.option(
    "--table",
    type=click.Choice(["torch", "images", "all"]),
    default="all",
    show_default=True,
    help="torch: torch series ↔ CUDA/ROCm builds; images: base images ↔ Python and glibc.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the tables as JSON.")
@click.option("--markdown", is_flag=True, help="Print the Markdown docs/dossier.md carries (same generator).")
def tables(table: str, as_json: bool, markdown: bool) -> None:
    """Print the torch ↔ CUDA/ROCm builds and the base images ↔ Python tables (the data orch validates with)."""
    from orchestrator.dossier.doc_sections import vendor_tables_markdown
    from orchestrator.dossier.vendor_view import image_rows, images_table_json, torch_rows, torch_table_json

    if markdown:
        click.echo("\n".join(vendor_tables_markdown()), nl=False)
        return
    if as_json:
        document: dict[str, object] = {}
        if table in ("torch", "all"):
            document["torch"] = torch_table_json()
        if table in ("images", "all"):
            document["base_images"] = images_table_json()
        click.echo(json.dumps(document, indent=2))
        return
    from rich.table import Table

    from orchestrator.cli.console import make_console

    console = make_console()
    if table in ("torch", "all"):
        grid = Table(title="torch ↔ CUDA / ROCm (index: https://download.pytorch.org/whl/<tag>)")
        for header in ("torch", "CUDA builds (cuNNN)", "ROCm builds (rocmX.Y)", "PyPI wheel", "Python ≥"):
            grid.add_column(header)
        for row in torch_rows():
            grid.add_row(*row)
        console.print(grid)
    if table in ("images", "all"):
        grid = Table(title="Base images ↔ Python")
        for header in ("image", "platform", "CUDA / ROCm", "OS", "glibc", "Python", "default"):
            grid.add_column(header)
        for image in image_rows():
            grid.add_row(*image)
        console.print(grid)
