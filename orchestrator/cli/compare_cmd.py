"""`orch compare A B`: two reports or build records side by side, layer by layer."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("a", metavar="A", type=click.Path(path_type=Path))
@click.argument("b", metavar="B", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON (format orch.compare/1).")
@click.option(
    "--markdown",
    "markdown_out",
    metavar="FILE",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also write the comparison as Markdown to FILE (a CI job summary, a PR comment).",
)
def compare(a: Path, b: Path, as_json: bool, markdown_out: Path | None) -> None:
    """Compare B (a rebuild) with A (the reference): packages, environment, system, stages and numbers.

    A and B are each a report.json, a build.json, or a folder holding them (the output of `orch rebuild`).
    The environment digests say "same environment", or the installed files that differ (named from the
    environment.json beside each side; docs/environment.md). A difference that a variant declared in the dossier explains is shown as intended, not as a
    regression. Exit 0 when identical or equivalent, 1 when B regressed, 2 on bad input.
    """
    from orchestrator.compare.read import load_side
    from orchestrator.compare.verdict import compare_sides
    from orchestrator.errors import BadInput, VerdictFailed
    from orchestrator.report.compare_markdown import render_compare_markdown

    comparison = compare_sides(load_side(a), load_side(b))
    if markdown_out is not None:
        from orchestrator.fsutil import atomic_write_text

        try:
            atomic_write_text(markdown_out, render_compare_markdown(comparison))
        except OSError as exc:
            raise BadInput(f"{markdown_out}: cannot write the Markdown comparison: {exc.strerror or exc}") from None
    if as_json:
        click.echo(comparison.model_dump_json(indent=2))
    else:
        from orchestrator.cli.compare_view import print_compare
        from orchestrator.cli.console import make_console

        print_compare(make_console(), comparison)
    if comparison.verdict == "regressed":
        first = comparison.unintended[0] if comparison.unintended else "an unintended difference"
        more = len(comparison.unintended) - 1
        raise VerdictFailed(
            f"B regressed against A: {first}"
            + (f" (and {more} more unintended difference{'s' if more > 1 else ''})" if more > 0 else "")
        )
