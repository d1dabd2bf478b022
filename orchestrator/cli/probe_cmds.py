"""`orch probe`, `orch doctor` and `orch rebuild`: the layers of a rebuilt image, checked and reported."""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.dossier_cmds import (
    builder_option,
    dossier_argument,
    dry_run_option,
    gpus_option,
    no_preflight_option,
    sign_option,
    variant_option,
)

if TYPE_CHECKING:  # typing only: the CLI's start-up path stays free of pydantic
    from rich.console import Console

    from orchestrator.dossier.load import LoadedDossier
    from orchestrator.engine import Engine
    from orchestrator.model.build_record import BuildRecord
    from orchestrator.model.host import HostFacts
    from orchestrator.model.report import Report
    from orchestrator.pipeline.rebuild import RebuildHooks


def report_paths(out: Path) -> dict[str, Path]:
    from orchestrator.report.write import FILES

    return {kind: out.resolve() / name for kind, name in FILES.items()}


def _finish(report: Report, paths: dict[str, Path]) -> None:
    """Print the summary of a report the program wrote (`paths`), and turn a failed verdict into exit 1."""
    from orchestrator.cli.console import make_console
    from orchestrator.cli.summary import print_report_summary
    from orchestrator.errors import VerdictFailed
    from orchestrator.model.report import first_failed_stage

    print_report_summary(make_console(), report, paths)
    if report.verdict != "passed":
        first = first_failed_stage(report)
        assert first is not None, "a report that did not pass has a failed or not-run stage"
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
@gpus_option
@no_preflight_option
@dry_run_option
def probe(
    dossier: Path,
    out: Path,
    image: str | None,
    variant: str | None,
    gpus: str | None,
    no_preflight: bool,
    dry_run: bool,
) -> None:
    """Probe an image layer by layer: image, host driver, device visibility, sample results.

    Before any container: the dossier's fingerprints and whether this host can run its GPU stages
    (`orch doctor`'s verdict); --no-preflight skips both."""
    from orchestrator.cli.console import make_console
    from orchestrator.dossier.load import load_dossier
    from orchestrator.engine import connect
    from orchestrator.stages.execute import run_probe
    from orchestrator.stages.probe import ProbeOptions

    loaded = load_dossier(dossier, variant=variant, check_fingerprints=not no_preflight and not dry_run)
    if dry_run:
        from orchestrator.pipeline.dry_run import dry_run_probe

        click.echo(dry_run_probe(loaded, out, image, environ=os.environ, gpus=gpus), nl=False)
        return
    console = make_console()
    with connect() as engine, console.status(f"probing {loaded.model.name}") as status:
        host = _preflight(engine, loaded, gpus) if not no_preflight else None
        report = run_probe(
            loaded,
            engine,
            ProbeOptions(out=out, image=image, gpus=gpus, environ=dict(os.environ)),
            host_facts=(lambda: host) if host is not None else None,
            on_stage=lambda s: status.update(f"{loaded.model.name}: {s}"),
            write_report=True,
        )
    _finish(report, report_paths(out))


def _preflight(engine: Engine, loaded: LoadedDossier, gpus: str | None) -> HostFacts:
    """Before any build or container: can this host run the dossier's GPU stages? (pipeline/preflight.py)
    The host facts it read are the run's: they are not collected a second time."""
    from orchestrator.checks.host_layer import cpu_variant_of
    from orchestrator.pipeline.preflight import check_host

    diagnosis = check_host(engine, loaded, gpus=gpus, environ=dict(os.environ), cpu_variant=cpu_variant_of(loaded))
    return diagnosis.host


