"""The observe phase: read-only facts a program is planned from (plan/program.py says why it is a phase).

Live: from the engine and this host. Nothing here changes anything: an absent base image is a fact (step
`base` pulls it), an absent image to probe is the user's error, said before any step runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace

from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine, ImageInfo
from orchestrator.host.collect import collect_host_facts
from orchestrator.model.host import HostFacts
from orchestrator.plan.program import BuildFacts, ProbeFacts
from orchestrator.remote.cache import default_root
from orchestrator.stages.build import code_ref
from orchestrator.stages.code_source import CodeState, inspect_code
from orchestrator.stages.image_stage import resolve_image
from orchestrator.stages.probe import gpu_selection


def observe_build(
    loaded: LoadedDossier, engine: Engine, tag: str, now: str
) -> tuple[BuildFacts, CodeState, ImageInfo | None, ImageInfo | None]:
    """The facts of a build, with the code's state, the base image and the image the tag names now."""
    state = inspect_code(loaded)
    base = engine.image(loaded.base_image.from_line)
    previous = engine.image(tag)
    info = engine.info()
    facts = BuildFacts(
        code=code_ref(state),
        base_id=base.id if base else None,
        base_repo_digests=base.repo_digests if base else (),
        previous_labels=previous.labels if previous else None,
        engine_labels=dict(engine.settings.labels),
        now=now,
        builders=info.builders,
        engine_kind=info.kind,
        engine_version=info.server_version,
        engine_api_version=info.api_version,
        engine_rootless=info.rootless,
    )
    return facts, state, base, previous


def with_base(facts: BuildFacts, base: ImageInfo) -> BuildFacts:
    """The same facts once step `base` has pulled the base image."""
    return replace(facts, base_id=base.id, base_repo_digests=base.repo_digests)


def observe_host(
    loaded: LoadedDossier,
    engine: Engine,
    host_facts: Callable[[], HostFacts] | None,
    gpus: str | None,
    environ: Mapping[str, str],
    *,
    image_ref: str,
    image_id: str | None,
) -> ProbeFacts:
    """This host's GPU facts and the GPUs the run maps: read before the first step, so a `--gpus` this host
    cannot satisfy (exit 2) and the GPU mapping are known before any build or container starts."""
    host = host_facts() if host_facts else collect_host_facts(engine.info())
    selection = gpu_selection(loaded.model.system.platform, host, gpus, environ)
    return ProbeFacts(
        image_ref=image_ref,
        image_id=image_id,
        host=host,
        selection=selection,
        engine_labels=dict(engine.settings.labels),
        # The cache is this process's setting (ORCH_SOURCES_DIR, ORCH_CACHE_DIR), like the credentials the fetch
        # reads: `environ` here is the scheduler's view of the GPUs, which callers may narrow.
        sources_cache=default_root(os.environ),
    )


def observe_probe(
    loaded: LoadedDossier,
    engine: Engine,
    image: str | None,
    host_facts: Callable[[], HostFacts] | None,
    gpus: str | None,
    environ: Mapping[str, str],
    tag: str,
) -> tuple[ProbeFacts, ImageInfo]:
    """`orch probe`: the image (it must exist: ImageNotBuilt otherwise) and this host."""
    found = resolve_image(engine, loaded, image)
    facts = observe_host(loaded, engine, host_facts, gpus, environ, image_ref=image or tag, image_id=found.id)
    return facts, found
