"""`orch handover` and `orch verify`: a folder another team can replay, and its replay."""

from __future__ import annotations

import os
from pathlib import Path

import click

from orchestrator.cli.dossier_cmds import dossier_argument, gpus_option, variant_option


@click.command()
@dossier_argument
@click.option(
    "--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="The new hand-over folder."
)
@click.option(
    "--from",
    "source",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="An `orch rebuild` output folder to hand over (default: run orch rebuild first, into OUT.rebuild).",
)
@variant_option
def handover(dossier: Path, out: Path, source: Path | None, variant: str | None) -> None:
    """Write a hand-over folder: saved image, dossier, Dockerfile, lock, inventory, reports, procedure, checksums."""
    from orchestrator.cli.console import make_console
    from orchestrator.dossier.load import load_dossier
    from orchestrator.engine import connect
    from orchestrator.stages.handover import write_handover

    loaded = load_dossier(dossier, variant=variant)
    if source is None:
        from orchestrator.cli.probe_cmds import rebuild_and_report

        source = out.with_name(out.name + ".rebuild")
        rebuild_and_report(loaded, source, ca_bundle=None, no_cache=False)
    console = make_console()
    with connect() as engine, console.status("handing over") as status:
        manifest = write_handover(loaded, engine, source, out, on_stage=lambda s: status.update(f"hand-over: {s}"))
    size = sum(f.size for f in manifest.files) / 1e9
    console.print(
        f"[green]✓[/] hand-over folder {out}: {len(manifest.files)} files, {size:.2f} GB, checksums in SHA256SUMS"
    )
    console.print(f"  replay it on another machine: orch verify {out} --out verify-out")


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where the replayed report goes, outside FOLDER (default: FOLDER.verify).",
)
@gpus_option
def verify(folder: Path, out: Path | None, gpus: str | None) -> None:
    """Replay a hand-over folder: check its files and image tarball, load the image untagged, probe again, compare."""
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.cli.console import make_console
    from orchestrator.engine import connect
    from orchestrator.errors import BadInput, VerdictFailed
    from orchestrator.stages.verify import check_handover, verify_handover

    folder = folder.resolve()
    target = (out or folder.with_name(folder.name + ".verify")).resolve()
    if target == folder or target.is_relative_to(folder):
        raise BadInput(
            f"--out {target} is inside the hand-over folder; write the replay elsewhere (an added file fails verify)"
        )
    console = make_console()
    # Before anything needs an engine: a damaged or tampered folder is a verdict on its own.
    with console.status("verify: checking the folder"):
        checked = check_handover(folder)
    with connect() as engine, console.status("verifying") as status:
        result = verify_handover(
            folder,
            engine,
            target,
            on_stage=lambda s: status.update(f"verify: {s}"),
            checked=checked,
            gpus=gpus,
            environ=dict(os.environ),
        )
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1))
    for column in ("layer", "shipped", "replayed", "verdict"):
        table.add_column(column)
    for layer in result.layers:
        mark = "[green]reproduced[/]" if layer.verdict == "reproduced" else "[red]differs[/]"
        table.add_row(layer.stage, layer.shipped, layer.replayed, mark)
    names = ", ".join(filter(None, [result.image.reference, result.image.dossier_tag]))
    console.print(
        f"checked: all {len(result.manifest.files) + 1} files match SHA256SUMS, no path leaves the folder, "
        f"the image tarball holds {result.manifest.image_id[:19]}; loaded with no tag of its own, as {names}"
    )
    if result.image.tag_left:
        console.print(f"  [yellow]note[/]: {result.image.tag_left}")
    console.print(table)
    for name, before, after in result.number_differences:
        console.print(f"  numbers differ: {name}: shipped {before}, replayed {after}")
    env = result.environment
    if env is None:
        console.print(f"  environment: {escape(result.environment_note or 'not compared')}")
    elif env.same:
        console.print(f"  environment: [green]same environment[/] ({env.digest_a})")
    else:
        console.print(f"  environment: [red]differs[/]: shipped {env.digest_a}, replayed {env.digest_b}")
        for line in env.lines():
            console.print(f"    • {escape(line.removeprefix('environment '))}")
    console.print(f"  replayed report: {result.report_paths['html']}")
    if not result.reproduced or result.report.verdict != "passed":
        differing = [layer.stage for layer in result.layers if layer.verdict != "reproduced"]
        if env is not None and not env.same:
            differing.append("the environment digest")
        raise VerdictFailed(
            f"the replay of {result.manifest.dossier_name} "
            + (f"differs at {', '.join(differing)}" if differing else f"ended {result.report.verdict}")
        )
