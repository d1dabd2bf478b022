"""What builds the image: BuildKit or the classic builder, and how BuildKit gets its context.

BuildKit (the engine's `POST /build?version=2`) fetches the whole context tar, wheels included, from orch's
context server: a container of the base image serving one random path on the engine's bridge (the engine
fetches it; docker-py cannot open the client session BuildKit would otherwise read a local context through).
The install step bind-mounts the wheels for that step only, so no wheel reaches a layer (plan/build.py
`BuildPlan.mounted_wheels`). The classic builder uploads the context and reads the wheels from the wheel feed.
Pure: the engine's offer (`EngineInfo.builders`) comes in as a value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from orchestrator.errors import BadInput
from orchestrator.model.platform import LABEL_PREFIX
from orchestrator.plan.specs import Builder, ServiceSpec, served_command

#: Where BuildKit's context server listens, in its own container on the engine's bridge.
CONTEXT_SERVER_PORT = 8470
#: Its folder: `index.html` (empty: no listing) and `<random token>/context.tar`.
CONTEXT_SERVER_ROOT = "srv"
#: The scripts the BuildKit install step runs, in the context's orch/ folder (mounted for that step only).
INSTALL_SCRIPT = "install-venv.sh"
INSTALL_HELPERS = ("venv_seed.py", "compile_venv.py")


def context_server_spec(python_version: str, base_id: str) -> ServiceSpec:
    """The container BuildKit fetches the context tar from: the base's Python serving `/srv` on the bridge."""
    return ServiceSpec(
        image=base_id,
        command=served_command(f"python{python_version}", CONTEXT_SERVER_PORT, "0.0.0.0", f"/{CONTEXT_SERVER_ROOT}"),
        labels={f"{LABEL_PREFIX}.role": "context-server"},
        network="bridge",
        port=CONTEXT_SERVER_PORT,
    )


def choose_builder(requested: Builder | None, offered: Sequence[Builder]) -> Builder:
    """The builder of this build: the one asked for (bad input when the engine lacks it), else the engine's
    preferred one (BuildKit on a Linux engine with API >= 1.39, engine/docker_build.py `builders`)."""
    if requested is None:
        return offered[0] if offered else "classic"
    if requested not in offered:
        raise BadInput(
            f"--builder {requested}: this engine offers {', '.join(offered) or 'no builder orch knows'}",
            hint="Leave --builder out (orch picks what the engine offers), or use another engine.",
        )
    return requested


#: Where a default builder can be set for every command (the CLI's `--builder` wins).
BUILDER_VAR = "ORCH_BUILDER"


def requested_builder(option: str | None, environ: Mapping[str, str]) -> Builder | None:
    """`--builder`, else ORCH_BUILDER, else None (the engine decides); `auto` is None too."""
    value = option or environ.get(BUILDER_VAR) or "auto"
    if value == "auto":
        return None
    if value not in ("buildkit", "classic"):
        raise BadInput(f"{BUILDER_VAR}={value!r} is not a builder", hint="Use buildkit, classic or auto.")
    return cast(Builder, value)
