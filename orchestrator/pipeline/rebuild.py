"""`orch rebuild`: observe, plan the build and the probe as one program, execute it on one engine.

The engine and the clock come in as arguments: a unit test runs the whole program on the fake engine
(engine/fake.py) with a fixed clock. The caller is told what happens through `RebuildHooks` (the CLI
draws its progress from them). The program writes every document once — build.json, the report, the
hand-over — and nothing is read back: each step takes the earlier steps' results in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine
from orchestrator.model.host import HostFacts
from orchestrator.model.report import Report
from orchestrator.plan.program import Program, rebuild_program
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.execute import build_facts, execute, start_build
from orchestrator.stages.observe import observe_host
from orchestrator.stages.probe import assemble_report
from orchestrator.stages.state import Clock, Hooks, Run, utc_now

#: The rebuild's hooks are the executor's (each build line and step, the record once written, each probe stage).
RebuildHooks = Hooks


@dataclass(frozen=True)
class RebuildResult:
    run: Run
    program: Program


def rebuild_run(
    loaded: LoadedDossier,
    engine: Engine,
    options: BuildOptions,
    *,
    hooks: Hooks | None = None,
    clock: Clock = utc_now,
    host_facts: Callable[[], HostFacts] | None = None,
    gpus: str | None = None,
    environ: Mapping[str, str] | None = None,
    handover: Path | None = None,
    sign_key: Path | None = None,
) -> RebuildResult:
    """The whole program; its run holds the record, the report, the report's paths and the hand-over's manifest."""
    run, planned, facts = start_build(loaded, engine, options, hooks or Hooks(), clock)
    # The host is observed before the build: the GPU mapping is planned (and a bad --gpus refused) up front.
    probe = observe_host(loaded, engine, host_facts, gpus, environ or {}, image_ref=planned.tag, image_id=None)
    run.host, run.environ = probe.host, dict(environ or {})

    def plan(done: Run) -> Program:
        return rebuild_program(loaded, build_facts(facts, done), probe, planned, handover=handover, sign_key=sign_key)

    program = plan(run)
    execute(program, run, command="rebuild", replan=plan)
    return RebuildResult(run=run, program=program)


def rebuild(
    loaded: LoadedDossier,
    engine: Engine,
    options: BuildOptions,
    *,
    hooks: Hooks | None = None,
    clock: Clock = utc_now,
    host_facts: Callable[[], HostFacts] | None = None,
    gpus: str | None = None,
    environ: Mapping[str, str] | None = None,
    handover: Path | None = None,
) -> Report:
    """Build, then probe the image just built; a failed build is a report whose image stage carries it.

    `gpus` and `environ`: the GPU selection (`--gpus`) and the environment holding a scheduler's allocation.
    `host_facts` reads this machine's GPU facts (default: collected from the host and the engine).
    """
    result = rebuild_run(
        loaded,
        engine,
        options,
        hooks=hooks,
        clock=clock,
        host_facts=host_facts,
        gpus=gpus,
        environ=environ,
        handover=handover,
    )
    return result.run.report or assemble_report(result.run)
