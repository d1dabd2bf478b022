"""Two small actions on one Docker endpoint, run as a subprocess in that endpoint's environment.

`python -m orchestrator.nightly.targets.endpoint_tool ping` answers whether the endpoint's daemon answers
(exit 0, or exit 3 and one line saying why); `… sweep LABEL` force-removes the containers carrying LABEL
and prints their ids (several passes: see `_sweep`). A subprocess because the endpoint is chosen by
environment variables (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, DOCKER_CONTEXT), as for the
`orch rebuild` it serves, and the runner's own environment is shared by all its threads: it is never
changed in place.
"""

from __future__ import annotations

import os
import sys
import time

from orchestrator.engine import Engine, RemoveContainers, connect
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, OrchError

#: A build whose client went away is cancelled by the daemon asynchronously: under load, the classic
#: builder was seen (Docker 20.10, 2 busy cores) to finish the step it was on and start the next step's
#: container several seconds after the client had gone, then to remove it itself ~8 s later. So the
#: sweep goes on until it has found nothing for `_QUIET_PASSES` passes in a row, `_SWEEP_PAUSE_S` apart.
_SWEEP_DEADLINE_S = 120.0
_SWEEP_PAUSE_S = 2.0
_QUIET_PASSES = 6
#: Set by a Podman target (nightly/targets/podman_endpoint.py): the ping fails unless Podman answers.
EXPECT_PODMAN_VAR = "ORCH_EXPECT_PODMAN"


def _sweep(engine: Engine, label: str) -> list[str]:
    """Remove the label's containers until `_QUIET_PASSES` passes in a row find none (or the deadline)."""
    removed: list[str] = []
    deadline = time.monotonic() + _SWEEP_DEADLINE_S
    empty = 0
    while empty < _QUIET_PASSES and time.monotonic() < deadline:
        found = engine.remove(RemoveContainers(label))
        removed += [container_id for container_id in found if container_id not in removed]
        empty = 0 if found else empty + 1
        if empty < _QUIET_PASSES:
            time.sleep(_SWEEP_PAUSE_S)
    return removed


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("ping", "sweep") or (argv[0] == "sweep") != (len(argv) == 2):
        print("usage: endpoint_tool ping | sweep KEY=VALUE", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        with connect() as engine:
            if argv[0] == "ping":
                info = engine.info()
                name = "Podman" if info.kind == "podman" else "Docker"
                if os.environ.get(EXPECT_PODMAN_VAR) == "1" and info.kind != "podman":
                    print(
                        f"{info.endpoint} answers as Docker {info.server_version}, not Podman: the plan's podman "
                        "target would build with another engine",
                        file=sys.stderr,
                    )
                    return EXIT_ENVIRONMENT
                print(f"{info.endpoint}: {name} {info.server_version}{' (rootless)' if info.rootless else ''}")
            else:
                for container_id in _sweep(engine, argv[1]):
                    print(container_id)
    except OrchError as exc:
        print(f"error[{exc.code}]: {exc.message}", file=sys.stderr)
        return exc.exit_code if exc.exit_code != 1 else EXIT_ENVIRONMENT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
