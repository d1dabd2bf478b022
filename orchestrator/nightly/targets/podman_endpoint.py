"""A server's rootless Podman as a nightly target: the same cells as a Docker endpoint, aimed at Podman's API socket.

A cell is the Docker target's (nightly/targets/docker_endpoint.py): an `orch rebuild` subprocess with the
endpoint in DOCKER_HOST, the same timeout, SIGINT-then-SIGKILL and sweep by the cell's label, and the same
outcome. Two things differ:
- the endpoint must answer *as Podman* (the ping asks `/version`): a Docker daemon at that socket would build
  the cell with another engine than the plan says, so the cell fails as `environment` instead;
- `ssh://user@host/path/podman.sock` is reached the way `podman --remote` reaches it: the remote socket is
  forwarded to a private local one for the cell (`ssh -N -L LOCAL:REMOTE`, batch mode: keys or an agent,
  never a password prompt), which DOCKER_HOST then names. docker-py's own `ssh://` would dial the remote
  *Docker* daemon (`docker system dial-stdio`), not Podman's socket.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.errors import BadInput
from orchestrator.nightly.cell import CellRequest
from orchestrator.nightly.target_specs import PodmanTargetSpec
from orchestrator.nightly.targets.docker_endpoint import ORCH, DockerTarget
from orchestrator.nightly.targets.endpoint_tool import EXPECT_PODMAN_VAR

#: How long the forwarded socket may take to appear (the SSH handshake).
FORWARD_WAIT_S = 20.0


def default_podman_socket(environ: Mapping[str, str]) -> str:
    """This user's own API socket: `$XDG_RUNTIME_DIR/podman/podman.sock` (`/run/user/UID/…` without it)."""
    runtime = environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return f"unix://{runtime}/podman/podman.sock"


def ssh_forward_command(endpoint: str, local_socket: Path) -> list[str]:
    """`ssh -N -L LOCAL:REMOTE [user@]host`: the plan's endpoint (validated by its syntax) as ssh's arguments."""
    parts = urlsplit(endpoint)
    if parts.scheme != "ssh" or not parts.hostname or not parts.path:
        raise ValueError(f"not an ssh:// Podman endpoint: {endpoint}")
    destination = f"{parts.username}@{parts.hostname}" if parts.username else parts.hostname
    command = ["ssh", "-N", "-T", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes"]
    command += ["-o", "StreamLocalBindUnlink=yes", "-L", f"{local_socket}:{parts.path}"]
    if parts.port is not None:
        command += ["-p", str(parts.port)]
    return [*command, "--", destination]


class PodmanTarget(DockerTarget):
    def __init__(
        self,
        spec: PodmanTargetSpec,
        *,
        orch: tuple[str, ...] = ORCH,
        grace_s: float = 20.0,
        ping_timeout_s: float = 30.0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        # Not DockerTarget's __init__: its checks are of docker_host/context/tls, which a Podman spec has not.
        self.podman_spec = spec
        self._common(spec, orch, grace_s, ping_timeout_s, environ)

    @contextmanager
    def _environment(self, request: CellRequest, cell_label: str | None) -> Iterator[dict[str, str]]:
        endpoint = self.podman_spec.podman_host or default_podman_socket(self._environ)
        env = self._base_environment(request, cell_label, local=False)
        env[EXPECT_PODMAN_VAR] = "1"
        if not endpoint.startswith("ssh://"):
            env["DOCKER_HOST"] = endpoint
            yield env
            return
        with _forwarded(endpoint) as local:
            env["DOCKER_HOST"] = f"unix://{local}"
            yield env


@contextmanager
def _forwarded(endpoint: str) -> Iterator[Path]:
    """The remote socket forwarded to a private local one while the block runs; ssh stopped after it."""
    with tempfile.TemporaryDirectory(prefix="orch-podman-") as folder:
        local = Path(folder) / "podman.sock"
        process = subprocess.Popen(
            ssh_forward_command(endpoint, local),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + FORWARD_WAIT_S
            while not local.exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            # The ping that follows names a forward that failed ("the socket does not exist"); ssh's own
            # words go to the orch process's stderr for the night's log.
            yield local
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def podman_publish_endpoint(spec: PodmanTargetSpec, environ: Mapping[str, str] | None = None) -> str:
    """Where the night's publisher reaches a Podman target's images: its unix socket.

    Over `ssh://` the cell's forward has ended by the time the night publishes, and a second forward for the
    publisher is not made: such a target's images are not published (BadInput, said when the night starts)."""
    endpoint = spec.podman_host or default_podman_socket(os.environ if environ is None else environ)
    if endpoint.startswith("ssh://"):
        raise BadInput(
            f"target {spec.name}: a night publishes from a Podman target on this machine (unix://) only",
            hint="Publish from a Docker target or a local Podman socket, or leave `publish` out of this plan.",
        )
    return endpoint
