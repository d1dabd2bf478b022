"""`orch rebuild`: build the image, then probe it (or report the failed build), as one plain function.

The engine and the clock come in as arguments: a unit test runs the whole sequence on the fake engine
(engine/fake.py) with a fixed clock. The caller is told what happens through `RebuildHooks` (the CLI
draws its progress from them) and writes the report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.host import HostFacts
from orchestrator.model.report import Report
from orchestrator.stages.build import BuildOptions, run_build
from orchestrator.stages.probe import Clock, ProbeOptions, run_probe, stages_after_failed_build, utc_now


def _ignore(_: object) -> None:
    return None


@dataclass(frozen=True)
class RebuildHooks:
    #: Each build log line, as it comes.
    on_line: Callable[[str], None] = _ignore
    #: Each build stage ("base image", "render", "build", "inventory").
    on_build_stage: Callable[[str], None] = _ignore
    #: The build is over (passed or failed); the probe starts next when it made an image.
    on_built: Callable[[BuildRecord], None] = _ignore
    #: Each probe stage ("image", "host", "device", "sample").
    on_probe_stage: Callable[[str], None] = _ignore


def rebuild(
    loaded: LoadedDossier,
    engine: Engine,
    options: BuildOptions,
    *,
    hooks: RebuildHooks | None = None,
    clock: Clock = utc_now,
    host_facts: Callable[[], HostFacts] | None = None,
    gpus: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Report:
    """Build, then probe the image just built; a failed build is a report whose image stage carries it.

    `gpus` and `environ`: the GPU selection (`--gpus`) and the environment holding a scheduler's allocation.

    `host_facts` reads this machine's GPU facts (default: collected from the host and the engine).
    """
    hooks = hooks or RebuildHooks()
    record = run_build(loaded, engine, options, on_line=hooks.on_line, on_stage=hooks.on_build_stage, clock=clock)
    hooks.on_built(record)
    if record.image is None:
        return stages_after_failed_build(loaded, record, clock=clock)
    return run_probe(
        loaded,
        engine,
        ProbeOptions(
            out=options.out,
            image=record.image.tag,
            built_in_this_run=True,
            gpus=gpus,
            environ=dict(environ or {}),
        ),
        on_stage=hooks.on_probe_stage,
        clock=clock,
        host_facts=host_facts,
    )
