"""`orch probe`, `orch doctor` and `orch rebuild`: the layers of a rebuilt image, checked and reported."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.dossier_cmds import dossier_argument, variant_option

if TYPE_CHECKING:  # typing only: the CLI's start-up path stays free of pydantic
    from orchestrator.dossier.load import LoadedDossier
    from orchestrator.model.report import Report


def _finish(report_out: Path, report: Report) -> None:
    """Write every format, print the summary, and turn a failed verdict into exit 1."""
    from orchestrator.cli.console import make_console
    from orchestrator.cli.summary import print_report_summary
    from orchestrator.errors import VerdictFailed
    from orchestrator.report.write import write_report

    paths = write_report(report, report_out)
    print_report_summary(make_console(), report, paths)
    if report.verdict != "passed":
        failed = [stage for stage in report.stages.values() if stage.status == "failed"]
        first = failed[0] if failed else next(s for s in report.stages.values() if s.status != "passed")
        where = (
            f" at {first.first_error.step}: {first.first_error.message}" if first.first_error else f": {first.reason}"
        )
        raise VerdictFailed(
            f"{report.dossier.name}: the {first.name} stage {first.status}{where}", hint=f"Report: {paths['html']}"
        )


@click.command()
@dossier_argument
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Output folder.")
@click.option("--image", default=None, help="Image to probe (default: the one `orch build` made for this dossier).")
@variant_option
def probe(dossier: Path, out: Path, image: str | None, variant: str | None) -> None:
    """Probe an image layer by layer: image, host driver, device visibility, sample results."""
    from orchestrator.cli.console import make_console
    from orchestrator.dossier.load import load_dossier
    from orchestrator.engine import connect
    from orchestrator.stages.probe import ProbeOptions, run_probe

    loaded = load_dossier(dossier, variant=variant)
    engine = connect()
    console = make_console()
    try:
        with console.status(f"probing {loaded.model.name}") as status:
            report = run_probe(
                loaded,
                engine,
                ProbeOptions(out=out, image=image),
                on_stage=lambda s: status.update(f"{loaded.model.name}: {s}"),
            )
    finally:
        engine.close()
    _finish(out, report)


def run_rebuild(
    loaded: LoadedDossier,
    out: Path,
    *,
    ca_bundle: Path | None,
    no_cache: bool,
    raise_on_failure: bool,
    network: str | None = None,
) -> Report:
    """Build, probe, write the report; the Report. A failed verdict raises when `raise_on_failure`."""
    from orchestrator.cli.console import make_console
    from orchestrator.cli.progress import stage_progress
    from orchestrator.cli.summary import print_build_summary
    from orchestrator.engine import connect
    from orchestrator.stages.build import BuildOptions, ca_bundle_from_environment, run_build
    from orchestrator.stages.probe import ProbeOptions, run_probe, stages_after_failed_build

    engine = connect()
    console = make_console()
    try:
        with stage_progress(console, loaded.model.name) as progress:
            record = run_build(
                loaded,
                engine,
                BuildOptions(
                    out=out,
                    ca_bundle=ca_bundle or ca_bundle_from_environment(),
                    no_cache=no_cache,
                    network=network,  # type: ignore[arg-type]  # click.Choice guarantees the literal
                ),
                on_line=progress.line,
                on_stage=progress.stage,
            )
        print_build_summary(console, record, out)
        if record.image is None:
            report = stages_after_failed_build(loaded, record)
        else:
            with console.status(f"probing {loaded.model.name}") as status:
                report = run_probe(
                    loaded,
                    engine,
                    ProbeOptions(out=out, image=record.image.tag, built_in_this_run=True),
                    on_stage=lambda s: status.update(f"{loaded.model.name}: {s}"),
                )
    finally:
        engine.close()
    if raise_on_failure:
        _finish(out, report)
    return report


@click.command()
@dossier_argument
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Output folder.")
@variant_option
@click.option(
    "--ca-bundle", type=click.Path(path_type=Path, dir_okay=False, exists=True), default=None, help="As for orch build."
)
@click.option("--no-cache", is_flag=True, help="Build every layer again.")
@click.option(
    "--network",
    type=click.Choice(["none", "default", "host"]),
    default=None,
    help="Network of the build, as for orch build.",
)
@click.option(
    "--handover",
    "handover_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Also write a hand-over folder here when the report passed.",
)
def rebuild(
    dossier: Path,
    out: Path,
    variant: str | None,
    ca_bundle: Path | None,
    no_cache: bool,
    network: str | None,
    handover_dir: Path | None,
) -> None:
    """The whole sequence in one command: build the image, probe it, write the report (and the hand-over)."""
    from orchestrator.dossier.load import load_dossier

    loaded = load_dossier(dossier, variant=variant)
    run_rebuild(loaded, out, ca_bundle=ca_bundle, no_cache=no_cache, raise_on_failure=True, network=network)
    if handover_dir is not None:
        from orchestrator.cli.console import make_console
        from orchestrator.engine import connect
        from orchestrator.stages.handover import write_handover

        console = make_console()
        engine = connect()
        try:
            with console.status("handing over") as status:
                write_handover(loaded, engine, out, handover_dir, on_stage=lambda s: status.update(f"hand-over: {s}"))
        finally:
            engine.close()
        console.print(f"[green]✓[/] hand-over folder {handover_dir} (replay: orch verify {handover_dir})")


@click.command()
@click.argument("dossier", required=False, type=click.Path(path_type=Path))
@variant_option
@click.option("--json", "as_json", is_flag=True, help="Print the host facts as JSON.")
def doctor(dossier: Path | None, variant: str | None, as_json: bool) -> None:
    """Diagnose this host: GPU driver, the daemon's GPU support, and whether it can run a dossier's image on its GPU."""
    from orchestrator.cli.console import make_console
    from orchestrator.cli.summary import print_doctor
    from orchestrator.dossier.load import load_dossier
    from orchestrator.engine import connect
    from orchestrator.errors import VerdictFailed
    from orchestrator.pipeline.doctor import diagnose

    loaded = load_dossier(dossier, variant=variant) if dossier else None
    engine = connect()
    try:
        diagnosis = diagnose(engine, loaded)
    finally:
        engine.close()
    if as_json:
        click.echo(diagnosis.model_dump_json(indent=2))
    else:
        print_doctor(make_console(), diagnosis)
    if diagnosis.can_run is False:
        raise VerdictFailed(f"this host cannot run {diagnosis.dossier} on its {diagnosis.platform}: {diagnosis.reason}")


@click.command("probe-host")
@click.option("--platform", type=click.Choice(["cpu", "cuda", "rocm"]), required=True, help="What the probe expects.")
@click.option("--version", "backend_version", default=None, help="CUDA or ROCm version expected (e.g. 13.0).")
@click.option("--python", "python", default=None, help="Interpreter with torch (default: python3 on PATH).")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="Output folder.")
def probe_host(platform: str, backend_version: str | None, python: str | None, out: Path) -> None:
    """Host mode: run the host and device probes on this machine, without Docker (for GPU hosts with torch)."""
    import shutil
    import subprocess
    from datetime import UTC, datetime

    from orchestrator import __version__
    from orchestrator.host.collect import collect_host_facts
    from orchestrator.model.report import Report, ReportDossier, overall_verdict
    from orchestrator.pipeline.host_mode import run_host_mode
    from orchestrator.stages.results import not_run

    interpreter = python or shutil.which("python3") or "python3"
    host, device = run_host_mode(
        platform, backend_version, interpreter, host_facts=lambda: collect_host_facts(None), run=subprocess.run
    )
    stages = {
        "image": not_run("image", "host mode: no image, the host's own Python environment"),
        "host": host,
        "device": device,
        "sample": not_run("sample", "host mode runs the host and device probes only"),
    }
    verdict = "passed" if overall_verdict({"host": host, "device": device}) == "passed" else "failed"
    report = Report(
        orch_version=__version__,
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        dossier=ReportDossier(
            name="host-mode", path="-", identity="-", variant=None, platform=platform, backend_version=backend_version
        ),
        image=None,
        verdict=verdict,
        stages=stages,
        notes=[f"host mode with {interpreter}"],
    )
    _finish(out, report)
