"""Where Podman's API service differs from Docker's daemon, done Podman's way (the rest is docker_* as is).

Podman answers the Docker API (`podman system service`), so the SDK's images, builds, logs, archives,
save and load work unchanged. Two things do not:
- **Containers with CDI devices.** Podman's compatibility endpoint (`/containers/create`) ignores a device
  request of driver `cdi` and stats `nvidia.com/gpu=0` as a path (Podman 4.3: "stat nvidia.com/gpu=0: no
  such file or directory"), while its own endpoint (`/libpod/containers/create`, a SpecGenerator) resolves
  CDI names as `podman run --device` does. So every container orch *runs* on Podman is created there,
  with the same confinement and limits as on Docker, and then started, waited for, read and removed
  through the compatibility API like any other (one path for GPU and CPU containers alike, so the
  synthetic-CDI test exercises the path minilm takes).
- **Rootless.** `/info` of the compatibility API does not say whether Podman runs rootless; libpod's does.

GPUs reach a Podman container through CDI names only: Podman has no `nvidia` runtime device request
(plan/run.py maps the selection to `nvidia.com/gpu=N` or `amd.com/gpu=N` on Podman).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import docker
import docker.errors
import docker.utils

from orchestrator.engine import MANAGED_LABEL
from orchestrator.plan.specs import RunSpec

#: libpod's API version orch speaks: the SpecGenerator fields used here exist since Podman 4.0.
LIBPOD_API = "v4.0.0"

Creator = Callable[[RunSpec, Mapping[str, str]], Any]


def _libpod_url(client: docker.DockerClient, path: str) -> str:
    api: Any = client.api
    return f"{api.base_url}/{LIBPOD_API}/libpod/{path.lstrip('/')}"


def rootless(client: docker.DockerClient) -> bool:
    """libpod's `/info`: `host.security.rootless` (False when the service does not say)."""
    api: Any = client.api
    response = api._get(_libpod_url(client, "info"))
    api._raise_for_status(response)
    host = (response.json() or {}).get("host") or {}
    return bool((host.get("security") or {}).get("rootless"))


def spec_generator(spec: RunSpec, labels: Mapping[str, str]) -> dict[str, Any]:
    """The libpod SpecGenerator of one container: what docker_containers.run passes Docker, in Podman's words.

    Raises ValueError for a device request Podman cannot honour (the nvidia runtime's `--gpus`): the run plan
    maps GPUs to CDI names on Podman, so such a spec is a planning bug, not a user error.
    """
    if spec.nvidia_gpus or spec.nvidia_device_ids:
        raise ValueError("Podman has no nvidia runtime device request: map the GPUs as CDI devices")
    hardening = spec.hardening
    memory = int(docker.utils.parse_bytes(spec.mem_limit))
    generator: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.command),
        "env": dict(spec.environment),
        "labels": {**labels, MANAGED_LABEL: "true"},
        "mounts": [
            {
                "destination": mount.target,
                "source": str(mount.source),
                "type": "bind",
                "options": ["rbind", "ro" if mount.read_only else "rw"],
            }
            for mount in spec.mounts
        ],
        # Podman's default network when one is wanted (rootless: slirp4netns or pasta), none otherwise.
        "netns": {"nsmode": "none"} if not spec.network else {"nsmode": "default"},
        "cap_drop": list(hardening.cap_drop),
        "no_new_privileges": hardening.no_new_privileges,
        "privileged": hardening.privileged,
        "read_only_filesystem": hardening.read_only_root,
        "resource_limits": {
            "memory": {"limit": memory, **({"swap": memory} if hardening.no_swap else {})},
            "pids": {"limit": spec.pids_limit},
        },
        # CDI names (`nvidia.com/gpu=1`) and device nodes (`/dev/kfd`) alike: libpod resolves the former.
        "devices": [{"path": name} for name in (*spec.cdi_devices, *spec.devices)],
    }
    if spec.group_add:
        generator["groups"] = list(spec.group_add)
    if spec.user is not None:
        generator["user"] = spec.user
    if spec.working_dir is not None:
        generator["work_dir"] = spec.working_dir
    if spec.shm_size is not None:
        generator["shm_size"] = int(docker.utils.parse_bytes(spec.shm_size))
    return generator


def creator(client: docker.DockerClient) -> Creator:
    """Create (not start) a container through libpod's endpoint; the SDK's Container object for the rest."""

    def create(spec: RunSpec, labels: Mapping[str, str]) -> Any:
        api: Any = client.api
        response = api._post_json(_libpod_url(client, "containers/create"), data=spec_generator(spec, labels))
        if response.status_code == 404 and "image" in response.text.lower():
            raise docker.errors.ImageNotFound(f"no such image: {spec.image}")
        api._raise_for_status(response)
        return client.containers.get(str(response.json()["Id"]))

    return create
