"""`--dry-run` of `orch build`, `orch probe` and `orch rebuild`: the whole plan, with no engine.

Everything host-dependent comes in as an argument (the code's state, the host's GPU facts, the engine
labels from `ORCH_LABELS`), so the same dossier and the same arguments give the same plan anywhere.
Values known only once the engine has answered are placeholders that say where they come from.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.dossier.load import LoadedDossier
from orchestrator.model.build_record import CodeRef
from orchestrator.model.host import HostFacts
from orchestrator.plan.build import BuildSteps, default_tag, make_build_steps
from orchestrator.plan.describe import BUILD_STEP, BUILT_IMAGE, PlannedCall, build_calls, probe_calls, render_calls
from orchestrator.plan.run import make_run_plan, plan_gpu_mapping
from orchestrator.plan.specs import Network
from orchestrator.stages.build import BuildOptions

CREATED = "<kept from an earlier image of this identity under this tag, else the build's start time>"
BASE_ID = "<id of the base image, step 1>"
BASE_DIGEST = "<repo digest of the base image, step 1, when it has one>"


def planned_build(
    loaded: LoadedDossier,
    out: Path,
    *,
    code: CodeRef,
    engine_labels: Mapping[str, str],
    tag: str | None = None,
    network: Network | None = None,
    no_cache: bool = False,
    ca_bundle: Path | None = None,
) -> BuildSteps:
    return make_build_steps(
        loaded,
        out=out,
        code=code,
        created=CREATED,
        base_id=BASE_ID,
        base_repo_digests=() if loaded.base_image.digest else (BASE_DIGEST,),
        engine_labels=engine_labels,
        tag=tag,
        network=network,
        no_cache=no_cache,
        ca_bundle=ca_bundle,
        built_image=BUILT_IMAGE,
    )


def build_plan(loaded: LoadedDossier, steps: BuildSteps, engine_labels: Mapping[str, str]) -> list[PlannedCall]:
    return [
        *build_calls(loaded, steps, engine_labels),
        PlannedCall(
            "write build.json, build.log and pip-freeze.txt",
            (("folder", str(steps.context_dir.parent)),),
            engine=False,
        ),
    ]


def probe_plan(
    loaded: LoadedDossier,
    out: Path,
    host: HostFacts,
    engine_labels: Mapping[str, str],
    *,
    image: str | None = None,
    built: BuildSteps | None = None,
    tag_namespace: str = "orch",
    gpus: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[PlannedCall]:
    """The probe's calls; after `built` (rebuild), the image is the one its build step makes.

    The GPUs are chosen as the probe chooses them (`--gpus`, else a scheduler's allocation in `environ`).
    """
    from orchestrator.stages.probe import gpu_selection

    ref = built.tag if built is not None else image or default_tag(loaded, tag_namespace)
    platform = loaded.model.system.platform
    mapping = plan_gpu_mapping(platform, host, gpu_selection(platform, host, gpus, environ or {}))
    run = make_run_plan(loaded, BUILT_IMAGE if built is not None else ref, mapping, out)
    # A dry run asks no engine: say so where the mapping depends on the daemon's runtimes.
    notes = [] if host.docker is not None else ["the daemon's GPU support is not known without an engine"]
    calls = probe_calls(loaded, ref, run, engine_labels, after_build=built is not None, host_notes=notes)
    calls.append(
        PlannedCall("write report.json, report.md, report.html and junit.xml", (("folder", str(out)),), engine=False)
    )
    return calls


def rebuild_plan(
    loaded: LoadedDossier,
    steps: BuildSteps,
    host: HostFacts,
    engine_labels: Mapping[str, str],
    *,
    handover: Path | None = None,
    gpus: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[PlannedCall]:
    out = steps.context_dir.parent
    calls = [
        *build_plan(loaded, steps, engine_labels),
        *probe_plan(loaded, out, host, engine_labels, built=steps, gpus=gpus, environ=environ),
    ]
    assert calls[BUILD_STEP - 1].title.startswith("build image"), "BUILD_STEP must name the build's step"
    if handover is not None:
        calls.append(
            PlannedCall(
                f"save image {steps.tag} into the hand-over folder (only when the report passed)",
                (
                    ("folder", str(handover)),
                    (
                        "files",
                        "image.tar.gz, dossier/, build/, report/, PROCEDURE.md, ACCESS.md, manifest.json, SHA256SUMS",
                    ),
                ),
            )
        )
    return calls


# -- the commands' dry runs: this host's facts gathered, then the pure plan above ---------------------------


def _engine_labels(environ: Mapping[str, str]) -> dict[str, str]:
    from orchestrator.engine.labels import extra_labels_from_environment

    return extra_labels_from_environment(environ)


def _tag_namespace(environ: Mapping[str, str]) -> str:
    from orchestrator.engine.labels import tag_namespace_from_environment

    return tag_namespace_from_environment(environ)


def _steps(loaded: LoadedDossier, options: BuildOptions, environ: Mapping[str, str]) -> BuildSteps:
    from orchestrator.stages.build import code_ref
    from orchestrator.stages.code_source import inspect_code

    return planned_build(
        loaded,
        options.out.resolve(),
        code=code_ref(inspect_code(loaded)),
        engine_labels=_engine_labels(environ),
        tag=options.tag or default_tag(loaded, _tag_namespace(environ)),
        network=options.network,
        no_cache=options.no_cache,
        ca_bundle=options.ca_bundle,
    )


def _host(host: HostFacts | None) -> HostFacts:
    from orchestrator.host.collect import collect_host_facts

    # No engine to ask about its runtimes: the daemon's GPU support shows as unknown in the mapping.
    return host if host is not None else collect_host_facts(None)


def dry_run_build(loaded: LoadedDossier, options: BuildOptions, *, environ: Mapping[str, str]) -> str:
    return render_calls(build_plan(loaded, _steps(loaded, options, environ), _engine_labels(environ)))


def dry_run_probe(
    loaded: LoadedDossier,
    out: Path,
    image: str | None,
    *,
    environ: Mapping[str, str],
    host: HostFacts | None = None,
    gpus: str | None = None,
) -> str:
    return render_calls(
        probe_plan(
            loaded,
            out.resolve(),
            _host(host),
            _engine_labels(environ),
            image=image,
            tag_namespace=_tag_namespace(environ),
            gpus=gpus,
            environ=environ,
        )
    )


def dry_run_rebuild(
    loaded: LoadedDossier,
    options: BuildOptions,
    *,
    environ: Mapping[str, str],
    handover: Path | None = None,
    host: HostFacts | None = None,
    gpus: str | None = None,
) -> str:
    steps = _steps(loaded, options, environ)
    return render_calls(
        rebuild_plan(loaded, steps, _host(host), _engine_labels(environ), handover=handover, gpus=gpus, environ=environ)
    )
