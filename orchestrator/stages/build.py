"""`orch build`'s steps: the base image, the context, the image, its inventory and checks, build.json.

Each function here is the handler of one step type of plan/program.py; stages/execute.py runs them in the
program's order and keeps what they produce in a `Run` (stages/state.py). The order and the branches (reuse,
feed, a failed build) are the program's, printed by `--dry-run`; a handler only does its own step's work.
A failed build step is a verdict (exit 1) with the step and the first error; no container is left behind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from orchestrator import __version__
from orchestrator.checks.image import image_checks
from orchestrator.documents import read_document
from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import (
    Builder,
    BuildOutcome,
    BuildRequest,
    Engine,
    ImageInfo,
    Network,
    PullRequest,
    image_layers,
)
from orchestrator.engine.build_log import build_failure, cache_stats, missing_pin, pin_not_found
from orchestrator.errors import BadInput, EnvironmentFailure, ImageNotBuilt
from orchestrator.fsutil import atomic_write_text
from orchestrator.model.build_record import (
    BUILD_FORMAT,
    BaseImageRef,
    BuildFailure,
    BuildRecord,
    CodeRef,
    ContextRef,
    DebRef,
    DossierRef,
    ImageRef,
    WheelRef,
)
from orchestrator.model.checks import first_failure, mismatch
from orchestrator.model.inventory import Inventory, diff_inventories
from orchestrator.plan.build import (
    CONTEXT_DIGEST_LABEL,
    FEED_FETCH,
    FEED_PATHS,
    LABEL_PREFIX,
    BuildSteps,
)
from orchestrator.plan.program import (
    BuildImage,
    EnsureBase,
    ImageChecks,
    InventoryProbe,
    RenderContext,
    WriteBuildRecord,
)
from orchestrator.report.sbom import SBOM_FILE, sbom_json
from orchestrator.stages.build_context import ContextTar, context_digest, context_tar, served_build_context
from orchestrator.stages.code_source import CodeState
from orchestrator.stages.context import write_context
from orchestrator.stages.debhouse import DEBS_DIR
from orchestrator.stages.image_layers import map_layers
from orchestrator.stages.inventory import probe_inventory, write_environment
from orchestrator.stages.state import DONE, Run, StepOutcome


@dataclass(frozen=True)
class BuildOptions:
    out: Path
    tag: str | None = None
    ca_bundle: Path | None = None
    network: Network | None = None  # None: "none" for wheelhouse builds, "default" for online ones
    no_cache: bool = False
    wheel_cache: Path | None = None
    #: `--builder` (or ORCH_BUILDER); None: the engine's preferred one (plan/builder.py `choose_builder`).
    builder: Builder | None = None


def ensure_base(engine: Engine, loaded: LoadedDossier, observed: ImageInfo | None = None) -> ImageInfo:
    """The base image: the one the observe phase found (`observed`), else pulled; its id checked against the pin."""
    ref = loaded.base_image.from_line
    image = observed or engine.image(ref) or engine.pull(PullRequest.of_base(ref))
    expected = loaded.base_image.image_id
    if expected is not None and image.id != expected:
        raise EnvironmentFailure(
            f"base image {ref} is {image.id} here, but the dossier pins {expected}",
            hint="Rebuild the base with the recipe the dossier recorded, or load the exact image with `docker load`.",
        )
    return image


def _previous_inventory(path: Path, image_id: str) -> Inventory | None:
    """An image id names its content: the inventory of the same id, read earlier, is still exact."""
    if not path.is_file():
        return None
    try:
        previous = read_record(path)
    except BadInput:
        return None  # an older or damaged record: probe again
    if previous.image is not None and previous.image.id == image_id and previous.inventory is not None:
        return previous.inventory
    return None


# -- the build's step handlers (stages/execute.py runs them in the program's order) ---------------------------


def do_ensure_base(step: EnsureBase, run: Run) -> StepOutcome:
    run.hooks.on_build_stage("base image")
    mark = time.monotonic()
    run.base = ensure_base(run.engine, run.loaded, run.base)
    run.durations["base_image"] = time.monotonic() - mark
    return DONE if step.present else StepOutcome(note="pulled: the steps after it were planned again with its id")


def do_render(step: RenderContext, run: Run) -> StepOutcome:
    assert run.base is not None and run.code_state is not None
    run.hooks.on_build_stage("render")
    mark = time.monotonic()
    steps = step.build
    run.rendered = write_context(
        run.loaded,
        steps.plan,
        steps.context_dir,
        ca_bundle=steps.ca_bundle,
        cache=run.wheel_cache,
        code=run.code_state,
        engine=run.engine,
        base_id=run.base.id,
    )
    known = {f"wheels/{w.file_name}": w.sha256 for w in run.rendered.wheels}
    known.update({f"{DEBS_DIR}/{d.file_name}": d.sha256 for d in run.rendered.debs})
    run.digest = context_digest(run.rendered.directory, known)
    run.durations["render"] = time.monotonic() - mark
    return DONE


def do_build(step: BuildImage, run: Run) -> StepOutcome:
    assert run.rendered is not None and run.digest is not None and run.base is not None
    steps, rendered, digest = step.build, run.rendered, run.digest
    mark = time.monotonic()
    reused = reusable_image(run.previous, run.loaded.identity, digest) if step.reuse_if_same_context else None
    if reused is not None:
        run.hooks.on_build_stage(
            f"reuse {steps.tag}: same dossier identity and context digest (--no-cache builds again)"
        )
        outcome = BuildOutcome(
            image_id=reused.id,
            log=f"orch: no engine build: {steps.tag} ({reused.id}) has the same dossier identity and context "
            f"digest {digest}\n",
        )
    else:
        run.hooks.on_build_stage("build")
        if steps.context_server is not None:
            outcome = _buildkit_build(run.engine, steps, rendered.directory, digest, run.hooks.on_line)
        elif steps.feed is None:
            outcome = _engine_build(run.engine, steps, context_tar(rendered.directory), digest, run.hooks.on_line, None)
        else:
            # The feed serves the lock and the wheels; the context the engine receives leaves the wheels out.
            served = context_tar(rendered.directory, only=FEED_PATHS, prefix="feed")
            with served.file, run.engine.serve(steps.feed, served.file) as feed:
                kept = [
                    entry.name for entry in rendered.directory.iterdir() if entry.name not in ("wheels", FEED_FETCH)
                ]
                outcome = _engine_build(
                    run.engine, steps, context_tar(rendered.directory, only=kept), digest, run.hooks.on_line, feed.id
                )
    run.durations["build"] = time.monotonic() - mark
    run.outcome, run.reused = outcome, reused is not None
    atomic_write_text(run.out / "build.log", outcome.log)
    if outcome.image_id is None:
        run.failure = build_failure(outcome.log, outcome.error)
        return StepOutcome("failed", run.failure.first_error)
    built = run.engine.image(steps.tag)
    if built is None:
        raise ImageNotBuilt(
            f"the image {steps.tag} ({outcome.image_id}) was built, then removed by another user or process "
            "(docker rmi or a prune on the shared engine) before orch could read it",
            hint="Nothing is wrong with the dossier: run the build again.",
        )
    run.image, run.image_ref = built, steps.tag
    dockerfile = (rendered.directory / "Dockerfile").read_text(encoding="utf-8")
    if steps.builder == "classic":
        # The classic builder appends the build-label option as the final stage's last instruction (BuildKit
        # sets it in the image's config, with no history entry).
        dockerfile += f"LABEL {CONTEXT_DIGEST_LABEL}={digest}\n"
    run.layers = map_layers(image_layers(run.engine, built.id), len(image_layers(run.engine, run.base.id)), dockerfile)
    return StepOutcome("reused", "the tag's image has this identity and context digest") if reused else DONE


def do_inventory(step: InventoryProbe, run: Run) -> StepOutcome:
    if run.image is None:
        return StepOutcome("skipped", "no image: the build failed")
    run.hooks.on_build_stage("inventory")
    mark = time.monotonic()
    image_id = run.image.id
    run.inventory = _previous_inventory(run.out / "build.json", image_id) if step.reuse_recorded else None
    status: StepOutcome = StepOutcome("reused", "build.json of the same image id holds it")
    run.inventory_source = "previous build.json of the same image id"
    if run.inventory is None:
        probed = probe_inventory(run.engine, image_id, replace(step.spec, image=image_id))
        run.inventory, run.probe_error = probed.inventory, probed.error
        run.inventory_source = "inventory probe"
        # Written before build.json, so a record never names a digest whose list is missing or older.
        write_environment(run.out, probed.environment)
        status = DONE
    run.durations["inventory"] = time.monotonic() - mark
    if run.inventory is None:
        run.failure = BuildFailure(step="inventory probe", first_error=run.probe_error or "no inventory")
        return StepOutcome("failed", run.failure.first_error)
    return status


def do_image_checks(step: ImageChecks, run: Run) -> StepOutcome:
    if run.inventory is None:
        return StepOutcome("skipped", "no inventory")
    loaded = run.loaded
    if step.reference_inventory is not None:
        reference_lines = loaded.resolve(step.reference_inventory).read_text(encoding="utf-8").splitlines()
        run.inventory_diff = diff_inventories(
            reference_lines,
            run.inventory.pip_freeze,
            step.reference_inventory,
            compare_installer=loaded.lock.get("pip") is not None,
        )
    run.checks = image_checks(loaded, run.inventory, run.inventory_diff)
    failed = first_failure(run.checks)
    if failed is not None:
        run.failure = BuildFailure(
            step=f"image check: {failed.name}",
            first_error=mismatch(failed) + (f" ({failed.detail})" if failed.detail else ""),
        )
        return StepOutcome("failed", run.failure.first_error)
    return DONE


def do_write_build_record(step: WriteBuildRecord, run: Run) -> StepOutcome:
    """build.json (and pip-freeze.txt, the SBOM): the one writer of the build's documents, once."""
    assert run.base is not None and run.rendered is not None and run.code is not None and run.digest is not None
    build = step.build
    loaded, plan, folder = run.loaded, build.plan, step.folder
    if run.inventory is not None:
        atomic_write_text(folder / "pip-freeze.txt", "\n".join(run.inventory.pip_freeze) + "\n")
    run.durations["total"] = time.monotonic() - run.started
    image = run.image
    record = BuildRecord(
        orch_version=__version__,
        status="failed" if run.failure else "passed",
        dossier=DossierRef(
            name=loaded.model.name, path=str(loaded.path), identity=loaded.identity, variant=loaded.variant
        ),
        image=ImageRef(tag=build.tag, id=image.id, labels=dict(image.labels), size_bytes=image.size) if image else None,
        base_image=BaseImageRef(ref=loaded.base_image.from_line, id=run.base.id, digest=loaded.base_image.digest),
        context=ContextRef(
            digest=run.digest,
            install_mode=plan.install_mode,
            installer=plan.installer,
            network=build.network,
            builder=build.builder,
            ca_bundle=plan.ca_bundle,
            wheels=[WheelRef(file=w.file_name, sha256=w.sha256) for w in run.rendered.wheels],
            wheels_image=f"{plan.wheels_image}@{run.wheels_image.id}" if run.wheels_image is not None else None,
            debs=[
                DebRef(file=d.file_name, package=d.package, version=d.version, sha256=d.sha256)
                for d in run.rendered.debs
            ],
        ),
        code=run.code,
        failure=run.failure,
        cache=cache_stats(run.outcome.log if run.outcome else ""),
        durations_s={key: round(value, 3) for key, value in run.durations.items()},
        checks=run.checks,
        inventory=run.inventory,
        inventory_source=run.inventory_source if run.image is not None else None,
        inventory_diff=run.inventory_diff,
        reused=run.reused,
        layers=run.layers,
        engine=step.builder_engine,
    )
    write_record(folder / "build.json", record)
    run.record = record
    # The SBOM describes the image build.json names: written for a passed build, never left from an older one.
    if record.status == "passed":
        lock_text = loaded.resolve(loaded.model.python.requirements).read_text(encoding="utf-8")
        atomic_write_text(folder / SBOM_FILE, sbom_json(record, loaded.lock, loaded.model.python, lock_text))
    else:
        (folder / SBOM_FILE).unlink(missing_ok=True)
    run.hooks.on_built(record)
    if run.outcome is not None and run.outcome.image_id is None:
        # pip in the build could not find a pinned version: the lock is wrong, not the build (exit 2).
        missing = missing_pin(run.outcome.log)
        if missing is not None:
            where = (
                "the wheels collected for the build (wheelhouse mode)"
                if plan.install_mode == "wheelhouse"
                else "the indexes pip used in the build"
            )
            raise pin_not_found(loaded.lock, loaded.model.python.requirements, missing, where)
    return DONE if record.status == "passed" else StepOutcome("done", "a failed build's record")


