"""Containers on a Docker engine: one run, the wheel feed's service, a sweep by label.

Every container is created through `_create`, the one place a spec's `Hardening` and limits become Docker
options. docker-py's `containers.run()` raises on a non-zero exit and leaves the container behind when start
fails, so runs are create → start → wait → logs → remove, the removal in `finally` (also on timeout and Ctrl-C).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

import docker
import docker.errors
import docker.types
import requests.exceptions

from orchestrator.checks.failures import explain_failure
from orchestrator.engine import IMAGE_REMOVED_HINT, MANAGED_LABEL, CopyOut, RunOutcome, Served
from orchestrator.errors import ContainerStartFailed, EnvironmentFailure, ImageNotBuilt
from orchestrator.model.platform import LABEL_PREFIX
from orchestrator.plan.specs import Hardening, RunSpec, ServiceSpec
from orchestrator.redact import redact
from orchestrator.untrusted import CappedStream

#: Who started a service container (`owner()`), so that a sweep removes only its own user's stopped services.
OWNER_LABEL = f"{LABEL_PREFIX}.owner"
ROLE_LABEL = f"{LABEL_PREFIX}.role"
#: The roles of orch's file servers (plan/specs.py ServiceSpec labels): the ones `sweep_stopped_services` removes.
SERVICE_ROLES = ("wheel-feed", "context-server")

_FEED_HINT = (
    "The feed runs the base image's own Python (`http.server`); build with --network none to install "
    "from the build context instead."
)
_CONTEXT_SERVER_HINT = (
    "The context server runs the base image's own Python (`http.server`); build with `--builder classic` "
    "to upload the context to the engine instead."
)


def _service(spec: ServiceSpec) -> tuple[str, str]:
    """What the service is called in an error, and what to do instead."""
    if spec.network == "bridge":
        return "orch's BuildKit context server", _CONTEXT_SERVER_HINT
    return "orch's wheel feed", _FEED_HINT


def hardening_options(hardening: Hardening, mem_limit: str, pids_limit: int) -> dict[str, Any]:
    """The Docker options of a container's confinement and limits: what every `_create` passes."""
    options: dict[str, Any] = {
        "cap_drop": list(hardening.cap_drop) or None,
        "security_opt": ["no-new-privileges"] if hardening.no_new_privileges else None,
        "privileged": hardening.privileged,
        "read_only": hardening.read_only_root,
        "mem_limit": mem_limit,
        "pids_limit": pids_limit,
    }
    if hardening.no_swap:
        options["memswap_limit"] = mem_limit
    return options


def _create(
    client: docker.DockerClient,
    image: str,
    *,
    labels: Mapping[str, str],
    hardening: Hardening,
    mem_limit: str,
    pids_limit: int,
    detach: bool = True,
    **options: Any,
) -> Any:
    return client.containers.create(
        image,
        labels={**labels, MANAGED_LABEL: "true"},
        detach=detach,
        **hardening_options(hardening, mem_limit, pids_limit),
        **options,
    )


def _device_requests(spec: RunSpec) -> list[docker.types.DeviceRequest]:
    requests_: list[docker.types.DeviceRequest] = []
    if spec.nvidia_device_ids:
        requests_.append(docker.types.DeviceRequest(device_ids=list(spec.nvidia_device_ids), capabilities=[["gpu"]]))
    elif spec.nvidia_gpus:
        requests_.append(docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]]))
    if spec.cdi_devices:
        requests_.append(docker.types.DeviceRequest(driver="cdi", device_ids=list(spec.cdi_devices)))
    return requests_


#: How much of a copied-out archive is read at a time (docker-py's default chunk size).
_ARCHIVE_CHUNK = 2 * 1024 * 1024


def _capped_logs(container: Any, limit: int, *, stdout: bool) -> CappedStream:
    """One of the container's streams, read in chunks and kept within `limit` bytes (head and tail).

    `GET /containers/{id}/logs` through the SDK's transport, its response closed on every way out: the SDK's
    `logs(stream=True)` leaves the streamed response open when the daemon answers an error (a sample's container
    removed by `stop_alongside` while this thread reads it: 404), and its socket to the garbage collector.
    orch's containers have no TTY, so the stream is the daemon's multiplexed one."""
    api: Any = container.client.api
    params = {"stdout": int(stdout), "stderr": int(not stdout), "follow": 0, "timestamps": 0, "tail": "all"}
    response = api._get(api._url("/containers/{0}/logs", container.id), params=params, stream=True)
    kept = CappedStream(limit)
    try:
        api._raise_for_status(response)
        for chunk in api._get_result_tty(True, response, False):
            kept.feed(chunk)
    finally:
        response.close()
    return kept


