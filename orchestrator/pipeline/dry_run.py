"""`--dry-run` of `orch build`, `orch probe` and `orch rebuild`: the program, described, with no engine.

The same three phases as a real run, with the observe phase done without an engine: what only an engine
knows (the base image's id, the image the tag names now, the daemon's GPU runtimes) is a placeholder that
says where it comes from. The plan is the very function the real run calls (plan/program.py), so the
numbered steps printed are the steps the executor runs and records in `steps.json`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from orchestrator.dossier.load import LoadedDossier
from orchestrator.model.build_record import CodeRef
from orchestrator.model.host import HostFacts
from orchestrator.plan.build import default_tag
from orchestrator.plan.describe import describe_program, render_calls
from orchestrator.plan.program import (
    BASE_DIGEST,
    CREATED,
    BuildFacts,
    BuildOptionsPlan,
    ProbeFacts,
    Program,
    build_program,
    probe_program,
    rebuild_program,
)
from orchestrator.remote.cache import default_root
from orchestrator.stages.build import BuildOptions

NO_ENGINE = "the daemon's GPU support is not known without an engine"


def dry_build_facts(loaded: LoadedDossier, code: CodeRef, engine_labels: Mapping[str, str]) -> BuildFacts:
    return BuildFacts(
        code=code,
        base_id=None,
        base_repo_digests=() if loaded.base_image.digest else (BASE_DIGEST,),
        previous_labels=None,
        engine_labels=dict(engine_labels),
        now=CREATED,
        # No engine is asked: planned as on an engine that offers BuildKit (any Linux Docker since 18.09).
        builders=("buildkit", "classic"),
    )


def dry_probe_facts(
    loaded: LoadedDossier,
    host: HostFacts,
    engine_labels: Mapping[str, str],
    *,
    image_ref: str,
    built: bool,
    gpus: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ProbeFacts:
    from orchestrator.stages.probe import gpu_selection

    platform = loaded.model.system.platform
    return ProbeFacts(
        image_ref=image_ref,
        image_id=None if built else image_ref,
        host=host,
        selection=gpu_selection(platform, host, gpus, environ or {}),
        engine_labels=dict(engine_labels),
        # A dry run asks no engine: said where the mapping depends on the daemon's runtimes.
        host_notes=() if host.docker is not None else (NO_ENGINE,),
        sources_cache=default_root(os.environ if environ is None else environ),
    )


def observed(loaded: LoadedDossier, *, build: bool, probe: str | None) -> list[str]:
    """What the observe phase reads (with no engine: what it would read)."""
    lines = []
    if build:
        lines += [
            f"the code's state at {loaded.model.code.source} (revision, uncommitted changes)",
            f"image {loaded.base_image.from_line}: the base's id (placeholder without an engine)",
            "the image the tag names now: its labels (its created label is kept for this identity)",
        ]
    if probe is not None:
        lines.append(f"image {probe}: it must exist" if probe else "")
    lines.append("this host's GPU facts (driver, runtime, CDI, /dev/kfd) and the engine's information")
    return [line for line in lines if line]


def describe(
    program: Program,
    loaded: LoadedDossier,
    engine_labels: Mapping[str, str],
    lines: list[str],
    aliases: Mapping[Path, str] | None = None,
) -> str:
    return render_calls(describe_program(program, loaded, engine_labels, lines), aliases)


# -- the commands' dry runs: this host's facts gathered, then the pure plan ---------------------------------


def _engine_labels(environ: Mapping[str, str]) -> dict[str, str]:
    from orchestrator.engine.labels import extra_labels_from_environment

    return extra_labels_from_environment(environ)


def _tag_namespace(environ: Mapping[str, str]) -> str:
    from orchestrator.engine.labels import tag_namespace_from_environment

    return tag_namespace_from_environment(environ)


def _options(loaded: LoadedDossier, options: BuildOptions, environ: Mapping[str, str]) -> BuildOptionsPlan:
    return BuildOptionsPlan(
        out=options.out.resolve(),
        tag=options.tag or default_tag(loaded, _tag_namespace(environ)),
        network=options.network,
        no_cache=options.no_cache,
        ca_bundle=options.ca_bundle,
        builder=options.builder,
        tag_namespace=_tag_namespace(environ),
    )


def _code(loaded: LoadedDossier) -> CodeRef:
    from orchestrator.stages.build import code_ref
    from orchestrator.stages.code_source import inspect_code

    return code_ref(inspect_code(loaded))


def _host(host: HostFacts | None) -> HostFacts:
    from orchestrator.host.collect import collect_host_facts

    # No engine to ask about its runtimes: the daemon's GPU support shows as unknown in the mapping.
    return host if host is not None else collect_host_facts(None)


def dry_run_build(loaded: LoadedDossier, options: BuildOptions, *, environ: Mapping[str, str]) -> str:
    labels = _engine_labels(environ)
    program = build_program(loaded, dry_build_facts(loaded, _code(loaded), labels), _options(loaded, options, environ))
    return describe(program, loaded, labels, observed(loaded, build=True, probe=None)[:-1])


def dry_run_probe(
    loaded: LoadedDossier,
    out: Path,
    image: str | None,
    *,
    environ: Mapping[str, str],
    host: HostFacts | None = None,
    gpus: str | None = None,
) -> str:
    labels = _engine_labels(environ)
    ref = image or default_tag(loaded, _tag_namespace(environ))
    facts = dry_probe_facts(loaded, _host(host), labels, image_ref=ref, built=False, gpus=gpus, environ=environ)
    program = probe_program(loaded, out.resolve(), facts)
    return describe(program, loaded, labels, observed(loaded, build=False, probe=ref))


def rebuild_text(
    loaded: LoadedDossier,
    options: BuildOptionsPlan,
    code: CodeRef,
    host: HostFacts,
    engine_labels: Mapping[str, str],
    *,
    handover: Path | None = None,
    sign_key: Path | None = None,
    gpus: str | None = None,
    environ: Mapping[str, str] | None = None,
    aliases: Mapping[Path, str] | None = None,
) -> str:
    """The rebuild's program in words, from facts given (the golden files give fixed ones)."""
    facts = dry_build_facts(loaded, code, engine_labels)
    probe = dry_probe_facts(loaded, host, engine_labels, image_ref=options.tag, built=True, gpus=gpus, environ=environ)
    program = rebuild_program(loaded, facts, probe, options, handover=handover, sign_key=sign_key)
    return describe(program, loaded, engine_labels, observed(loaded, build=True, probe=None), aliases)


def dry_run_rebuild(
    loaded: LoadedDossier,
    options: BuildOptions,
    *,
    environ: Mapping[str, str],
    handover: Path | None = None,
    sign_key: Path | None = None,
    host: HostFacts | None = None,
    gpus: str | None = None,
) -> str:
    return rebuild_text(
        loaded,
        _options(loaded, options, environ),
        _code(loaded),
        _host(host),
        _engine_labels(environ),
        handover=handover,
        sign_key=sign_key,
        gpus=gpus,
        environ=environ,
    )
