"""The execute phase: one loop over a program's steps, one small handler per step type.

`run_build` and `run_probe` are `orch build` and `orch probe` as three phases: observe (stages/observe.py),
plan (plan/program.py, pure), execute (here). What each step did is recorded in `steps.json`
(model/steps.py), written once when the program ends — also when a step raised, so the record shows where.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine
from orchestrator.fsutil import atomic_write_text
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.host import HostFacts
from orchestrator.model.report import Report
from orchestrator.model.steps import STEPS_FILE, ExecutedStep, StepsDocument
from orchestrator.plan.build import default_tag
from orchestrator.plan.program import (
    BuildFacts,
    BuildImage,
    BuildOptionsPlan,
    DeviceStage,
    EnsureBase,
    EnsureWheels,
    FetchSources,
    HandOver,
    HostStage,
    ImageChecks,
    ImageStage,
    InventoryProbe,
    Program,
    RenderContext,
    SampleStage,
    Step,
    WriteBuildRecord,
    WriteReport,
    build_program,
    names,
    probe_program,
)
from orchestrator.stages import build as build_steps
from orchestrator.stages import probe as probe_steps
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.fetch_sources import do_fetch_sources
from orchestrator.stages.handover import do_handover
from orchestrator.stages.observe import observe_build, observe_probe, with_base
from orchestrator.stages.probe import ProbeOptions, assemble_report, variant_notes
from orchestrator.stages.state import Clock, Hooks, Run, StepOutcome, utc_now
from orchestrator.stages.wheels_image import do_wheels
from orchestrator.timestamps import rfc3339

Handler = Callable[[Any, Run], StepOutcome]

#: Each step type and the one function that does its work.
HANDLERS: Mapping[type[Step], Handler] = {
    FetchSources: do_fetch_sources,
    EnsureBase: build_steps.do_ensure_base,
    RenderContext: build_steps.do_render,
    EnsureWheels: do_wheels,
    BuildImage: build_steps.do_build,
    InventoryProbe: build_steps.do_inventory,
    ImageChecks: build_steps.do_image_checks,
    WriteBuildRecord: build_steps.do_write_build_record,
    ImageStage: probe_steps.do_image_stage,
    HostStage: probe_steps.do_host_stage,
    DeviceStage: probe_steps.do_device_stage,
    SampleStage: probe_steps.do_sample_stage,
    WriteReport: probe_steps.do_write_report,
    HandOver: do_handover,
}


def execute(
    program: Program, run: Run, *, command: str, replan: Callable[[Run], Program] | None = None
) -> StepsDocument:
    """Run every step in order; write `steps.json` into the run's folder when the program ends.

    `replan`: after step `base` pulled a base the observe phase did not find, the program is planned again
    with its id (the labels name it). The steps must be the same ones: the plan printed stays the plan run.
    """
    planned = names(program)
    steps = list(program)
    executed: list[ExecutedStep] = []
    try:
        for index in range(len(steps)):
            step = steps[index]
            mark = time.monotonic()
            try:
                outcome = HANDLERS[type(step)](step, run)
            except BaseException as error:
                probe_steps.stop_alongside(run)  # a sample started beside the device probe goes too
                seconds = round(time.monotonic() - mark, 3)
                executed.append(
                    ExecutedStep(name=step.name, status="failed", seconds=seconds, note=type(error).__name__)
                )
                raise
            executed.append(
                ExecutedStep(
                    name=step.name, status=outcome.status, seconds=round(time.monotonic() - mark, 3), note=outcome.note
                )
            )
            if isinstance(step, EnsureBase) and not step.present and replan is not None:
                again = list(replan(run))
                if names(tuple(again)) != planned:  # pragma: no cover - a planning bug, not a user's input
                    raise AssertionError(f"the program changed when planned again: {names(tuple(again))}")
                steps[index + 1 :] = again[index + 1 :]
    finally:
        left = [
            ExecutedStep(name=step.name, status="skipped", seconds=0.0, note="an earlier step stopped the program")
            for step in steps[len(executed) :]
        ]
        document = StepsDocument(command=command, planned=planned, executed=[*executed, *left])
        atomic_write_text(run.out / STEPS_FILE, document.model_dump_json(indent=2) + "\n")
    return document


def plan_options(loaded: LoadedDossier, options: BuildOptions, engine: Engine) -> BuildOptionsPlan:
    return BuildOptionsPlan(
        out=options.out.resolve(),
        tag=options.tag or default_tag(loaded, engine.settings.tag_namespace),
        network=options.network,
        no_cache=options.no_cache,
        ca_bundle=options.ca_bundle,
        builder=options.builder,
        tag_namespace=engine.settings.tag_namespace,
    )


def start_build(
    loaded: LoadedDossier, engine: Engine, options: BuildOptions, hooks: Hooks, clock: Clock
) -> tuple[Run, BuildOptionsPlan, BuildFacts]:
    """Observe a build: the run's state, the plan's options and the facts the program is planned from."""
    planned = plan_options(loaded, options, engine)
    planned.out.mkdir(parents=True, exist_ok=True)
    facts, state, base, previous = observe_build(loaded, engine, planned.tag, rfc3339(clock()))
    run = Run(
        loaded=loaded,
        engine=engine,
        out=planned.out,
        hooks=hooks,
        clock=clock,
        wheel_cache=options.wheel_cache,
        code_state=state,
        code=facts.code,
        base=base,
        previous=previous,
        notes=variant_notes(loaded),
    )
    return run, planned, facts


def build_facts(facts: BuildFacts, run: Run) -> BuildFacts:
    """The observed facts, with the base step `base` pulled when the observe phase found none."""
    return with_base(facts, run.base) if run.base is not None else facts


def run_build(
    loaded: LoadedDossier,
    engine: Engine,
    options: BuildOptions,
    *,
    on_line: Callable[[str], None] | None = None,
    on_stage: Callable[[str], None] | None = None,
    clock: Clock = utc_now,
) -> BuildRecord:
    """`orch build`: observe, plan (`build_program`), execute; build.json's record."""
    hooks = Hooks(on_line=on_line or Hooks.on_line, on_build_stage=on_stage or Hooks.on_build_stage)
    run, planned, facts = start_build(loaded, engine, options, hooks, clock)

    def program(done: Run) -> Program:
        return build_program(loaded, build_facts(facts, done), planned)

    execute(program(run), run, command="build", replan=program)
    assert run.record is not None
    return run.record


def run_probe(
    loaded: LoadedDossier,
    engine: Engine,
    options: ProbeOptions,
    *,
    host_facts: Callable[[], HostFacts] | None = None,
    on_stage: Callable[[str], None] | None = None,
    clock: Clock = utc_now,
    write_report: bool = False,
) -> Report:
    """`orch probe` (and `orch verify`'s replay): observe the image and the host, plan, execute.

    `write_report`: the report's files are the program's last step (the CLI); otherwise the caller writes them.
    """
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    tag = default_tag(loaded, engine.settings.tag_namespace)
    facts, image = observe_probe(loaded, engine, options.image, host_facts, options.gpus, options.environ, tag)
    run = Run(
        loaded=loaded,
        engine=engine,
        out=out,
        hooks=Hooks(on_probe_stage=on_stage or Hooks.on_probe_stage),
        clock=clock,
        image=image,
        image_ref=options.image or tag,
        host=facts.host,
        environ=options.environ,
        stop_after_failure=options.stop_after_failure,
        notes=variant_notes(loaded),
    )
    program = probe_program(
        loaded, out, facts, write_report=write_report, stop_after_failure=options.stop_after_failure
    )
    execute(program, run, command="probe")
    return run.report or assemble_report(run)
