"""The Docker adapter of the engine interface: the only module that imports the Docker SDK.

Two docker-py traps shape it (docker/docker-py; ../shared/STYLE.md):
- `images.build()` drains the whole stream before returning, so builds use the low-level streaming
  `api.build(decode=True)` and report each line as it comes;
- `containers.run()` raises on a non-zero exit and leaves the container behind when start fails, so runs
  are create → start → wait → logs → remove, the removal in `finally` (also on timeout and Ctrl-C).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Self

import docker
import docker.errors
import docker.tls
import docker.types
import requests.exceptions

from orchestrator.engine import (
    MANAGED_LABEL,
    BuildNetwork,
    BuildOutcome,
    EngineInfo,
    FeedSpec,
    ImageInfo,
    LayerEntry,
    RegistryAuth,
    RunOutcome,
    RunSpec,
)
from orchestrator.engine.labels import (
    DEFAULT_TAG_NAMESPACE,
    extra_labels_from_environment,
    tag_namespace_from_environment,
)
from orchestrator.errors import (
    BaseImageMissing,
    EngineUnavailable,
    EnvironmentFailure,
    ImageNotBuilt,
    RegistryError,
)
from orchestrator.model.platform import LABEL_PREFIX
from orchestrator.redact import redact
from orchestrator.untrusted import CappedStream

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
#: Bytes of a build's log kept (head and tail): a pip install prints a few MB at most.
BUILD_LOG_BYTES = 32 << 20
# The classic builder wraps a step's stderr in colour escapes; they carry nothing a log reader needs.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_IMAGE_REMOVED_HINT = (
    "The image was removed by another user or process (docker rmi or a prune on the shared engine) while orch "
    "was using it; run the command again."
)


_FEED_HINT = (
    "The feed runs the base image's own Python (`python -m http.server`); build with --network none to install "
    "from the build context instead."
)
#: Seconds the wheel feed gets to say it listens (it prints `ready_line`): Python starting, nothing more.
FEED_START_TIMEOUT_S = 30.0


def _build_network_mode(network: BuildNetwork, feed: str | None) -> str | None:
    """The build API's `networkmode`: `container:<feed>` joins the feed's namespace (its loopback, nothing else)."""
    if network == "wheel-feed":
        if feed is None:
            raise ValueError("a wheel-feed build needs the feed's container id")
        return f"container:{feed}"
    return {"none": "none", "default": None, "host": "host"}[network]


def _env_map(env: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in env or ():
        key, _, value = item.partition("=")
        out[key] = value
    return out


class _ApiClient(docker.APIClient):
    """The SDK's API client, keeping a TLS endpoint's own CA (`DOCKER_CERT_PATH/ca.pem`).

    requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE from the environment replace a session's own CA at
    each request (psf/requests#3829): with either set (common on machines behind a TLS proxy), a
    `tcp://` daemon with --tlsverify fails as "certificate verify failed" although the docker CLI reaches it.
    """

    def merge_environment_settings(self, *args: Any, **kwargs: Any) -> Any:
        settings = super().merge_environment_settings(*args, **kwargs)
        if isinstance(self.verify, str):
            settings["verify"] = self.verify
        return settings


class _DockerClient(docker.DockerClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # as the SDK's, with the client above
        self.api = _ApiClient(*args, **kwargs)


def current_context_endpoint() -> tuple[str | None, Any]:
    """The Docker CLI's current context (`docker context use NAME`), when it is not the default one.

    DOCKER_HOST wins when set (as for the CLI); DOCKER_CONTEXT names a context explicitly.
    """
    from docker.context import ContextAPI

    name = os.environ.get("DOCKER_CONTEXT")
    try:
        context = ContextAPI.get_context(name) if name else ContextAPI.get_current_context()
    except docker.errors.DockerException:
        return None, None
    if context is None or context.name == "default":
        return None, None
    return context.Host, context.TLSConfig


class DockerEngine:
    def __init__(
        self,
        client: docker.DockerClient,
        endpoint: str,
        labels: Mapping[str, str] | None = None,
        tag_namespace: str = DEFAULT_TAG_NAMESPACE,
    ) -> None:
        self._client = client
        self._endpoint = endpoint
        self._labels = dict(labels or {})
        self._tag_namespace = tag_namespace

    @property
    def labels(self) -> Mapping[str, str]:
        return self._labels

    @property
    def tag_namespace(self) -> str:
        return self._tag_namespace

    @classmethod
    def connect(
        cls,
        base_url: str | None = None,
        tls_files: tuple[str, str, str] | None = None,
        context: str | None = None,
    ) -> DockerEngine:
        """`tls_files`: (CA, client certificate, client key) for a `tcp://` endpoint with TLS, as a nightly
        plan's Docker target names them (otherwise DOCKER_TLS_VERIFY/DOCKER_CERT_PATH, as the CLI reads);
        `context`: a Docker context by name (its endpoint and TLS), instead of `base_url`."""
        tls: Any = None
        if context is not None:
            from docker.context import ContextAPI

            try:
                found = ContextAPI.get_context(context)
            except docker.errors.DockerException as exc:
                raise EngineUnavailable(f"Docker context {context!r}: {redact(str(exc))}") from None
            if found is None:
                raise EngineUnavailable(f"no Docker context named {context!r} (`docker context ls` lists them)")
            base_url, tls = found.Host, found.TLSConfig
        elif base_url is not None and tls_files is not None:
            ca_cert, client_cert, client_key = tls_files
            tls = docker.tls.TLSConfig(client_cert=(client_cert, client_key), ca_cert=ca_cert, verify=ca_cert)
        labels = extra_labels_from_environment(os.environ)  # bad input fails before any connection
        tag_namespace = tag_namespace_from_environment(os.environ)
        if base_url is None and not os.environ.get("DOCKER_HOST"):
            base_url, tls = current_context_endpoint()
        endpoint = base_url or os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
        hint = "Start one (as root: `make engine`, or `dockerd &`), or point DOCKER_HOST at a running engine."
        # docker-py leaks its socket when a unix socket path does not exist; say so before it tries.
        if endpoint.startswith("unix://") and not Path(endpoint.removeprefix("unix://")).exists():
            raise EngineUnavailable(f"no Docker engine answers at {endpoint}: the socket does not exist", hint=hint)
        client: docker.DockerClient | None = None
        try:
            client = _DockerClient(base_url=base_url, tls=tls) if base_url else _DockerClient.from_env()
            client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            if client is not None:
                client.close()
            raise EngineUnavailable(
                f"no Docker engine answers at {redact(endpoint)}: {redact(str(exc).splitlines()[0])}", hint=hint
            ) from None
        return cls(client, endpoint, labels, tag_namespace)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- facts -------------------------------------------------------------------------------------

    def info(self) -> EngineInfo:
        info: dict[str, Any] = self._client.info()
        version: dict[str, Any] = self._client.version()
        return EngineInfo(
            endpoint=redact(self._endpoint),
            server_version=str(version.get("Version", "")),
            api_version=str(version.get("ApiVersion", "")),
            os=str(info.get("OperatingSystem", "")),
            runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
            cdi_spec_dirs=tuple(info.get("CDISpecDirs") or ()),
        )

    def image(self, ref: str) -> ImageInfo | None:
        try:
            image = self._client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise EnvironmentFailure(f"inspecting image {ref} failed: {exc.explanation}") from None
        config = image.attrs.get("Config") or {}
        return ImageInfo(
            id=str(image.id),
            tags=tuple(image.tags),
            labels=dict(config.get("Labels") or {}),
            env=_env_map(config.get("Env")),
            repo_digests=tuple(image.attrs.get("RepoDigests") or ()),
            size=int(image.attrs.get("Size") or 0),
        )

    def containers(self, label: str) -> list[str]:
        return [str(c.id) for c in self._client.containers.list(all=True, filters={"label": label})]

    def remove_containers(self, label: str) -> list[str]:
        removed = []
        for container in self._client.containers.list(all=True, filters={"label": label}):
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

    # -- images ------------------------------------------------------------------------------------

    def import_rootfs(self, tar_path: Path, repository: str, tag: str, changes: Sequence[str]) -> str:
        try:
            self._client.api.import_image_from_file(
                str(tar_path), repository=repository, tag=tag, changes=list(changes)
            )
        except docker.errors.APIError as exc:
            raise EnvironmentFailure(f"docker import of {repository}:{tag} failed: {exc.explanation}") from None
        imported = self.image(f"{repository}:{tag}")
        if imported is None:
            raise EnvironmentFailure(f"docker import reported success but {repository}:{tag} is not there")
        return imported.id

    def remove_image(self, ref: str) -> None:
        try:
            self._client.images.remove(ref, force=True)
        except docker.errors.ImageNotFound:
            return

    def pull(self, ref: str) -> ImageInfo:
        """Pull a *base* image: only a base is ever pulled, so only here is a missing image `base-image-missing`.

        An image orch built (or was given) that is missing is `ImageNotBuilt` wherever it is used (run,
        save, history): saying "base image" there would send the user after the wrong image.
        """
        try:
            self._client.images.pull(ref)
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            explanation = getattr(exc, "explanation", None) or str(exc)
            raise BaseImageMissing(
                f"base image {ref} is not in the engine and cannot be pulled: {redact(str(explanation))}",
                hint="Build a local base with `orch base` (no registry needed) and set system.base_image.ref to it, "
                "or load the image with `docker load`.",
            ) from None
        pulled = self.image(ref)
        if pulled is None:
            raise BaseImageMissing(f"pulling {ref} reported success but the image is not there")
        return pulled

    # -- registries --------------------------------------------------------------------------------

    @staticmethod
    def _auth_config(auth: RegistryAuth | None) -> dict[str, str] | None:
        # None lets docker-py read the user's own `docker login` (~/.docker/config.json), as the CLI does.
        return None if auth is None else {"username": auth.username, "password": auth.password}

    @staticmethod
    def _scrubbed(text: str, auth: RegistryAuth | None) -> str:
        """One line of a registry's answer, with any echo of the password replaced (and URLs redacted)."""
        if auth is not None and auth.password:
            text = text.replace(auth.password, "****")
        return redact(text.strip().splitlines()[0] if text.strip() else "no answer")

    def _registry_stream(self, chunks: Iterable[Any], what: str, auth: RegistryAuth | None) -> str | None:
        """Drain a push or pull stream; the pushed digest (aux.Digest) when there is one; RegistryError on error."""
        digest: str | None = None
        for chunk in chunks:
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk:
                raise RegistryError(f"{what} failed: {self._scrubbed(str(chunk['error']), auth)}")
            aux = chunk.get("aux")
            if isinstance(aux, dict) and "Digest" in aux:
                digest = str(aux["Digest"])
        return digest

    def push(self, repository: str, tag: str, auth: RegistryAuth | None = None) -> str:
        what = f"pushing {repository}:{tag}"
        try:
            stream = self._client.api.push(
                repository, tag=tag, stream=True, decode=True, auth_config=self._auth_config(auth)
            )
            digest = self._registry_stream(stream, what, auth)
        except docker.errors.ImageNotFound:
            raise ImageNotBuilt(f"image {repository}:{tag} is not in the engine", hint=_IMAGE_REMOVED_HINT) from None
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            explanation = str(getattr(exc, "explanation", None) or exc)
            raise RegistryError(f"{what} failed: {self._scrubbed(explanation, auth)}") from None
        if digest is None:
            raise RegistryError(f"{what}: the engine reported no digest for the pushed image")
        return digest

    def pull_by_digest(self, reference: str, auth: RegistryAuth | None = None) -> ImageInfo:
        name, _, digest = reference.partition("@")
        if not digest.startswith("sha256:"):
            raise RegistryError(f"{reference} names no digest; orch pulls only by digest (a tag can move)")
        what = f"pulling {reference}"
        try:
            stream = self._client.api.pull(
                name, tag=digest, stream=True, decode=True, auth_config=self._auth_config(auth)
            )
            self._registry_stream(stream, what, auth)
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            explanation = str(getattr(exc, "explanation", None) or exc)
            raise RegistryError(f"{what} failed: {self._scrubbed(explanation, auth)}") from None
        pulled = self.image(reference)
        if pulled is None:
            raise RegistryError(f"{what} reported success but the image is not in the engine")
        return pulled

    def untag(self, ref: str) -> None:
        image = self.image(ref)
        if image is None or ref not in image.tags or len(image.tags) < 2:
            return  # its only name: removing it would remove the image, which is not ours to decide here
        try:
            self._client.api.remove_image(ref, force=False, noprune=True)
        except docker.errors.APIError as exc:
            raise EnvironmentFailure(f"removing the tag {ref} failed: {exc.explanation}") from None

    def history(self, ref: str) -> list[str]:
        """The instruction behind every layer (`docker history --no-trunc`), newest first."""
        try:
            layers: list[dict[str, Any]] = self._client.api.history(ref)  # type: ignore[no-untyped-call]
            return [str(layer.get("CreatedBy", "")) for layer in layers]
        except docker.errors.ImageNotFound:
            raise ImageNotBuilt(f"image {ref} is not in the engine", hint=_IMAGE_REMOVED_HINT) from None

    def image_layers(self, ref: str) -> list[LayerEntry]:
        """docker-py's history of `ref` (`CreatedBy`, `Size` of each entry), turned oldest first."""
        try:
            entries: list[dict[str, Any]] = self._client.api.history(ref)  # type: ignore[no-untyped-call]
        except docker.errors.ImageNotFound:
            raise ImageNotBuilt(f"image {ref} is not in the engine", hint=_IMAGE_REMOVED_HINT) from None
        return [
            LayerEntry(created_by=str(entry.get("CreatedBy") or ""), size=max(0, int(entry.get("Size") or 0)))
            for entry in reversed(entries)
        ]

    def save(self, ref: str, dest: IO[bytes]) -> None:
        """`docker save REF` streamed into `dest` (saved by tag, so `docker load` restores the tag too)."""
        try:
            response = self._client.api.get_image(ref)
            for chunk in response:
                dest.write(chunk)
        except docker.errors.ImageNotFound:
            raise ImageNotBuilt(f"image {ref} is not in the engine", hint=_IMAGE_REMOVED_HINT) from None
        except docker.errors.APIError as exc:
            raise EnvironmentFailure(f"docker save of {ref} failed: {exc.explanation}") from None

    def load(self, source: IO[bytes] | Iterable[bytes]) -> list[str]:
        """`docker load` from a (possibly gzip-compressed) tar: a file, or chunks sent as they come."""
        loaded: list[str] = []
        try:
            for message in self._client.api.load_image(source):  # type: ignore[no-untyped-call]
                text = str(message.get("stream", "")).strip()
                if "error" in message:
                    raise EnvironmentFailure(f"docker load failed: {message['error']}")
                for prefix in ("Loaded image ID: ", "Loaded image: "):
                    if text.startswith(prefix):
                        loaded.append(text[len(prefix) :])
        except docker.errors.APIError as exc:
            raise EnvironmentFailure(f"docker load failed: {exc.explanation}") from None
        return loaded

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        """Tag an image by id. Never forced: the caller has checked the tag is new or already this image's."""
        try:
            self._client.api.tag(image_id, repository, tag, force=False)
        except docker.errors.APIError as exc:
            raise EnvironmentFailure(
                f"tagging {image_id[:19]} as {repository}:{tag} failed: {exc.explanation}"
            ) from None

    def build(
        self,
        context_tar: IO[bytes],
        tag: str,
        *,
        network: BuildNetwork,
        labels: Mapping[str, str] | None = None,
        no_cache: bool = False,
        on_line: Callable[[str], None] | None = None,
        feed: str | None = None,
    ) -> BuildOutcome:
        # A RUN step is code from the packages being installed: what it prints is kept within a bound.
        # Docker calls only: reading the log (the failed step, pip's and apt's errors) is build_log's job.
        log = CappedStream(BUILD_LOG_BYTES)
        image_id: str | None = None
        error: str | None = None
        try:
            stream = self._client.api.build(
                fileobj=context_tar,
                custom_context=True,
                tag=tag,
                rm=True,
                forcerm=True,  # intermediate containers go even when a step fails
                decode=True,
                nocache=no_cache,
                network_mode=_build_network_mode(network, feed),
                labels=dict(labels or {}),
                # docker-py would copy proxy settings from ~/.docker/config.json into build args, which
                # `docker history` shows: a proxy URL with credentials would leak into the image.
                use_config_proxy=False,
            )
            for chunk in stream:
                if "stream" in chunk:
                    for raw in str(chunk["stream"]).splitlines():
                        line = redact(_ANSI.sub("", raw))
                        log.feed(line.encode("utf-8", errors="replace") + b"\n")
                        if on_line is not None:
                            on_line(line)
                elif "error" in chunk:
                    error = redact(str(chunk["error"]).strip())
                    log.feed(f"ERROR: {error}\n".encode())
                    if on_line is not None:
                        on_line(f"ERROR: {error}")
                elif "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
                    image_id = str(chunk["aux"]["ID"])
        except docker.errors.APIError as exc:
            error = redact(str(exc.explanation))
            log.feed(f"ERROR: {error}\n".encode())
        if error is not None:
            return BuildOutcome(image_id=None, log=log.text(), error=error)
        if image_id is None:
            built = self.image(tag)
            image_id = built.id if built else None
        return BuildOutcome(image_id=image_id, log=log.text())

    @contextlib.contextmanager
    def wheel_feed(self, spec: FeedSpec, files: IO[bytes]) -> Iterator[str]:
        # The files go in through the archive API, not a bind mount: the engine may be on another machine
        # (a nightly target). put_archive refuses a read-only root, so the feed's root stays writable; it
        # runs unprivileged, without capabilities and without any network but its own loopback.
        container = None
        try:
            # Errors of starting the feed are named here; the build in the `with` body reports its own.
            try:
                container = self._client.containers.create(
                    spec.image,
                    command=list(spec.command),
                    environment={"PYTHONUNBUFFERED": "1"},
                    network_mode="none",
                    user=spec.user,
                    labels={**self._labels, MANAGED_LABEL: "true", f"{LABEL_PREFIX}.role": "wheel-feed"},
                    cap_drop=["ALL"],
                    security_opt=["no-new-privileges"],
                    mem_limit="1g",
                    memswap_limit="1g",
                    pids_limit=64,
                    detach=True,
                )
                container.put_archive("/", files)
                container.start()
                self._wait_for_feed(container, spec)
            except docker.errors.ImageNotFound:
                raise ImageNotBuilt(f"image {spec.image} is not in the engine", hint=_IMAGE_REMOVED_HINT) from None
            except docker.errors.APIError as exc:
                raise EnvironmentFailure(
                    f"starting orch's wheel feed failed: {redact(str(exc.explanation))}", hint=_FEED_HINT
                ) from None
            yield str(container.id)
        finally:
            if container is not None:
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    container.remove(force=True)

    @staticmethod
    def _wait_for_feed(container: Any, spec: FeedSpec) -> None:
        """Until the feed prints `ready_line`; a feed that exits or stays silent is one clear error."""
        deadline = time.monotonic() + FEED_START_TIMEOUT_S
        while True:
            container.reload()
            logs = container.logs(stdout=True, stderr=True)[-4096:].decode("utf-8", errors="replace")
            if spec.ready_line in logs:
                return
            if container.status != "running" or time.monotonic() > deadline:
                last = redact(logs.strip().splitlines()[-1]) if logs.strip() else f"status {container.status}"
                raise EnvironmentFailure(
                    f"orch's wheel feed (a container of the base image {spec.image[:19]}) did not start: {last}",
                    hint=_FEED_HINT,
                )
            time.sleep(0.05)

    # -- containers --------------------------------------------------------------------------------

    @staticmethod
    def _capped_logs(container: Any, limit: int, *, stdout: bool) -> CappedStream:
        """One of the container's streams, read in chunks and kept within `limit` bytes (head and tail)."""
        kept = CappedStream(limit)
        for chunk in container.logs(stdout=stdout, stderr=not stdout, stream=True, follow=False):
            kept.feed(chunk)
        return kept

    def run(self, spec: RunSpec) -> RunOutcome:
        return self._run(spec)

    def run_and_copy(self, spec: RunSpec, path: str, dest: IO[bytes], max_bytes: int) -> RunOutcome:
        def copy(container: Any) -> None:
            stream, _ = container.get_archive(path)
            written = 0
            for chunk in stream:
                dest.write(chunk[: max_bytes + 1 - written])
                written += len(chunk)
                if written > max_bytes:
                    break  # the reader sees more than max_bytes and refuses the archive

        return self._run(spec, copy)

    def _run(self, spec: RunSpec, after: Callable[[Any], None] | None = None) -> RunOutcome:
        """create → start → wait → logs → `after` (on a clean exit) → remove, the removal in `finally`."""
        volumes = {
            str(mount.source): {"bind": mount.target, "mode": "ro" if mount.read_only else "rw"}
            for mount in spec.mounts
        }
        device_requests = []
        if spec.nvidia_device_ids:
            device_requests.append(
                docker.types.DeviceRequest(device_ids=list(spec.nvidia_device_ids), capabilities=[["gpu"]])
            )
        elif spec.nvidia_gpus:
            device_requests.append(docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]]))
        if spec.cdi_devices:
            device_requests.append(docker.types.DeviceRequest(driver="cdi", device_ids=list(spec.cdi_devices)))
        started = time.monotonic()
        container = None
        try:
            container = self._client.containers.create(
                spec.image,
                command=list(spec.command),
                environment=dict(spec.environment),
                volumes=volumes,
                network_mode="bridge" if spec.network else "none",
                user=spec.user,
                working_dir=spec.working_dir,
                labels={**self._labels, **spec.labels, MANAGED_LABEL: "true"},
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                mem_limit=spec.mem_limit,
                # Memory + swap = the memory limit: no swap at all. Docker's default gives as much swap again.
                memswap_limit=spec.mem_limit,
                pids_limit=spec.pids_limit,
                device_requests=device_requests or None,
                devices=[f"{node}:{node}:rwm" for node in spec.devices] or None,
                group_add=list(spec.group_add) or None,
                shm_size=spec.shm_size,
                detach=True,
            )
            container.start()
            timed_out = False
            exit_code: int | None
            try:
                result = container.wait(timeout=spec.timeout_s)
                exit_code = int(result.get("StatusCode", -1))
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                timed_out, exit_code = True, None
                container.kill()
            stdout = self._capped_logs(container, spec.max_log_bytes, stdout=True)
            stderr = self._capped_logs(container, spec.max_log_bytes, stdout=False)
            container.reload()
            oom_killed = bool((container.attrs.get("State") or {}).get("OOMKilled"))
            if after is not None and exit_code == 0:
                after(container)
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
            raise ImageNotBuilt(f"image {spec.image} is not in the engine", hint=_IMAGE_REMOVED_HINT) from None
        except docker.errors.APIError as exc:
            # GPU mapping errors surface at start (HTTP 400 "could not select device driver ..."): name them.
            explanation = str(exc.explanation)
            if "could not select device driver" in explanation:
                raise EnvironmentFailure(
                    f"the Docker daemon cannot map NVIDIA GPUs: {explanation}",
                    hint="Install the NVIDIA Container Toolkit on this host and restart dockerd "
                    "(nvidia-ctk runtime configure --runtime=docker), or generate CDI specs (nvidia-ctk cdi generate).",
                ) from None
            raise EnvironmentFailure(f"running a container of {spec.image} failed: {explanation}") from None
        finally:
            if container is not None:
                with contextlib.suppress(docker.errors.NotFound):
                    container.remove(force=True)
