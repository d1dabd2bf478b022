"""`orch probe`'s steps: the four layers of a rebuilt image, each checked and reported on its own.

- image: what the image contains (build.json of `orch build`, or the inventory probe run now; after a
  build in the same program, the build's own result in memory);
- host: the GPU driver and the daemon's GPU support, and — before any GPU container starts — whether
  the host driver can run the image's CUDA/ROCm, explained in words;
- device: what torch sees inside the container with the host GPU mapped in, and a real computation;
- sample: fingerprints verified, determinism applied, the sample command run with inputs read-only,
  then the host re-reads the outputs and compares them with the reference.

Each `do_*` function is the handler of one step type of plan/program.py (stages/execute.py runs them).
No silent CPU fallback: a dossier that expects a GPU fails at `device` when none is visible, and the
sample is `not_run`, citing it. Only a declared variant (`--variant cpu`) runs on the CPU, and the
report says so. Every container is labelled and removed, also on failure, timeout and Ctrl-C.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from orchestrator import __version__
from orchestrator.dossier.load import LoadedDossier
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.host import HostFacts
from orchestrator.model.platform import Platform
from orchestrator.model.report import (
    Report,
    ReportDossier,
    ReportImage,
    StageError,
    StageName,
    StageResult,
    overall_verdict,
)
from orchestrator.plan.gpu_select import GpuSelection, select_gpus
from orchestrator.plan.program import DeviceStage, HostStage, ImageStage, SampleStage, WriteReport
from orchestrator.plan.run import RunPlan
from orchestrator.report.write import write_report
from orchestrator.stages import alongside
from orchestrator.stages.device_stage import device_stage
from orchestrator.stages.host_stage import host_stage
from orchestrator.stages.image_stage import image_stage
from orchestrator.stages.results import not_run
from orchestrator.stages.sample_stage import sample_stage
from orchestrator.stages.state import DONE, Clock, Run, StepOutcome, utc_now
from orchestrator.timestamps import rfc3339

__all__ = ["Clock", "ProbeOptions", "utc_now"]


@dataclass(frozen=True)
class ProbeOptions:
    out: Path
    image: str | None = None
    #: `orch verify`: a failed stage stops every stage after it (a replay proves nothing past its first failure).
    stop_after_failure: bool = False
    #: `--gpus`: which GPUs containers get (all, N, device=0,2, GPU-/MIG- UUID); None: the scheduler's allocation
    #: in `environ` (CUDA_VISIBLE_DEVICES, SLURM_JOB_GPUS, ROCR_VISIBLE_DEVICES …), else all.
    gpus: str | None = None
    environ: Mapping[str, str] = field(default_factory=dict)


def make_report(
    loaded: LoadedDossier,
    image: ReportImage | None,
    stages: dict[StageName, StageResult],
    notes: list[str],
    *,
    created: datetime,
) -> Report:
    model = loaded.model
    return Report(
        orch_version=__version__,
        created=rfc3339(created),
        dossier=ReportDossier(
            name=model.name,
            path=str(loaded.path),
            identity=loaded.identity,
            variant=loaded.variant,
            platform=model.system.platform,
            backend_version=model.system.version,
        ),
        image=image,
        verdict=overall_verdict(stages),
        stages=stages,
        notes=notes,
    )


# -- the whole probe -----------------------------------------------------------------------------------


def gpu_selection(
    platform: Platform, host: HostFacts, gpus: str | None, environ: Mapping[str, str]
) -> GpuSelection | None:
    """The GPUs this run maps (plan/gpu_select.py); None on the CPU platform. A `--gpus` this host cannot
    satisfy is the user's input to fix (exit 2), said before anything starts."""
    if platform == "cpu":
        return None
    # A GpuSelectionError is BadInput (exit 2): the user's --gpus, said before anything starts.
    return select_gpus(gpus, host, environ, vendor="amd" if platform == "rocm" else "nvidia")


# -- the probe's step handlers (stages/execute.py runs them in the program's order) ---------------------------


def _with_image(run_plan: RunPlan, image_id: str) -> RunPlan:
    """The plan's containers, on the image this run looks at (a rebuild's image is known once it is built)."""
    return replace(
        run_plan,
        image=image_id,
        inventory=replace(run_plan.inventory, image=image_id),
        device=replace(run_plan.device, image=image_id),
        sample=replace(run_plan.sample, image=image_id),
    )


def _stopped(run: Run, name: StageName) -> bool:
    """`orch verify`: a failed stage stops every stage after it (a replay proves nothing past it)."""
    if name in run.stages:
        return True  # already decided (a failed build decides all four)
    if not run.stop_after_failure:
        return False
    failed = next((stage for stage in run.stages.values() if stage.status == "failed"), None)
    if failed is None:
        return False
    run.stages[name] = not_run(name, f"{failed.name} stage failed: the stages after it are not run")
    return True


def do_image_stage(step: ImageStage, run: Run) -> StepOutcome:
    if step.after_build and (run.record is None or run.record.image is None or run.image is None):
        assert run.record is not None
        run.stages.update(failed_build_stages(run.record))
        return StepOutcome("skipped", "the build failed: its failure is the image stage's")
    assert run.image is not None
    run.hooks.on_probe_stage("image")
    result, inventory = image_stage(
        run.engine, run.loaded, run.image, run.out, built_in_this_run=step.after_build, record=run.record
    )
    run.stages["image"] = result
    run.inventory = inventory
    return DONE if result.status == "passed" else StepOutcome("failed", _first_error(result))


