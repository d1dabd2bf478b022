"""`orch probe`: the four layers of a rebuilt image, each checked and reported on its own.

- image: what the image contains (build.json of `orch build`, or the inventory probe run now);
- host: the GPU driver and the daemon's GPU support, and — before any GPU container starts — whether
  the host driver can run the image's CUDA/ROCm, explained in words;
- device: what torch sees inside the container with the host GPU mapped in, and a real computation;
- sample: fingerprints verified, determinism applied, the sample command run with inputs read-only,
  then the host re-reads the outputs and compares them with the reference.

No silent CPU fallback: a dossier that expects a GPU fails at `device` when none is visible, and the
sample is `not_run`, citing it. Only a declared variant (`--variant cpu`) runs on the CPU, and the
report says so. Every container is labelled and removed, also on failure, timeout and Ctrl-C.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from orchestrator import __version__
from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine
from orchestrator.errors import BadInput
from orchestrator.host.collect import collect_host_facts
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
from orchestrator.plan.build import default_tag
from orchestrator.plan.gpu_select import GpuSelection, GpuSelectionError, select_gpus
from orchestrator.plan.run import make_run_plan
from orchestrator.stages.device_stage import device_stage
from orchestrator.stages.host_stage import host_stage
from orchestrator.stages.image_stage import image_stage, resolve_image
from orchestrator.stages.results import not_run
from orchestrator.stages.sample_stage import sample_stage
from orchestrator.timestamps import rfc3339


@dataclass(frozen=True)
class ProbeOptions:
    out: Path
    image: str | None = None
    #: `orch rebuild`: the image was built moments ago in the same run, so its build is the image stage's work.
    built_in_this_run: bool = False
    #: `orch verify`: a failed stage stops every stage after it (a replay proves nothing past its first failure).
    stop_after_failure: bool = False
    #: `--gpus`: which GPUs containers get (all, N, device=0,2, GPU-/MIG- UUID); None: the scheduler's allocation
    #: in `environ` (CUDA_VISIBLE_DEVICES, SLURM_JOB_GPUS, ROCR_VISIBLE_DEVICES …), else all.
    gpus: str | None = None
    environ: Mapping[str, str] = field(default_factory=dict)


Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


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
    try:
        return select_gpus(gpus, host, environ, vendor="amd" if platform == "rocm" else "nvidia")
    except GpuSelectionError as error:
        raise BadInput(str(error)) from error


def run_probe(
    loaded: LoadedDossier,
    engine: Engine,
    options: ProbeOptions,
    *,
    host_facts: Callable[[], HostFacts] | None = None,
    on_stage: Callable[[str], None] | None = None,
    clock: Clock = utc_now,
) -> Report:
    stage = on_stage or (lambda _: None)
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    image = resolve_image(engine, loaded, options.image)
    model = loaded.model
    notes: list[str] = []
    if loaded.variant:
        declared = loaded.reference_model.variant(loaded.variant)
        note = f"variant {loaded.variant!r}, declared in the dossier: {' '.join(declared.description.split())}"
        reference_platform = loaded.reference_model.system.platform
        if model.system.platform != reference_platform:
            note += f" It runs on {model.system.platform}, not the reference's {reference_platform}."
        notes.append(note)

    stage("image")
    image_result, inventory = image_stage(engine, loaded, image, out, built_in_this_run=options.built_in_this_run)
    host_result = device_result = sample_result = None
    if options.stop_after_failure and image_result.status == "failed":
        reason = "image stage failed: the stages after it are not run"
        host_result, device_result, sample_result = (not_run(n, reason) for n in ("host", "device", "sample"))
    if host_result is None:
        stage("host")
        host = host_facts() if host_facts else collect_host_facts(engine.info())
        selection = gpu_selection(loaded.model.system.platform, host, options.gpus, options.environ)
        host_result, verdict, mapping = host_stage(loaded, host, image, inventory, selection)
        # Every container from here on is decided now, from the host's facts: the plan `--dry-run` prints.
        run_plan = make_run_plan(loaded, image.id, mapping, out)
        if options.stop_after_failure and host_result.status == "failed":
            reason = "host stage failed: the stages after it are not run"
            device_result, sample_result = not_run("device", reason), not_run("sample", reason)
    if device_result is None:
        stage("device")
        extensions = inventory.extensions if inventory is not None else None
        compiled = {artefact.name: artefact.compiled_archs for artefact in (extensions.artefacts if extensions else [])}
        device_result = device_stage(engine, loaded, run_plan, verdict, compiled)
    if sample_result is None and device_result.status == "failed":
        assert device_result.first_error is not None
        sample_result = not_run(
            "sample", f"device stage failed ({device_result.first_error.step}): no silent CPU fallback"
        )
    if sample_result is None:
        stage("sample")
        sample_result = sample_stage(engine, loaded, run_plan)

    stages: dict[StageName, StageResult] = {
        "image": image_result,
        "host": host_result,
        "device": device_result,
        "sample": sample_result,
    }
    image_ref = ReportImage(ref=options.image or default_tag(loaded, engine.settings.tag_namespace), id=image.id)
    return make_report(loaded, image_ref, stages, notes, created=clock())


def stages_after_failed_build(loaded: LoadedDossier, record: BuildRecord, *, clock: Clock = utc_now) -> Report:
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
    stages: dict[StageName, StageResult] = {
        "image": image,
        "host": not_run("host", reason),
        "device": not_run("device", reason),
        "sample": not_run("sample", reason),
    }
    return make_report(loaded, None, stages, [], created=clock())
