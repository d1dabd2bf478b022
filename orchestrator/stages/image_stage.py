"""The image stage: what the image contains, against the dossier (build.json of this image, or the
inventory probe run now)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from orchestrator.checks.image import image_checks, reference_inventory_warning
from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine, ImageInfo
from orchestrator.errors import ImageNotBuilt
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.inventory import Inventory, diff_inventories
from orchestrator.model.report import StageError, StageResult
from orchestrator.plan.build import LABEL_PREFIX, default_tag
from orchestrator.plan.run import inventory_spec
from orchestrator.stages.build import read_record
from orchestrator.stages.inventory import probe_inventory, write_environment
from orchestrator.stages.results import check, stage_result


def resolve_image(engine: Engine, loaded: LoadedDossier, given: str | None) -> ImageInfo:
    """The image `--image` names (`given`), else the one `orch build` made for this dossier identity."""
    ref = given or default_tag(loaded, engine.settings.tag_namespace)
    image = engine.image(ref)
    if image is None and given is not None:
        raise ImageNotBuilt(
            f"the image {ref} given with --image is not in the engine",
            hint="Check the reference (`docker images`), or leave out --image to probe the image `orch build` "
            "made for this dossier.",
        )
    if image is None:
        # The tag carries the identity prefix: any change to the dossier, a file it references or --variant
        # asks for an image that was never built, even when an older one of the same name exists.
        raise ImageNotBuilt(
            f"the app image {ref} for this dossier identity ({loaded.short_identity}) is not built",
            hint="Build it first: `orch build DOSSIER --out DIR`, or build and probe in one go with `orch rebuild`.",
        )
    return image


def image_stage(
    engine: Engine,
    loaded: LoadedDossier,
    image: ImageInfo,
    out: Path,
    *,
    built_in_this_run: bool = False,
    record: BuildRecord | None = None,
) -> tuple[StageResult, Inventory | None]:
    """The image's contents against the dossier.

    Its duration: when `orch rebuild` built the image in this run, the build is this stage's work, so the
    build's time (from build.json) is counted in; a probe of an earlier build counts only its own time and
    records the build's in the facts, so no 112 s build is ever shown as a 0.00 s stage.
    """
    started = time.monotonic()
    inventory: Inventory | None = None
    source = "inventory probe"
    build_facts: dict[str, Any] = {}
    layers = None
    build_json = out / "build.json"
    if record is None and build_json.is_file():
        record = read_record(build_json)
    from_this_run = built_in_this_run and record is not None
    if record is not None and record.image is not None and record.image.id == image.id:
        build_s = record.durations_s.get("total")
        if build_s is not None:
            build_facts["build_seconds"] = build_s
            build_facts["built"] = (
                "in this run (orch rebuild): the stage's duration includes the build"
                if built_in_this_run
                else "earlier: the build's time is recorded in build.json, not in this stage's duration"
            )
            if built_in_this_run:
                started -= build_s
        if record.inventory is not None:
            inventory, source = record.inventory, "build.json of this image"
        layers = record.layers
    if not build_facts:
        build_facts["built"] = "earlier: no build.json of this image in the output folder, its build time is not known"
    if layers:
        build_facts["layers"] = layers  # the size of each layer, from build.json of this image
    if inventory is None:
        probed = probe_inventory(engine, image.id, inventory_spec(image.id))
        inventory, error = probed.inventory, probed.error
        if inventory is not None:
            # `orch verify` names the files that differ from the hand-over's list with this one.
            write_environment(out, probed.environment)
        if inventory is None:
            return stage_result(
                "image",
                started,
                [],
                {"image": image.id},
                error=StageError(step="inventory probe", message=error or "no inventory"),
            ), None
    if from_this_run and record is not None and record.inventory is not None:
        # The build of this very program checked this inventory a moment ago: its checks are the image's.
        contents = list(record.checks)
    else:
        diff = None
        if loaded.model.python.reference_inventory:
            reference_file = loaded.model.python.reference_inventory
            reference = loaded.resolve(reference_file).read_text(encoding="utf-8").splitlines()
            diff = diff_inventories(
                reference, inventory.pip_freeze, reference_file, compare_installer=loaded.lock.get("pip") is not None
            )
        contents = image_checks(loaded, inventory, diff)
    identity = image.labels.get(f"{LABEL_PREFIX}.dossier.identity")
    checks = [
        check(
            "image built from this dossier",
            f"identity {loaded.short_identity}",
            f"identity {identity[:12]}" if identity else "no orch identity label",
            identity == loaded.identity,
        ),
        *contents,
    ]
    facts = {
        "image": image.id,
        "tags": list(image.tags),
        "size_bytes": image.size,
        "inventory_source": source,
        "python": inventory.python_version,
        "torch": inventory.backend.torch,
        "torch_cuda": inventory.backend.torch_cuda,
        "torch_hip": inventory.backend.torch_hip,
        "cuda_toolkit": inventory.backend.cuda_toolkit,
        "rocm": inventory.backend.rocm,
        "os": inventory.os_release.get("PRETTY_NAME"),
        "packages": len(inventory.pip_freeze),
        "os_packages": len(inventory.os_packages),
        **({"environment": inventory.environment} if inventory.environment is not None else {}),
        **build_facts,
    }
    warning = reference_inventory_warning(loaded)
    return stage_result("image", started, checks, facts, warnings=[warning] if warning else None), inventory