def do_host_stage(step: HostStage, run: Run) -> StepOutcome:
    if _stopped(run, "host"):
        return StepOutcome("skipped", run.stages["host"].reason)
    assert run.image is not None and run.host is not None
    run.hooks.on_probe_stage("host")
    result, run.verdict, _ = host_stage(run.loaded, run.host, run.image, run.inventory, step.selection)
    run.stages["host"] = result
    return DONE if result.status == "passed" else StepOutcome("failed", _first_error(result))


def do_device_stage(step: DeviceStage, run: Run) -> StepOutcome:
    if _stopped(run, "device"):
        return StepOutcome("skipped", run.stages["device"].reason)
    assert run.image is not None and run.verdict is not None
    run.hooks.on_probe_stage("device")
    extensions = run.inventory.extensions if run.inventory is not None else None
    compiled = {artefact.name: artefact.compiled_archs for artefact in (extensions.artefacts if extensions else [])}
    plan = _with_image(step.run, run.image.id)
    if step.sample_alongside:
        run.alongside = alongside.start_alongside(run.engine, run.loaded, plan)
    result = device_stage(run.engine, run.loaded, plan, run.verdict, compiled)
    run.stages["device"] = result
    return DONE if result.status == "passed" else StepOutcome("failed", _first_error(result))


def do_sample_stage(step: SampleStage, run: Run) -> StepOutcome:
    if _stopped(run, "sample"):
        stop_alongside(run)
        return StepOutcome("skipped", run.stages["sample"].reason)
    device = run.stages["device"]
    if device.status == "failed":
        assert device.first_error is not None
        reason = f"device stage failed ({device.first_error.step}): no silent CPU fallback"
        if run.alongside is not None:
            stop_alongside(run)
            # What it wrote before it was stopped is no result: the folder is emptied, not left to be mistaken.
            shutil.rmtree(step.run.folders.output, ignore_errors=True)
            reason += "; the sample's container, started with the device probe's, was stopped and its outputs removed"
        run.stages["sample"] = not_run("sample", reason)
        return StepOutcome("skipped", reason)
    assert run.image is not None
    run.hooks.on_probe_stage("sample")
    plan = _with_image(step.run, run.image.id)
    # Kept on the run while waited for: an interrupted wait stops the container (stop_alongside).
    started = run.alongside
    result = started.future.result() if started is not None else sample_stage(run.engine, run.loaded, plan)
    run.alongside = None
    run.stages["sample"] = result
    return DONE if result.status == "passed" else StepOutcome("failed", _first_error(result))


def stop_alongside(run: Run) -> None:
    """A program stopped early (an error, Ctrl-C) stops the sample it started with the device probe."""
    if run.alongside is not None:
        started, run.alongside = run.alongside, None
        alongside.stop(run.engine, started)


def do_write_report(step: WriteReport, run: Run) -> StepOutcome:
    """report.json and its renderings: the one writer of the report, once."""
    run.report = assemble_report(run)
    run.report_paths = write_report(run.report, step.folder)
    return DONE


def _first_error(result: StageResult) -> str | None:
    return result.first_error.message if result.first_error else result.reason


def assemble_report(run: Run) -> Report:
    """The report of this run's four stages (the image's reference: the tag it was asked or built under)."""
    loaded = run.loaded
    image = (
        ReportImage(ref=run.image_ref, id=run.image.id)
        if run.image and run.image_ref and "image" in run.stages
        else None
    )
    if run.record is not None and run.record.image is None:
        image = None  # a failed build: there is no image to name
    stages: dict[StageName, StageResult] = {name: run.stages[name] for name in ("image", "host", "device", "sample")}
    return make_report(loaded, image, stages, run.notes, created=run.clock())


def variant_notes(loaded: LoadedDossier) -> list[str]:
    """A declared variant runs as the report says: which one, and on which platform."""
    if not loaded.variant:
        return []
    declared = loaded.reference_model.variant(loaded.variant)
    note = f"variant {loaded.variant!r}, declared in the dossier: {' '.join(declared.description.split())}"
    reference_platform = loaded.reference_model.system.platform
    if loaded.model.system.platform != reference_platform:
        note += f" It runs on {loaded.model.system.platform}, not the reference's {reference_platform}."
    return [note]


def failed_build_stages(record: BuildRecord) -> dict[StageName, StageResult]:
    """`orch rebuild` when the build failed: the image stage carries the failure, the others are not run."""
    assert record.failure is not None
    image = StageResult(
        name="image",
        status="failed",
        facts={"build_log": "build.log", "cache": record.cache.model_dump()},
        checks=record.checks,
        duration_s=record.durations_s.get("total", 0.0),
        first_error=StageError(step=record.failure.step or "build", message=record.failure.first_error),
    )
    reason = "image stage failed: there is no image to probe"
    return {
        "image": image,
        "host": not_run("host", reason),
        "device": not_run("device", reason),
        "sample": not_run("sample", reason),
    }
