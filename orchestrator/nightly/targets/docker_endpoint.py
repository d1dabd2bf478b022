"""A GPU server's own Docker daemon as a nightly target: each cell is an `orch rebuild` aimed at it.

The rebuild runs as a subprocess (its own process group) with the endpoint in its environment
(DOCKER_HOST + TLS files, or DOCKER_CONTEXT) and the night's tag namespace, so builds and probes happen
on that server's daemon while this process only waits. Cells on different endpoints run in parallel;
nothing here talks to a daemon except through `orch` itself (and endpoint_tool for a ping and a sweep).

At the cell's timeout the group gets SIGINT first (orch then removes the containers it started, as on
Ctrl-C), SIGKILL after a grace period, and the containers the cell left are removed by label: a cold
cell's objects carry `io.orch.cell=<token>` (through ORCH_LABELS). A warm cell gets no such label, as a
stage-opening label would make its build miss the cache (engine/labels.py); it relies on orch's own
clean-up and on the daemon dropping a build whose client went away.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

from orchestrator.engine.labels import ENV_VAR as LABELS_VAR
from orchestrator.engine.labels import TAG_NAMESPACE_VAR
from orchestrator.errors import BadInput
from orchestrator.nightly.cell import CellOutcome, CellRequest
from orchestrator.nightly.target_specs import DockerTargetSpec, PodmanTargetSpec
from orchestrator.nightly.targets.outcome import (
    LOGS,
    STDERR,
    STDOUT,
    CellTimer,
    first_error,
    rebuild_command,
    status_for_exit_code,
)

ORCH: tuple[str, ...] = (sys.executable, "-m", "orchestrator")
CELL_LABEL = "io.orch.cell"
_ENDPOINT_VARS = ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT")
_ENDPOINT_TOOL = "orchestrator.nightly.targets.endpoint_tool"


class DockerTarget:
    def __init__(
        self,
        spec: DockerTargetSpec,
        *,
        orch: tuple[str, ...] = ORCH,
        grace_s: float = 20.0,
        ping_timeout_s: float = 30.0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        # Neither: this machine's own engine, as `orch` finds it (DOCKER_HOST, the context, the socket).
        if spec.docker_host is not None and spec.context is not None:
            raise BadInput(
                f"target {spec.name}: give one of docker_host and context, not both",
                hint="docker_host: ssh://user@gpu-a or tcp://gpu-a:2376 (with tls); context: a `docker context` name; "
                "neither: the engine of the machine running the night.",
            )
        if spec.tls is not None and spec.docker_host is None:
            raise BadInput(f"target {spec.name}: tls goes with a tcp:// docker_host (a context carries its own TLS)")
        self.spec = spec
        self._common(spec, orch, grace_s, ping_timeout_s, environ)

    def _common(
        self,
        spec: DockerTargetSpec | PodmanTargetSpec,
        orch: tuple[str, ...],
        grace_s: float,
        ping_timeout_s: float,
        environ: Mapping[str, str] | None,
    ) -> None:
        """What every endpoint target keeps of its spec and settings (the Podman target's too)."""
        self._gpus = spec.gpus
        self.name = spec.name
        self.concurrency = spec.concurrency
        self._orch = orch
        self._grace_s = grace_s
        self._ping_timeout_s = ping_timeout_s
        self._environ = dict(os.environ if environ is None else environ)

    # -- the environment of the cell's subprocesses -----------------------------------------------

    def _base_environment(self, request: CellRequest, cell_label: str | None, *, local: bool) -> dict[str, str]:
        """This process's environment for the cell: the night's tag namespace and cell label added, the
        endpoint variables dropped unless the cell runs on this machine's own engine (`local`)."""
        env = {key: value for key, value in self._environ.items() if local or key not in _ENDPOINT_VARS}
        env[TAG_NAMESPACE_VAR] = request.tag_namespace
        if cell_label is not None:
            env[LABELS_VAR] = ",".join(filter(None, [env.get(LABELS_VAR, ""), cell_label]))
        return env

    @contextmanager
    def _environment(self, request: CellRequest, cell_label: str | None) -> Iterator[dict[str, str]]:
        local = self.spec.docker_host is None and self.spec.context is None
        env = self._base_environment(request, cell_label, local=local)
        if local:
            yield env
            return
        if self.spec.context is not None:
            env["DOCKER_CONTEXT"] = self.spec.context
            yield env
            return
        assert self.spec.docker_host is not None  # neither is the local case above
        env["DOCKER_HOST"] = self.spec.docker_host
        if self.spec.tls is None:
            yield env
            return
        # DOCKER_CERT_PATH is a folder with fixed names; the plan names three files anywhere. Links in a
        # private temporary folder: the key is never copied, and never into the night's history.
        with tempfile.TemporaryDirectory(prefix="orch-tls-") as folder:
            for name, path in (
                ("ca.pem", self.spec.tls.ca_cert),
                ("cert.pem", self.spec.tls.client_cert),
                ("key.pem", self.spec.tls.client_key),
            ):
                (Path(folder) / name).symlink_to(path.resolve())
            env["DOCKER_TLS_VERIFY"] = "1"
            env["DOCKER_CERT_PATH"] = folder
            yield env

    # -- the cell -----------------------------------------------------------------------------------

    def run_cell(self, request: CellRequest) -> CellOutcome:
        logs = request.out / LOGS
        logs.mkdir(parents=True, exist_ok=True)
        token = f"{request.cell_id}.{uuid.uuid4().hex[:12]}"
        cell_label = f"{CELL_LABEL}={token}" if request.cache == "cold" else None
        gpus = request.gpus if request.gpus is not None else self._gpus

        outcome = CellTimer(request.cell_id)

        with self._environment(request, cell_label) as env:
            unreachable = self._ping(env)
            if unreachable is not None:
                reason = f"endpoint {self.name} does not answer: {unreachable}"
                (logs / STDERR).write_text(reason + "\n", encoding="utf-8")
                return outcome("environment", error=reason)
            command = rebuild_command(request, self._orch, gpus=gpus)
            with (logs / STDOUT).open("wb") as stdout, (logs / STDERR).open("wb") as stderr:
                try:
                    process = subprocess.Popen(
                        command, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, start_new_session=True
                    )
                except OSError as exc:
                    return outcome("error", error=f"could not start {command[0]}: {exc.strerror or exc}")
                outcome.handle = f"pid {process.pid}"
                try:
                    code = process.wait(timeout=max(0.0, request.timeout_s - (time.monotonic() - outcome.started)))
                except subprocess.TimeoutExpired:
                    self._stop(process)
                    left = self._sweep(env, cell_label)
                    return outcome("timeout", error=f"stopped after the cell's timeout of {request.timeout_s}s{left}")
                except BaseException:  # Ctrl-C or the runner stopping: the cell's processes stop with it
                    self._stop(process)
                    self._sweep(env, cell_label)
                    raise
        status = status_for_exit_code(code)
        if status == "passed":
            return outcome(status, code=code)
        return outcome(status, code=code, error=first_error(request.out, logs / STDERR))

    def _ping(self, env: dict[str, str]) -> str | None:
        """Why the endpoint does not answer (one line), or None: a fast check before a long rebuild."""
        try:
            done = subprocess.run(
                [sys.executable, "-m", _ENDPOINT_TOOL, "ping"],
                env=env,
                capture_output=True,
                text=True,
                timeout=self._ping_timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"no answer within {self._ping_timeout_s:g}s"
        if done.returncode == 0:
            return None
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return lines[-1].strip() if lines else f"exit code {done.returncode}"

    def _stop(self, process: subprocess.Popen[bytes]) -> None:
        """SIGINT to the cell's process group (orch cleans up as on Ctrl-C), SIGKILL after the grace period."""
        for sig, wait_s in ((signal.SIGINT, self._grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        # The group may outlive its leader (a child that ignored SIGINT): it goes too.
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    def _sweep(self, env: dict[str, str], cell_label: str | None) -> str:
        """Remove the containers the stopped cell left; a few words for its outcome."""
        if cell_label is None:
            return ""
        try:
            done = subprocess.run(
                [sys.executable, "-m", _ENDPOINT_TOOL, "sweep", cell_label],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return "; its containers could not be removed (the endpoint did not answer)"
        if done.returncode != 0:
            return f"; its containers could not be removed: {done.stderr.strip().splitlines()[-1:]}"
        removed = len(done.stdout.split())
        return f"; {removed} container(s) it left removed" if removed else ""