class _RebuildView:
    """The rebuild's progress on the console: the build's live steps, its summary, then the probe's status."""

    def __init__(self, console: Console, name: str, out: Path) -> None:
        self._console, self._name, self._out = console, name, out
        self._stack = ExitStack()

    def __enter__(self) -> _RebuildView:
        from orchestrator.cli.progress import stage_progress

        self._progress = self._stack.enter_context(stage_progress(self._console, self._name))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    def hooks(self) -> RebuildHooks:
        from orchestrator.pipeline.rebuild import RebuildHooks

        return RebuildHooks(
            on_line=self._progress.line,
            on_build_stage=self._progress.stage,
            on_built=self._built,
            on_probe_stage=self._probe_stage,
        )

    def _probe_stage(self, stage: str) -> None:
        # Step `fetch` (remote weights) comes before the build: the build's live view shows it.
        status = getattr(self, "_status", None)
        if status is None:
            self._progress.stage(stage)
        else:
            status.update(f"{self._name}: {stage}")

    def _built(self, record: BuildRecord) -> None:
        from orchestrator.cli.summary import print_build_summary

        self._stack.close()  # the build's live view ends before its summary is printed
        print_build_summary(self._console, record, self._out)
        if record.image is not None:
            self._status = self._stack.enter_context(self._console.status(f"probing {self._name}"))


def rebuild_and_report(
    loaded: LoadedDossier,
    out: Path,
    *,
    ca_bundle: Path | None,
    no_cache: bool,
    network: str | None = None,
    gpus: str | None = None,
    handover: Path | None = None,
    builder: str | None = None,
    preflight: bool = False,
    sign_key: Path | None = None,
) -> Report:
    """`orch rebuild` on the console: one program on one engine connection (build, probe, report, and the
    hand-over when asked and the report passed); a failed verdict raised (exit 1)."""
    from orchestrator.cli.console import make_console
    from orchestrator.engine import connect
    from orchestrator.pipeline.rebuild import rebuild_run
    from orchestrator.plan.builder import requested_builder
    from orchestrator.stages.build import BuildOptions, ca_bundle_from_environment

    options = BuildOptions(
        out=out,
        ca_bundle=ca_bundle or ca_bundle_from_environment(),
        no_cache=no_cache,
        network=network,  # type: ignore[arg-type]  # click.Choice guarantees the literal
        builder=requested_builder(builder, os.environ),
    )
    console = make_console()
    with connect() as engine:
        host = _preflight(engine, loaded, gpus) if preflight else None
        with _RebuildView(console, loaded.model.name, out) as view:
            result = rebuild_run(
                loaded,
                engine,
                options,
                hooks=view.hooks(),
                host_facts=(lambda: host) if host is not None else None,
                gpus=gpus,
                environ=dict(os.environ),
                handover=handover,
                sign_key=sign_key,
            )
    run = result.run
    assert run.report is not None
    _finish(run.report, run.report_paths)
    if run.manifest is not None and handover is not None:
        signed = " --trust ALLOWED_SIGNERS" if sign_key is not None else ""
        what = "signed hand-over folder" if sign_key is not None else "hand-over folder"
        console.print(f"[green]✓[/] {what} {handover} (replay: orch verify {handover}{signed})")
    return run.report


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
@builder_option
@click.option(
    "--handover",
    "handover_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Also write a hand-over folder here when the report passed.",
)
@sign_option
@gpus_option
@no_preflight_option
@dry_run_option
def rebuild(
    dossier: Path,
    out: Path,
    variant: str | None,
    ca_bundle: Path | None,
    no_cache: bool,
    network: str | None,
    builder: str | None,
    handover_dir: Path | None,
    sign_key: Path | None,
    gpus: str | None,
    no_preflight: bool,
    dry_run: bool,
) -> None:
    """The whole sequence in one command: build the image, probe it, write the report (and the hand-over).

    Before any pull or build: the dossier's fingerprints and whether this host can run its GPU stages
    (`orch doctor`'s verdict), in seconds; --no-preflight skips both."""
    from orchestrator.dossier.load import load_dossier

    loaded = load_dossier(dossier, variant=variant, check_fingerprints=not no_preflight and not dry_run)
    if sign_key is not None:
        from orchestrator.attest.keys import load_signer
        from orchestrator.errors import BadInput

        if handover_dir is None:
            raise BadInput("--sign signs a hand-over: give --handover DIR too")
        # Before the build: a key that cannot sign stops here, not after minutes of building.
        load_signer(sign_key, os.environ.get("SSH_AUTH_SOCK"))
    if dry_run:
        from orchestrator.pipeline.dry_run import dry_run_rebuild
        from orchestrator.plan.builder import requested_builder
        from orchestrator.stages.build import BuildOptions, ca_bundle_from_environment

        options = BuildOptions(
            out=out,
            ca_bundle=ca_bundle or ca_bundle_from_environment(),
            no_cache=no_cache,
            network=network,  # type: ignore[arg-type]  # click.Choice guarantees the literal
            builder=requested_builder(builder, os.environ),
        )
        text = dry_run_rebuild(loaded, options, environ=os.environ, handover=handover_dir, sign_key=sign_key, gpus=gpus)
        click.echo(text, nl=False)
        return
    rebuild_and_report(
        loaded,
        out,
        ca_bundle=ca_bundle,
        no_cache=no_cache,
        network=network,
        gpus=gpus,
        handover=handover_dir,
        builder=builder,
        preflight=not no_preflight,
        sign_key=sign_key,
    )


