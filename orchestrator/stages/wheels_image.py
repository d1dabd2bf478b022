"""Step `wheels`: BuildKit's wheels image, found under its tag or built from the wheels just collected.

plan/wheels_image.py says why the image exists and why nothing in it is trusted. This handler reads the
tag's image (one inspect); when its digest label names the wheels the render step collected, it is used as
it is, also by `--no-cache` builds (like the base image, it is an input named by its content, not a layer
of this build's cache). Otherwise the image is built, `FROM scratch`, from the context's wheels/ through the
context server, with network none, and tagged (the older image under that tag, if any, stays until a prune).
The step is skipped when step `build` will reuse the tag's image: no engine build needs the wheels then.
"""

from __future__ import annotations

import time

from orchestrator.engine import BuildRequest
from orchestrator.errors import EnvironmentFailure
from orchestrator.plan.program import EnsureWheels
from orchestrator.plan.wheels_image import DOCKERFILE, WHEELS_DIGEST_LABEL, WHY_NONE, wheels_digest
from orchestrator.stages.build import reusable_image
from orchestrator.stages.build_context import served_build_context
from orchestrator.stages.state import DONE, Run, StepOutcome


def do_wheels(step: EnsureWheels, run: Run) -> StepOutcome:
    assert run.rendered is not None and run.digest is not None
    spec, steps = step.build.wheels, step.build
    if spec is None:
        return StepOutcome("skipped", WHY_NONE)
    assert steps.context_server is not None
    if not steps.no_cache and reusable_image(run.previous, run.loaded.identity, run.digest) is not None:
        return StepOutcome("skipped", "step build reuses the tag's image: no engine build reads the wheels")
    run.hooks.on_build_stage("wheels image")
    mark = time.monotonic()
    # Only the files in wheels/: the uv wheel is collected with the locked ones, toolchain wheels are not.
    folder = run.rendered.directory / "wheels"
    digest = wheels_digest((w.file_name, w.sha256) for w in run.rendered.wheels if (folder / w.file_name).is_file())
    present = run.engine.image(spec.tag)
    if present is not None and present.labels.get(WHEELS_DIGEST_LABEL) == digest:
        run.wheels_image = present
        run.durations["wheels_image"] = time.monotonic() - mark
        return StepOutcome("reused", f"{spec.tag} holds these wheels ({digest})")
    files = {"Dockerfile": DOCKERFILE.encode()}
    with served_build_context(
        run.engine, steps.context_server, run.rendered.directory, only=["wheels"], files=files
    ) as url:
        outcome = run.engine.build(
            BuildRequest(
                context=None,
                tag=spec.tag,
                network="none",
                labels={**dict(spec.labels), WHEELS_DIGEST_LABEL: digest},
                on_line=run.hooks.on_line,
                builder="buildkit",
                remote=url,
            )
        )
    built = run.engine.image(spec.tag) if outcome.image_id is not None else None
    if built is None:
        raise EnvironmentFailure(
            f"the wheels image {spec.tag} could not be built: {outcome.error or 'the engine made no image'}",
            hint="It only copies the collected wheels into an image: free space on the engine (docker system df) "
            "and build again, or use --builder classic.",
        )
    run.wheels_image = built
    run.durations["wheels_image"] = time.monotonic() - mark
    return DONE
