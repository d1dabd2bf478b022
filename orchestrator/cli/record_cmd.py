"""`orch record`: capture the reference where it ran, as a draft dossier folder."""

from __future__ import annotations

from pathlib import Path

import click

_path = click.Path(path_type=Path)


@click.command()
@click.option(
    "--python",
    "python",
    type=_path,
    default=None,
    help="The reference's interpreter (its venv's bin/python); with --image, its path inside the image "
    "(default: python).",
)
@click.option(
    "--image",
    default=None,
    metavar="REF",
    help="The image the reference ran in: its environment is read inside it (no network), with its id and labels.",
)
@click.option("--code", type=_path, required=True, help="The app's folder (the command runs there).")
@click.option(
    "--command",
    "command",
    required=True,
    help='The command the reference ran, e.g. "python embed.py --input data/x.jsonl --output out".',
)
@click.option("--outputs", type=_path, required=True, help="The folder the reference run wrote its outputs to.")
@click.option("--out", type=_path, required=True, help="A new folder for the draft dossier.")
@click.option(
    "--data", type=_path, multiple=True, help="An input file or folder of the command (copied as the sample)."
)
@click.option("--weights", type=_path, multiple=True, help="A weights file or folder (copied and fingerprinted).")
@click.option(
    "--platform",
    type=click.Choice(["cpu", "cuda", "rocm"]),
    default=None,
    help="Default: from torch's build (torch.version.cuda / .hip).",
)
@click.option("--version", "backend_version", default=None, metavar="X.Y", help="CUDA or ROCm version of the target.")
@click.option("--base-image", default=None, metavar="REF", help="Default: orch's table for the platform (orch tables).")
@click.option(
    "--repeat",
    type=click.IntRange(0, 100),
    default=0,
    show_default=True,
    help="Rerun the command N times and record the spread of its outputs.",
)
@click.option(
    "--vary",
    multiple=True,
    metavar="NAME=V1,V2",
    help="Rerun once with each value of an environment variable (e.g. OMP_NUM_THREADS=1,2) and record the "
    "spread per setting; repeatable.",
)
@click.option("--name", default=None, help="The dossier's name (default: the code folder's).")
@click.option("--entrypoint", default=None, help="Default: the first .py file of --command.")
def record(
    python: Path | None,
    image: str | None,
    code: Path,
    command: str,
    outputs: Path,
    out: Path,
    data: tuple[Path, ...],
    weights: tuple[Path, ...],
    platform: str | None,
    backend_version: str | None,
    base_image: str | None,
    repeat: int,
    vary: tuple[str, ...],
    name: str | None,
    entrypoint: str | None,
) -> None:
    """Record the reference where it ran: environment (pip inspect with install sources, torch's CUDA/ROCm),
    code revision, fingerprints, outputs with their format and measured spread, as a draft dossier.

    Local paths and credentials in what was observed are redacted and listed; fields that need a person's
    decision are marked TO CONFIRM (orch validate lists them). Next: orch lock OUT/dossier.yaml.
    """
    from orchestrator.cli.console import make_console
    from orchestrator.record.run import RecordRequest, parse_vary, record_reference

    result = record_reference(
        RecordRequest(
            python=python,
            code=code,
            command=command,
            outputs=outputs,
            out=out,
            data=data,
            weights=weights,
            platform=platform,  # type: ignore[arg-type]  # click.Choice keeps it to the Literal's values
            backend_version=backend_version,
            base_image=base_image,
            repeat=repeat,
            vary=tuple(parse_vary(text) for text in vary),
            name=name,
            entrypoint=entrypoint,
            image=image,
        )
    )
    console = make_console()
    console.print(f"[green]✓[/] draft dossier: {result.out / 'dossier.yaml'}")
    pins = [line.split("  #")[0] for line in result.requirements]
    console.print(f"  requirements.in: {len(pins)} pins: {', '.join(pins) or 'none (write them by hand)'}")
    for output in result.outputs:
        shape = f" {output.dtype} {output.shape}" if output.shape is not None else ""
        spread = f"; spread: {output.spread}" if output.spread else ""
        spread += "".join(f"; with {key}: {value}" for key, value in output.varied.items())
        console.print(f"  output {output.file}: {output.format or 'not comparable'}{shape}{spread}", markup=False)
    if result.redactions:
        console.print(f"[yellow]redacted[/] {len(result.redactions)} value(s), written nowhere in full:")
        for item in result.redactions:
            console.print(f"  {item.kind}: {item.where}: {item.shown}", markup=False, soft_wrap=True)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")
    draft = result.out / "dossier.yaml"
    console.print(f"next: orch lock {draft}, then orch validate {draft} (lists the TO CONFIRM fields)")