def _copy_out(container: Any, copy: CopyOut) -> None:
    """`GET /containers/{id}/archive`, written to `copy.dest` up to one byte past `copy.max_bytes`.

    The SDK's `get_archive` hands back a generator over a streamed response that nothing closes when the
    reader stops early: an archive over the limit would leave its socket open until the garbage collector
    finds it. Here the response is closed on every way out, read to the end or not."""
    api: Any = container.client.api
    response = api._get(
        api._url("/containers/{0}/archive", container.id),
        params={"path": copy.path},
        stream=True,
        headers={"Accept-Encoding": "identity"},
    )
    try:
        api._raise_for_status(response)
        written = 0
        for chunk in response.iter_content(_ARCHIVE_CHUNK, False):
            copy.dest.write(chunk[: copy.max_bytes + 1 - written])
            written += len(chunk)
            if written > copy.max_bytes:
                break  # the reader sees more than max_bytes and refuses the archive
    finally:
        response.close()


def start_failure(image: str, raw: str) -> ContainerStartFailed:
    """A container that would not start, explained by the failure catalogue (its cause and next step), or named
    as a failure orch does not know, with the daemon's words and the next diagnostic step."""
    said, next_step = explain_failure("container-start", raw)
    return ContainerStartFailed(
        f"a container of {image} did not start: {said}\nthe daemon said: {redact(raw.strip())[:2000]}",
        raw=raw,
        hint=f"next: {next_step}",
    )


def _docker_create(client: docker.DockerClient) -> Callable[[RunSpec, Mapping[str, str]], Any]:
    """Docker's create: a RunSpec's fields as the SDK's options (Podman's own is engine/podman.py)."""

    def create(spec: RunSpec, labels: Mapping[str, str]) -> Any:
        volumes = {
            str(mount.source): {"bind": mount.target, "mode": "ro" if mount.read_only else "rw"}
            for mount in spec.mounts
        }
        return _create(
            client,
            spec.image,
            labels=labels,
            hardening=spec.hardening,
            mem_limit=spec.mem_limit,
            pids_limit=spec.pids_limit,
            command=list(spec.command),
            environment=dict(spec.environment),
            volumes=volumes,
            network_mode="bridge" if spec.network else "none",
            user=spec.user,
            working_dir=spec.working_dir,
            device_requests=_device_requests(spec) or None,
            devices=[f"{node}:{node}:rwm" for node in spec.devices] or None,
            group_add=list(spec.group_add) or None,
            shm_size=spec.shm_size,
        )

    return create


def _create_and_start(
    create: Callable[[RunSpec, Mapping[str, str]], Any], spec: RunSpec, labels: Mapping[str, str]
) -> Any:
    """Create and start; the daemon's and runtime's GPU errors surface here (the toolkit's hook, CDI)."""
    try:
        container = create(spec, labels)
    except docker.errors.ImageNotFound:
        raise
    except docker.errors.APIError as exc:
        raise start_failure(spec.image, str(exc.explanation)) from None
    try:
        container.start()
    except docker.errors.APIError as exc:
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)
        raise start_failure(spec.image, str(exc.explanation)) from None
    return container


def run(
    client: docker.DockerClient,
    engine_labels: Mapping[str, str],
    spec: RunSpec,
    copy: CopyOut | None,
    create: Callable[[RunSpec, Mapping[str, str]], Any] | None = None,
) -> RunOutcome:
    """create → start → wait → logs → `copy` (on a clean exit) → remove, the removal in `finally`.

    `create`: how the container is created (not started); Docker's SDK call unless the engine needs its own
    (Podman's, engine/podman.py)."""
    started = time.monotonic()
    container = None
    try:
        container = _create_and_start(create or _docker_create(client), spec, {**engine_labels, **spec.labels})
        timed_out = False
        exit_code: int | None
        try:
            result = container.wait(timeout=spec.timeout_s)
            exit_code = int(result.get("StatusCode", -1))
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            timed_out, exit_code = True, None
            container.kill()
        stdout = _capped_logs(container, spec.max_log_bytes, stdout=True)
        stderr = _capped_logs(container, spec.max_log_bytes, stdout=False)
        container.reload()
        oom_killed = bool((container.attrs.get("State") or {}).get("OOMKilled"))
        if copy is not None and exit_code == 0:
            _copy_out(container, copy)
        return RunOutcome(
            exit_code=exit_code,
            stdout=stdout.text(),
            stderr=stderr.text(),
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            oom_killed=oom_killed,
            stdout_cut=stdout.cut,
            stderr_cut=stderr.cut,
        )
    except docker.errors.ImageNotFound:
        raise ImageNotBuilt(f"image {spec.image} is not in the engine", hint=IMAGE_REMOVED_HINT) from None
    except docker.errors.APIError as exc:
        raise EnvironmentFailure(f"running a container of {spec.image} failed: {exc.explanation}") from None
    finally:
        if container is not None:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


def owner() -> str:
    """Who started a service container: this user on this host (`uid@hostname`), its `OWNER_LABEL` value."""
    return f"{os.getuid()}@{socket.gethostname()}"


