"""How a nightly plan names its targets: the typed entries of the plan's `targets:` list.

Shared by the plan (nightly/plan.py validates a plan file into these) and the targets
(nightly/targets/*.py build a `Target` from one). Paths are as written in the plan, resolved by the plan
loader against the plan file's folder. Credentials are never values here: only the *names* of
environment variables that hold them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


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
    docker_host: str | None = None
    context: str | None = None
    tls: TlsFiles | None = None


class SlurmTargetSpec(_Spec):
    """A Slurm partition: each cell is an `sbatch` job running `orch rebuild` on the allocated node."""

    kind: Literal["slurm"] = "slurm"
    partition: str
    #: GPUs per job, as `--gres=gpu:N` (0: no GPU requested, e.g. a CPU partition).
    gpus_per_job: int = Field(default=0, ge=0, le=64)
    #: The job's Slurm time limit, in minutes (`--time`).
    time_limit_min: int = Field(default=60, ge=1)
    #: A job still pending after this many seconds is cancelled and reported `pending-timeout`.
    pending_timeout_s: int = Field(default=3600, ge=1)
    #: A folder every node sees (the cells' outputs are written there and collected from there).
    shared_dir: Path
    #: Extra `sbatch` arguments (`--account=…`, `--qos=…`), passed as separate arguments, never to a shell.
    sbatch_args: tuple[str, ...] = ()


TargetSpec = Annotated[DockerTargetSpec | SlurmTargetSpec, Field(discriminator="kind")]
