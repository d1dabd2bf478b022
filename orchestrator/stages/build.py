"""`orch build`: render the dossier, build the image through the engine, read its inventory back.

Stages, each timed: base image present (or pulled) → build context rendered (wheelhouse collected) and
digested → the tagged image reused when it has this identity and context digest (`--no-cache` never
reuses), else the normalised context tar built with live progress → inventory probe run in the built
image (or read from build.json of the same image id) → checks →
`build.json` + `build.log` + `pip-freeze.txt` written atomically into the output folder.
A failed build step is a verdict (exit 1) with the step and the first error; no container is left behind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from orchestrator import __version__
from orchestrator.checks.image import image_checks
from orchestrator.documents import read_document
from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import BuildOutcome, BuildRequest, Engine, ImageInfo, Network, PullRequest, image_layers
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
    ImageLayer,
    ImageRef,
    WheelRef,
)
from orchestrator.model.checks import Check, first_failure
from orchestrator.model.inventory import Inventory, InventoryDiff, diff_inventories
from orchestrator.plan.build import (
    CONTEXT_DIGEST_LABEL,
    FEED_FETCH,
    FEED_PATHS,
    LABEL_PREFIX,
    BuildSteps,
    created_label,
    default_tag,
    make_build_steps,
)
from orchestrator.report.sbom import SBOM_FILE, sbom_json
from orchestrator.stages.build_context import ContextTar, context_digest, context_tar
from orchestrator.stages.code_source import CodeState, inspect_code
from orchestrator.stages.context import write_context
from orchestrator.stages.debhouse import DEBS_DIR
from orchestrator.stages.image_layers import map_layers
from orchestrator.stages.inventory import probe_inventory, write_environment
from orchestrator.timestamps import rfc3339


@dataclass(frozen=True)
class BuildOptions:
    out: Path
    tag: str | None = None
    ca_bundle: Path | None = None
    network: Network | None = None  # None: "none" for wheelhouse builds, "default" for online ones
    no_cache: bool = False
    wheel_cache: Path | None = None


def ensure_base(engine: Engine, loaded: LoadedDossier) -> ImageInfo:
    ref = loaded.base_image.from_line
    image = engine.image(ref) or engine.pull(PullRequest.of_base(ref))
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


def run_build(
    loaded: LoadedDossier,
    engine: Engine,
    options: BuildOptions,
    *,
    on_line: Callable[[str], None] | None = None,
    on_stage: Callable[[str], None] | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> BuildRecord:
    """Execute the build plan on `engine`: every value handed to it is decided by `plan.build.make_build_steps`."""
    stage = on_stage or (lambda _: None)
    durations: dict[str, float] = {}
    started = time.monotonic()
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    tag = options.tag or default_tag(loaded, engine.settings.tag_namespace)

    stage("base image")
    mark = time.monotonic()
    base = ensure_base(engine, loaded)
    durations["base_image"] = time.monotonic() - mark

    stage("render")
    mark = time.monotonic()
    state = inspect_code(loaded)
    code = code_ref(state)
    previous = engine.image(tag)
    steps = make_build_steps(
        loaded,
        out=out,
        code=code,
        created=created_label(previous.labels if previous else None, loaded.identity, rfc3339(clock())),
        base_id=base.id,
        base_repo_digests=base.repo_digests,
        engine_labels=engine.settings.labels,
        tag=tag,
        network=options.network,
        no_cache=options.no_cache,
        ca_bundle=options.ca_bundle,
    )
    plan, network = steps.plan, steps.network
    rendered = write_context(
        loaded,
        plan,
        steps.context_dir,
        ca_bundle=options.ca_bundle,
        cache=options.wheel_cache,
        code=state,
        engine=engine,
        base_id=base.id,
    )

    known = {f"wheels/{w.file_name}": w.sha256 for w in rendered.wheels}
    known.update({f"{DEBS_DIR}/{d.file_name}": d.sha256 for d in rendered.debs})
    digest = context_digest(rendered.directory, known)
    durations["render"] = time.monotonic() - mark

    mark = time.monotonic()
    reused = None if steps.no_cache else reusable_image(previous, loaded.identity, digest)
    if reused is not None:
        stage(f"reuse {tag}: same dossier identity and context digest (--no-cache builds again)")
        outcome = BuildOutcome(
            image_id=reused.id,
            log=f"orch: no engine build: {tag} ({reused.id}) has the same dossier identity and context digest "
            f"{digest}\n",
        )
    else:
        stage("build")
        if steps.feed is None:
            outcome = _engine_build(engine, steps, context_tar(rendered.directory), digest, on_line, None)
        else:
            # The feed serves the lock and the wheels; the context the engine receives leaves the wheels out.
            served = context_tar(rendered.directory, only=FEED_PATHS, prefix="feed")
            with served.file, engine.serve(steps.feed, served.file) as feed:
                kept = [
                    entry.name for entry in rendered.directory.iterdir() if entry.name not in ("wheels", FEED_FETCH)
                ]
                outcome = _engine_build(
                    engine, steps, context_tar(rendered.directory, only=kept), digest, on_line, feed
                )
    durations["build"] = time.monotonic() - mark
    atomic_write_text(out / "build.log", outcome.log)

    image_ref: ImageRef | None = None
    inventory: Inventory | None = None
    inventory_source: str | None = None
    diff: InventoryDiff | None = None
    checks: list[Check] = []
    failure: BuildFailure | None = None
    layers: list[ImageLayer] | None = None
    if outcome.image_id is None:
        failure = build_failure(outcome.log, outcome.error)
    else:
        built = engine.image(tag)
        if built is None:
            raise ImageNotBuilt(
                f"the image {tag} ({outcome.image_id}) was built, then removed by another user or process "
                "(docker rmi or a prune on the shared engine) before orch could read it",
                hint="Nothing is wrong with the dossier: run the build again.",
            )
        image_ref = ImageRef(tag=tag, id=built.id, labels=dict(built.labels), size_bytes=built.size)
        dockerfile = (rendered.directory / "Dockerfile").read_text(encoding="utf-8")
        # The engine appends the build-label option as the final stage's last instruction.
        dockerfile += f"LABEL {CONTEXT_DIGEST_LABEL}={digest}\n"
        layers = map_layers(image_layers(engine, built.id), len(image_layers(engine, base.id)), dockerfile)
        stage("inventory")
        mark = time.monotonic()
        inventory = _previous_inventory(out / "build.json", built.id)
        inventory_source = "previous build.json of the same image id"
        probe_error = None
        if inventory is None:
            probed = probe_inventory(engine, built.id, replace(steps.inventory, image=built.id))
            inventory, probe_error = probed.inventory, probed.error
            inventory_source = "inventory probe"
            # Written before build.json, so a record never names a digest whose list is missing or older.
            write_environment(out, probed.environment)
        durations["inventory"] = time.monotonic() - mark
        if inventory is None:
            failure = BuildFailure(step="inventory probe", first_error=probe_error or "no inventory")
        else:
            reference_file = loaded.model.python.reference_inventory
            if reference_file is not None:
                reference_lines = loaded.resolve(reference_file).read_text(encoding="utf-8").splitlines()
                diff = diff_inventories(reference_lines, inventory.pip_freeze, reference_file)
            checks = image_checks(loaded, inventory, diff)
            failed = first_failure(checks)
            if failed is not None:
                failure = BuildFailure(
                    step=f"image check: {failed.name}",
                    first_error=f"expected {failed.expected}, observed {failed.observed}"
                    + (f" ({failed.detail})" if failed.detail else ""),
                )
            atomic_write_text(out / "pip-freeze.txt", "\n".join(inventory.pip_freeze) + "\n")
    durations["total"] = time.monotonic() - started

    record = BuildRecord(
        orch_version=__version__,
        status="failed" if failure else "passed",
        dossier=DossierRef(
            name=loaded.model.name, path=str(loaded.path), identity=loaded.identity, variant=loaded.variant
        ),
        image=image_ref,
        base_image=BaseImageRef(ref=loaded.base_image.from_line, id=base.id, digest=loaded.base_image.digest),
        context=ContextRef(
            digest=digest,
            install_mode=plan.install_mode,
            installer=plan.installer,
            network=network,
            ca_bundle=plan.ca_bundle,
            wheels=[WheelRef(file=w.file_name, sha256=w.sha256) for w in rendered.wheels],
            debs=[
                DebRef(file=d.file_name, package=d.package, version=d.version, sha256=d.sha256) for d in rendered.debs
            ],
        ),
        code=code,
        failure=failure,
        cache=cache_stats(outcome.log),
        durations_s={key: round(value, 3) for key, value in durations.items()},
        checks=checks,
        inventory=inventory,
        inventory_source=inventory_source,
        inventory_diff=diff,
        reused=reused is not None,
        layers=layers,
    )
    write_record(out / "build.json", record)
    # The SBOM describes the image build.json names: written for a passed build, never left from an older one.
    if record.status == "passed":
        lock_text = loaded.resolve(loaded.model.python.requirements).read_text(encoding="utf-8")
        atomic_write_text(out / SBOM_FILE, sbom_json(record, loaded.lock, loaded.model.python, lock_text))
    else:
        (out / SBOM_FILE).unlink(missing_ok=True)
    if outcome.image_id is None:
        # pip in the build could not find a pinned version: the lock is wrong, not the build (exit 2).
        missing = missing_pin(outcome.log)
        if missing is not None:
            where = (
                "the wheels collected for the build (wheelhouse mode)"
                if plan.install_mode == "wheelhouse"
                else "the indexes pip used in the build"
            )
            raise pin_not_found(loaded.lock, loaded.model.python.requirements, missing, where)
    return record


def _engine_build(
    engine: Engine,
    steps: BuildSteps,
    tar: ContextTar,
    digest: str,
    on_line: Callable[[str], None] | None,
    feed: str | None,
) -> BuildOutcome:
    with tar.file:
        return engine.build(
            BuildRequest(
                context=tar.file,
                tag=steps.tag,
                network=steps.network,
                labels={CONTEXT_DIGEST_LABEL: digest},
                dockerfile_labels={**dict(steps.plan.stage_labels), **dict(steps.plan.labels)},
                no_cache=steps.no_cache,
                feed=feed,
                on_line=on_line,
            )
        )


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
