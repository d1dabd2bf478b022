"""The Docker adapter of the engine interface; with its docker_* modules, the only code that imports the SDK.

Each member executes one typed request (engine/requests.py, plan/specs.py) through the module that owns it:
docker_client (reaching an engine), docker_images, docker_build, docker_containers (hardening and limits
applied in one place). No policy here: which image to pull by what, when to untag, how a container is
confined and limited, are the request's fields, decided by the plan or the calling stage.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import IO, Any

import docker
import docker.errors
import requests

from orchestrator.engine import (
    BuildOutcome,
    BuildRequest,
    CopyOut,
    EngineInfo,
    EngineKind,
    EngineSettings,
    ImageInfo,
    PullRequest,
    RegistryAuth,
    RemoveContainers,
    RemoveImage,
    RootfsImport,
    RunOutcome,
    RunSpec,
    Served,
    ServiceSpec,
    docker_build,
    docker_containers,
    docker_images,
    podman,
)
from orchestrator.engine.docker_client import open_client
from orchestrator.engine.labels import (
    DEFAULT_TAG_NAMESPACE,
    extra_labels_from_environment,
    tag_namespace_from_environment,
)
from orchestrator.errors import EngineUnavailable
from orchestrator.redact import redact


def engine_kind(version: Mapping[str, Any]) -> EngineKind:
    """Podman's API service lists a "Podman Engine" component in `/version` (Docker lists "Engine")."""
    components = version.get("Components") or []
    names = [str(c.get("Name", "")) for c in components if isinstance(c, dict)]
    return "podman" if any(name.startswith("Podman") for name in names) else "docker"


def _docker_rootless(info: Mapping[str, Any]) -> bool:
    """Rootless Docker lists `name=rootless` among its security options."""
    return any("name=rootless" in str(option) for option in info.get("SecurityOptions") or ())


class DockerEngine:
    """The engine interface over the Docker API, which Docker's daemon and Podman's API service both speak.

    Which one answers is read once, at `connect` (`engine_kind`). Where Podman's compatibility API differs,
    the podman module does it Podman's way (builds: classic only, through `info().builders`; containers:
    created through libpod's own endpoint, so CDI devices and the same confinement arrive as on Docker; see
    engine/podman.py)."""

    def __init__(
        self,
        client: docker.DockerClient,
        endpoint: str,
        labels: Mapping[str, str] | None = None,
        tag_namespace: str = DEFAULT_TAG_NAMESPACE,
        kind: EngineKind = "docker",
    ) -> None:
        self._client = client
        self._kind = kind
        self._endpoint = endpoint
        self._settings = EngineSettings(labels=dict(labels or {}), tag_namespace=tag_namespace)
        # What the engine is does not change while connected; `info()` asks it once.
        self._info: EngineInfo | None = None

    @classmethod
    def connect(
        cls,
        base_url: str | None = None,
        tls_files: tuple[str, str, str] | None = None,
        context: str | None = None,
    ) -> DockerEngine:
        """See `orchestrator.engine.connect`; the settings are read first, so bad input fails before connecting."""
        labels = extra_labels_from_environment(os.environ)
        tag_namespace = tag_namespace_from_environment(os.environ)
        client, endpoint = open_client(base_url, tls_files, context)
        try:
            version = client.version()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            client.close()  # its pooled socket goes now, not when the collector finds it
            raise EngineUnavailable(
                f"the engine at {redact(endpoint)} answered its ping but not `/version`: {redact(str(exc))[:300]}",
                hint="Check the engine's log; orch reads /version to tell Docker from Podman.",
            ) from None
        return cls(client, endpoint, labels, tag_namespace, engine_kind(version))

    def close(self) -> None:
        self._client.close()

    @property
    def settings(self) -> EngineSettings:
        return self._settings

    def info(self) -> EngineInfo:
        if self._info is None:
            info: dict[str, Any] = self._client.info()
            version: dict[str, Any] = self._client.version()
            kind = self._kind
            self._info = EngineInfo(
                endpoint=redact(self._endpoint),
                server_version=str(version.get("Version", "")),
                api_version=str(version.get("ApiVersion", "")),
                os=str(info.get("OperatingSystem", "")),
                runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
                cdi_spec_dirs=tuple(info.get("CDISpecDirs") or ()),
                builders=docker_build.builders(str(info.get("OSType", "")), str(version.get("ApiVersion", "")), kind),
                kind=kind,
                rootless=podman.rootless(self._client) if kind == "podman" else _docker_rootless(info),
                cgroup_version=str(info.get("CgroupVersion") or ""),
            )
        return self._info

    def image(self, ref: str, *, layers: bool = False) -> ImageInfo | None:
        return docker_images.inspect(self._client, ref, layers=layers)

    def build(self, request: BuildRequest) -> BuildOutcome:
        outcome = docker_build.build(self._client, request)
        if outcome.error is None and outcome.image_id is None:
            built = self.image(request.tag)
            outcome = replace(outcome, image_id=built.id if built else None)
        return outcome

    def serve(self, spec: ServiceSpec, files: IO[bytes]) -> AbstractContextManager[Served]:
        return docker_containers.serve(self._client, self._settings.labels, spec, files)

    def run(self, spec: RunSpec, copy: CopyOut | None = None) -> RunOutcome:
        create = podman.creator(self._client) if self._kind == "podman" else None
        return docker_containers.run(self._client, self._settings.labels, spec, copy, create=create)

    def pull(self, request: PullRequest) -> ImageInfo:
        return docker_images.pull(self._client, request)

    def push(self, repository: str, tag: str, auth: RegistryAuth | None = None) -> str:
        return docker_images.push(self._client, repository, tag, auth)

    def load(self, source: IO[bytes] | Iterable[bytes] | RootfsImport) -> list[str]:
        return docker_images.load(self._client, source)

    def save(self, ref: str, dest: IO[bytes]) -> None:
        docker_images.save(self._client, ref, dest)

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        docker_images.tag(self._client, image_id, repository, tag)

    def remove(self, target: RemoveImage | RemoveContainers) -> list[str]:
        if isinstance(target, RemoveContainers):
            return docker_containers.remove_labelled(self._client, target.label)
        docker_images.remove(self._client, target)
        return []