def _request(
    steps: BuildSteps, digest: str, on_line: Callable[[str], None] | None, context: IO[bytes] | None, **how: Any
) -> BuildRequest:
    """The build request of `steps`; `how` is the builder's part (the feed's id, or BuildKit's remote URL)."""
    return BuildRequest(
        context=context,
        tag=steps.tag,
        network=steps.network,
        labels={CONTEXT_DIGEST_LABEL: digest},
        dockerfile_labels={**dict(steps.plan.stage_labels), **dict(steps.plan.labels)},
        no_cache=steps.no_cache,
        on_line=on_line,
        builder=steps.builder,
        **how,
    )


def _engine_build(
    engine: Engine,
    steps: BuildSteps,
    tar: ContextTar,
    digest: str,
    on_line: Callable[[str], None] | None,
    feed: str | None,
) -> BuildOutcome:
    with tar.file:
        return engine.build(_request(steps, digest, on_line, tar.file, feed=feed))


def _buildkit_build(
    engine: Engine, steps: BuildSteps, directory: Path, digest: str, on_line: Callable[[str], None] | None
) -> BuildOutcome:
    """BuildKit: the context served by orch's context server under a random path, fetched by the engine;
    without wheels/ when the install step mounts them from the wheels image (plan/wheels_image.py)."""
    assert steps.context_server is not None
    only = None
    if steps.wheels is not None:
        only = [entry.name for entry in directory.iterdir() if entry.name != "wheels"]
    with served_build_context(engine, steps.context_server, directory, only=only) as url:
        return engine.build(_request(steps, digest, on_line, None, remote=url))