@click.command()
@click.argument("dossier", required=False, type=click.Path(path_type=Path))
@variant_option
@click.option("--json", "as_json", is_flag=True, help="Print the host facts as JSON.")
@gpus_option
@click.option(
    "--capture",
    "capture_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Also write every raw output orch reads on this host into this (empty) folder, to send or to read "
    "back with --from; nothing secret is captured.",
)
@click.option(
    "--from",
    "from_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Diagnose a captured host (a folder written by --capture) instead of this one.",
)
def doctor(
    dossier: Path | None,
    variant: str | None,
    as_json: bool,
    gpus: str | None,
    capture_dir: Path | None,
    from_dir: Path | None,
) -> None:
    """Diagnose this host: GPU driver, the daemon's GPU support, and whether it can run a dossier's image on its GPU."""
    from orchestrator.cli.console import make_console
    from orchestrator.cli.summary import print_doctor
    from orchestrator.dossier.load import load_dossier
    from orchestrator.engine import connect
    from orchestrator.errors import BadInput, VerdictFailed
    from orchestrator.host.capture import facts_from_capture, read_capture, write_capture
    from orchestrator.pipeline.doctor import capture_explanations, diagnose

    if capture_dir is not None and from_dir is not None:
        raise BadInput("--capture and --from: choose one (capture this host, or read a capture)")
    loaded = load_dossier(dossier, variant=variant) if dossier else None
    if from_dir is not None:
        capture = read_capture(from_dir)
        facts = facts_from_capture(capture)
        diagnosis = diagnose(None, loaded, host_facts=lambda _info: facts, gpus=gpus, environ=capture.env)
        diagnosis = diagnosis.model_copy(update={"explanations": capture_explanations(capture)})
    else:
        if capture_dir is not None:
            manifest = write_capture(capture_dir)
            click.echo(
                f"wrote the host capture {capture_dir}: {len(manifest['commands'])} commands, "
                f"{len(manifest['files'])} files (read it anywhere: orch doctor --from {capture_dir})",
                err=True,
            )
        with connect() as engine:
            diagnosis = diagnose(engine, loaded, gpus=gpus, environ=dict(os.environ))
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

    from orchestrator.host.collect import collect_host_facts
    from orchestrator.pipeline.host_mode import host_mode_report

    interpreter = python or shutil.which("python3") or "python3"
    report = host_mode_report(
        platform,  # type: ignore[arg-type]  # click.Choice keeps it to the Literal's values
        backend_version,
        interpreter,
        host_facts=lambda: collect_host_facts(None),
        run=subprocess.run,
    )
    from orchestrator.report.write import write_report

    _finish(report, write_report(report, out))