def sweep_stopped_services(client: docker.DockerClient) -> list[str]:
    """Remove this user's service containers on this host that have stopped: their lifeline ended, so the orch
    that started them is gone (killed) and will not remove them. A running one may serve a build in progress,
    and another user's or another host's is never touched."""
    filters: dict[str, str | list[str] | bool] = {
        "label": [f"{MANAGED_LABEL}=true", f"{OWNER_LABEL}={owner()}", ROLE_LABEL],
        "status": "exited",
    }
    removed = []
    for container in client.containers.list(all=True, filters=filters):
        if (container.labels or {}).get(ROLE_LABEL) in SERVICE_ROLES:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                container.remove(force=True)
                removed.append(str(container.id))
    return removed


@contextlib.contextmanager
def serve(
    client: docker.DockerClient, engine_labels: Mapping[str, str], spec: ServiceSpec, files: IO[bytes]
) -> Iterator[Served]:
    """The service's container, `files` put in at `/` (the archive API: the engine may be on another machine),
    started, ready; removed on the way out whatever happened. Only errors of starting it are named here.

    Its lifeline: the container is created with an open stdin that closes when its one attached client goes
    (StdinOnce), and this block holds that attachment. If this process dies (`kill -9`, an OOM kill), the
    engine closes the stdin and the server (probes/serve_files.py) exits at once; the next `serve` of the same
    user on the same host removes the stopped container (`sweep_stopped_services`)."""
    sweep_stopped_services(client)
    container = None
    lifeline = None
    try:
        try:
            container = _create(
                client,
                spec.image,
                labels={**engine_labels, **spec.labels, OWNER_LABEL: owner()},
                hardening=spec.hardening,
                mem_limit=spec.mem_limit,
                pids_limit=spec.pids_limit,
                command=list(spec.command),
                environment=dict(spec.environment),
                network_mode=spec.network,
                user=spec.user,
                detach=False,  # with stdin_open: StdinOnce, the lifeline (docker-py sets it for attached creates)
                stdin_open=True,
            )
            lifeline = container.attach_socket(params={"stdin": 1, "stream": 1})
            container.put_archive("/", files)
            container.start()
            _wait_until_ready(container, spec)
            url = _bridge_url(container, spec) if spec.network == "bridge" else None
        except docker.errors.ImageNotFound:
            raise ImageNotBuilt(f"image {spec.image} is not in the engine", hint=IMAGE_REMOVED_HINT) from None
        except docker.errors.APIError as exc:
            name, hint = _service(spec)
            raise EnvironmentFailure(f"starting {name} failed: {redact(str(exc.explanation))}", hint=hint) from None
        yield Served(str(container.id), url)
    finally:
        if lifeline is not None:
            _close_lifeline(lifeline)
        if container is not None:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                container.remove(force=True)


def _close_lifeline(lifeline: Any) -> None:
    """End the attachment now. docker-py hands back the socket's file object (a `SocketIO` over the Unix socket)
    with the HTTP response it came from: the response is closed first (closing the file object under it makes
    the response fail when it is collected), then the socket itself, which the response leaves open."""
    inner = getattr(lifeline, "_sock", lifeline)
    response = getattr(lifeline, "_response", None)
    if response is not None:
        with contextlib.suppress(Exception):
            response.close()
    if isinstance(inner, socket.socket):
        with contextlib.suppress(OSError):
            inner.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            inner.close()


def _bridge_url(container: Any, spec: ServiceSpec) -> str:
    """`http://<address>:<port>/` on the engine's bridge: where the engine (BuildKit's HTTP source) reaches it."""
    container.reload()
    networks = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
    address = next((str(n.get("IPAddress")) for n in networks.values() if n.get("IPAddress")), "")
    if not address:
        raise EnvironmentFailure(
            f"orch's BuildKit context server (a container of {spec.image[:19]}) has no address on the engine's "
            "bridge network, so BuildKit cannot fetch the build context from it",
            hint=_CONTEXT_SERVER_HINT,
        )
    return f"http://{address}:{spec.port}/"


def _wait_until_ready(container: Any, spec: ServiceSpec) -> None:
    """Until the service prints `ready_line`; one that exits or stays silent is one clear error."""
    deadline = time.monotonic() + spec.start_timeout_s
    while True:
        container.reload()
        logs = container.logs(stdout=True, stderr=True)[-4096:].decode("utf-8", errors="replace")
        if spec.ready_line in logs:
            return
        if container.status != "running" or time.monotonic() > deadline:
            last = redact(logs.strip().splitlines()[-1]) if logs.strip() else f"status {container.status}"
            name, hint = _service(spec)
            raise EnvironmentFailure(
                f"{name} (a container of the base image {spec.image[:19]}) did not start: {last}", hint=hint
            )
        time.sleep(0.05)


def remove_labelled(client: docker.DockerClient, label: str) -> list[str]:
    """Force-remove every container with this label (`key=value`), running or not; their ids."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": label}):
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass  # gone meanwhile: as good as removed
        except docker.errors.APIError as exc:
            # 409 "removal … is already in progress": the daemon removes it (a cancelled build's step
            # container); it is still listed until then, so a caller that sweeps again sees it go.
            if exc.status_code != 409:
                raise
        removed.append(str(container.id))
    return removed