def reusable_image(previous: ImageInfo | None, identity: str, digest: str) -> ImageInfo | None:
    """The tagged image when it was built from this dossier identity and this very context: building again
    would only ask the engine's cache to confirm every layer, so orch says so and skips the engine build."""
    if previous is None:
        return None
    labels = previous.labels
    if labels.get(f"{LABEL_PREFIX}.dossier.identity") == identity and labels.get(CONTEXT_DIGEST_LABEL) == digest:
        return previous
    return None


def code_ref(state: CodeState) -> CodeRef:
    return CodeRef(
        kind=state.kind,
        source=state.source,
        revision=state.revision,
        dirty=state.dirty,
        dirty_diff_sha256=state.diff_sha256,
        variant=state.variant,
    )


def write_record(path: Path, record: BuildRecord) -> None:
    atomic_write_text(path, record.model_dump_json(indent=2) + "\n")


def read_record(path: Path) -> BuildRecord:
    """Read `build.json`; a missing, damaged or foreign file is `BadInput` naming it."""
    return read_document(path, BuildRecord, BUILD_FORMAT, "build record")


def ca_bundle_from_environment() -> Path | None:
    """ORCH_CA_BUNDLE, else the file pip itself is told to trust (PIP_CERT): the corporate-proxy case."""
    for name in ("ORCH_CA_BUNDLE", "PIP_CERT"):
        value = os.environ.get(name)
        if value and Path(value).is_file():
            return Path(value)
    return None
