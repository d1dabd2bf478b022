"""`orch build`: the image, its inventory and build.json."""

from __future__ import annotations

import os
from pathlib import Path

import click

from orchestrator.cli.dossier_cmds import builder_option, dossier_argument, dry_run_option, variant_option


@click.command()
@dossier_argument
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Output folder.")
@variant_option
@click.option("--tag", default=None, help="Image tag (default: orch/<name>:<identity prefix>).")
@click.option(
    "--ca-bundle",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="CA bundle pip trusts during an online install (default: $ORCH_CA_BUNDLE, else $PIP_CERT). "
    "Used in the builder stage only; never kept in the image.",
)
@click.option(
    "--network",
    type=click.Choice(["none", "default", "host"]),
    default=None,
    help="Network of the build (default: none for wheelhouse installs, the engine's default for online ones; "
    "host reaches indexes on the host's loopback).",
)
@click.option("--no-cache", is_flag=True, help="Build every layer again.")
@builder_option
@click.option("--verbose", "-v", is_flag=True, help="Show every build log line, not only the steps.")
@dry_run_option
def build(
    dossier: Path,
    out: Path,
    variant: str | None,
    tag: str | None,
    ca_bundle: Path | None,
    network: str | None,
    no_cache: bool,
    builder: str | None,
    verbose: bool,
    dry_run: bool,
) -> None:
    """Render the dossier and build its image through the Docker engine; record build.json."""
    from orchestrator.cli.console import make_console
    from orchestrator.cli.progress import stage_progress
    from orchestrator.cli.summary import print_build_summary
    from orchestrator.dossier.load import load_dossier
    from orchestrator.engine import connect
    from orchestrator.errors import VerdictFailed
    from orchestrator.plan.builder import requested_builder
    from orchestrator.stages.build import BuildOptions, ca_bundle_from_environment
    from orchestrator.stages.execute import run_build

    console = make_console()
    loaded = load_dossier(dossier, variant=variant)
    options = BuildOptions(
        out=out,
        tag=tag,
        ca_bundle=ca_bundle or ca_bundle_from_environment(),
        network=network,  # type: ignore[arg-type]  # click.Choice guarantees the literal
        no_cache=no_cache,
        builder=requested_builder(builder, os.environ),
    )
    if dry_run:
        from orchestrator.pipeline.dry_run import dry_run_build

        click.echo(dry_run_build(loaded, options, environ=os.environ), nl=False)
        return
    with connect() as engine, stage_progress(console, loaded.model.name, verbose=verbose) as progress:
        record = run_build(loaded, engine, options, on_line=progress.line, on_stage=progress.stage)
    print_build_summary(console, record, out)
    if record.failure is not None:
        raise VerdictFailed(
            f"build of {loaded.model.name} failed at {record.failure.step or 'an unknown step'}: "
            f"{record.failure.first_error}",
            hint=f"Full log: {out / 'build.log'}; record: {out / 'build.json'}",
        )
