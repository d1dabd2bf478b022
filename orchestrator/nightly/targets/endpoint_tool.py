"""Two small actions on one Docker endpoint, run as a subprocess in that endpoint's environment.

`python -m orchestrator.nightly.targets.endpoint_tool ping` answers whether the endpoint's daemon answers
(exit 0, or exit 3 and one line saying why); `… sweep LABEL` force-removes the containers carrying LABEL
and prints their ids. A subprocess because the endpoint is chosen by environment variables
(DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, DOCKER_CONTEXT), as for the `orch rebuild` it serves,
and the runner's own environment is shared by all its threads: it is never changed in place.
"""

from __future__ import annotations

import sys

from orchestrator.engine import connect
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, OrchError


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("ping", "sweep") or (argv[0] == "sweep") != (len(argv) == 2):
        print("usage: endpoint_tool ping | sweep KEY=VALUE", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        with connect() as engine:
            if argv[0] == "ping":
                info = engine.info()
                print(f"{info.endpoint}: Docker {info.server_version}")
            else:
                for container_id in engine.remove_containers(argv[1]):
                    print(container_id)
    except OrchError as exc:
        print(f"error[{exc.code}]: {exc.message}", file=sys.stderr)
        return exc.exit_code if exc.exit_code != 1 else EXIT_ENVIRONMENT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
