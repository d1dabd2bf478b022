"""How a nightly plan names its targets: the typed entries of the plan's `targets:` list.

Shared by the plan (nightly/plan.py validates a plan file into these) and the targets
(nightly/targets/*.py build a `Target` from one). Paths are as written in the plan, resolved by the plan
loader against the plan file's folder. Credentials are never values here: only the *names* of
environment variables that hold them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

# A plan is a file someone edits and a nightly runner executes unattended: every value that reaches a
# command line (an endpoint, a Slurm name, an sbatch argument) is checked here by its own syntax, so that
# nothing in it can be read as an option (`ssh://-oProxyCommand=…`) or a second line of a job script.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]{{2,45}}\])"
_PORT = r"(?::(?P<port>[0-9]{1,5}))?"
_ENDPOINTS = {
    "tcp": re.compile(rf"tcp://(?P<host>{_HOST}){_PORT}/?"),
    "ssh": re.compile(rf"ssh://(?:(?P<user>[A-Za-z0-9_][A-Za-z0-9._-]{{0,31}})@)?(?P<host>{_HOST}){_PORT}/?"),
    "unix": re.compile(r"unix:///[A-Za-z0-9._/-]{1,200}"),
}


def _endpoint(value: str) -> str:
    """`tcp://host[:port]`, `ssh://[user@]host[:port]` or `unix:///path`: nothing else, no part starting with `-`."""
    scheme = value.split("://", 1)[0]
    match = _ENDPOINTS[scheme].fullmatch(value) if scheme in _ENDPOINTS else None
    if match is None:
        raise ValueError(
            "not a Docker endpoint orch accepts: tcp://HOST[:PORT], ssh://[USER@]HOST[:PORT] or unix:///PATH "
            "(host names, users and paths of letters, digits, `.`, `_`, `-`, none starting with `-`)"
        )
    port = match.groupdict().get("port")
    if port is not None and not 0 < int(port) < 65536:
        raise ValueError(f"port {port} is not a TCP port")
    return value


def _slurm_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", value):
        raise ValueError("not a Slurm name: letters, digits, `_`, `.`, `-`, starting with a letter or digit")
    return value


def _sbatch_argument(value: str) -> str:
    if not re.fullmatch(r"--[a-z][a-z0-9-]*(=[^\x00-\x1f\x7f]{0,500})?", value):
        raise ValueError("an sbatch argument is one `--option` or `--option=value` on one line")
    if value.split("=", 1)[0] in ("--wrap", "--output", "--error", "--chdir"):
        raise ValueError(f"{value.split('=', 1)[0]} is orch's to set (the job script and where its output goes)")
    return value


#: Podman over SSH names the remote socket's path too (`podman system connection add` does the same).
_PODMAN_SSH = re.compile(
    rf"ssh://(?:(?P<user>[A-Za-z0-9_][A-Za-z0-9._-]{{0,31}})@)?(?P<host>{_HOST}){_PORT}(?P<path>/[A-Za-z0-9._/-]{{1,200}})"
)


def _podman_endpoint(value: str) -> str:
    """`unix:///path` (the user's own socket) or `ssh://[user@]host[:port]/path/of/podman.sock`."""
    if value.startswith("unix://"):
        return _endpoint(value)
    match = _PODMAN_SSH.fullmatch(value)
    if match is None:
        raise ValueError(
            "not a Podman endpoint orch accepts: unix:///PATH or ssh://[USER@]HOST[:PORT]/PATH/podman.sock "
            "(the remote user's socket, e.g. /run/user/1000/podman/podman.sock)"
        )
    port = match.group("port")
    if port is not None and not 0 < int(port) < 65536:
        raise ValueError(f"port {port} is not a TCP port")
    return value


Endpoint = Annotated[str, AfterValidator(_endpoint)]
PodmanEndpoint = Annotated[str, AfterValidator(_podman_endpoint)]
SlurmName = Annotated[str, AfterValidator(_slurm_name)]
SbatchArgument = Annotated[str, AfterValidator(_sbatch_argument)]


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The plan's name for the target: letters, digits, `-`, `_` (it names cells and folders).
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
    #: How many of this target's cells run at once.
    concurrency: int = Field(default=1, ge=1, le=64)
    #: `--gpus` for every cell on this target (None: orch's default, the scheduler's allocation or all).
    gpus: str | None = None


class TlsFiles(BaseModel):
    """The client side of a `tcp://` endpoint with TLS (as `DOCKER_CERT_PATH` holds them: ca, cert, key)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ca_cert: Path
    client_cert: Path
    client_key: Path


class DockerTargetSpec(_Spec):
    """A GPU server's own Docker daemon: `ssh://user@host`, `tcp://host:2376` (with `tls`), `unix://…`,
    or a Docker context by name. At most one of `docker_host` and `context`;
    neither: the engine of the machine running the night."""

    kind: Literal["docker"] = "docker"
    docker_host: Endpoint | None = None
    context: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
    tls: TlsFiles | None = None


class PodmanTargetSpec(_Spec):
    """A server's Podman, rootless as its user: the API service's socket (`podman system service`), local
    (`unix:///run/user/UID/podman/podman.sock`) or on another machine over SSH (`ssh://user@gpu-a/run/user/
    1000/podman/podman.sock`: orch forwards that socket through `ssh -L` for the cell, as `podman --remote`
    does). Neither: this user's own socket, `$XDG_RUNTIME_DIR/podman/podman.sock`. A cell fails as
    `environment` when the endpoint answers but is not Podman."""

    kind: Literal["podman"] = "podman"
    podman_host: PodmanEndpoint | None = None


class SlurmTargetSpec(_Spec):
    """A Slurm partition: each cell is an `sbatch` job running `orch rebuild` on the allocated node."""

    kind: Literal["slurm"] = "slurm"
    partition: SlurmName
    #: GPUs per job, as `--gres=gpu:N` (0: no GPU requested, e.g. a CPU partition).
    gpus_per_job: int = Field(default=0, ge=0, le=64)
    #: The job's Slurm time limit, in minutes (`--time`).
    time_limit_min: int = Field(default=60, ge=1)
    #: A job still pending after this many seconds is cancelled and reported `pending-timeout`.
    pending_timeout_s: int = Field(default=3600, ge=1)
    #: A folder every node sees (the cells' outputs are written there and collected from there).
    shared_dir: Path
    #: Extra `sbatch` arguments (`--account=…`, `--qos=…`), passed as separate arguments, never to a shell.
    sbatch_args: tuple[SbatchArgument, ...] = ()


TargetSpec = Annotated[DockerTargetSpec | PodmanTargetSpec | SlurmTargetSpec, Field(discriminator="kind")]
