"""Kubernetes Jobs as the next nightly target — a design, rendered and schema-checked, never run here.

No cluster is reachable from this project's machines, so nothing here talks to one: `render_job` is a
pure function from a cell (`CellRequest`), the target's settings (`KubernetesJobSpec`), the image
published by digest and the cell's containers (`RunSpec`s, the very values `plan/run.py` gives the
Docker engine) to a `batch/v1` Job manifest; `job_yaml` prints it. A unit test validates it against
the vendored upstream Job schema (tests/fixtures/kubernetes/). docs/nightly.md, "Kubernetes", says
how a target would use it and what is not done.

Why a Job runs the *probe* half only: building an image inside a pod needs a daemon or a privileged
builder, which the house rules forbid for probes. So a Kubernetes cell is built and pushed on a
Docker endpoint (cold, like every cell), and its Job runs that image **by digest** on a GPU node:
each `RunSpec` becomes one container, in order (init containers, then the last as the main one), with
the same command, environment, memory limit and isolation orch gives a container — non-root
(`RUNTIME_UID`), every capability dropped, no privilege escalation, no service-account token, no
retry (`backoffLimit: 0`: a failure is a verdict), `activeDeadlineSeconds` as the cell's timeout. GPUs
are extended-resource limits (`nvidia.com/gpu`, `amd.com/gpu`), which the device plugin maps into the
container: the node's scheduler, not orch, chooses them. Host folders become sub-paths of one
ReadWriteMany volume claim the runner stages and collects, as Slurm's `shared_dir` is.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.engine import RunSpec
from orchestrator.errors import BadInput, ImageReferenceError
from orchestrator.model.image_ref import parse_pinned
from orchestrator.nightly.cell import CellRequest
from orchestrator.plan.specs import LABEL_PREFIX, RUNTIME_UID

#: The ones device plugins register (NVIDIA's k8s-device-plugin / GPU operator; AMD's k8s-device-plugin).
GpuResource = Literal["nvidia.com/gpu", "amd.com/gpu"]
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]+")
SHARED_VOLUME = "orch-shared"
SHM_VOLUME = "orch-shm"


class Toleration(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class KubernetesJobSpec(BaseModel):
    """A Kubernetes target's settings (design: not in the plan's `targets:` union yet)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
    namespace: str = Field(default="orch-nightly", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    #: The extended resource GPUs are requested as; None for a CPU-only pool.
    gpu_resource: GpuResource | None = "nvidia.com/gpu"
    gpus_per_job: int = Field(default=1, ge=0, le=64)
    #: A ReadWriteMany claim: the runner stages each cell's dossier there and collects its outputs from it.
    shared_claim: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    #: Where the runner sees that claim (an NFS mount on the runner's host); mount sources must lie under it.
    shared_root: Path
    node_selector: Mapping[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    #: The *name* of a `kubernetes.io/dockerconfigjson` Secret for the registry, never its content.
    image_pull_secret: str | None = None
    ttl_seconds_after_finished: int = Field(default=86_400, ge=0)


def job_name(cell_id: str) -> str:
    """A DNS-1123 label (≤ 63) that names the cell and stays unique: `orch-<cell>-<hash8>`."""
    digest = hashlib.sha256(cell_id.encode()).hexdigest()[:8]
    stem = _DNS_LABEL.sub("-", cell_id.lower()).strip("-")[: 63 - len("orch--") - 8].strip("-")
    return f"orch-{stem}-{digest}"


def _label_value(text: str) -> str:
    return _LABEL_VALUE.sub("_", text)[:63].strip("._-") or "x"


def _quantity(limit: str) -> str:
    """Docker's `4g` / `512m` as a Kubernetes quantity (`4Gi`, `512Mi`)."""
    units = {"k": "Ki", "m": "Mi", "g": "Gi"}
    number, unit = limit[:-1], limit[-1:].lower()
    if unit in units and number.isdigit():
        return number + units[unit]
    raise BadInput(f"memory limit {limit!r} is not <number>k|m|g")


def _wants_gpu(run: RunSpec) -> bool:
    return bool(run.nvidia_gpus or run.nvidia_device_ids or run.cdi_devices or run.devices)


def _container(
    name: str, run: RunSpec, image: str, spec: KubernetesJobSpec, mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    limits: dict[str, Any] = {"memory": _quantity(run.mem_limit)}
    if _wants_gpu(run) and spec.gpu_resource is not None and spec.gpus_per_job > 0:
        limits[spec.gpu_resource] = spec.gpus_per_job
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",  # a digest cannot move: what is there is the image
        "command": list(run.command),
        "env": [{"name": key, "value": value} for key, value in sorted(run.environment.items())],
        "resources": {"limits": limits, "requests": dict(limits)},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": int(run.user) if run.user and run.user.isdigit() else RUNTIME_UID,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": mounts,
    }
    if run.working_dir:
        container["workingDir"] = run.working_dir
    return container


def _mounts(run: RunSpec, spec: KubernetesJobSpec) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = []
    root = spec.shared_root
    for mount in run.mounts:
        if not mount.source.is_relative_to(root):
            raise BadInput(
                f"{mount.source} (mounted at {mount.target}) is not under the shared claim's folder {root}; "
                "a Kubernetes cell reads and writes only what the runner staged there"
            )
        mounts.append(
            {
                "name": SHARED_VOLUME,
                "mountPath": mount.target,
                "subPath": mount.source.relative_to(root).as_posix(),
                "readOnly": mount.read_only,
            }
        )
    if run.shm_size:
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    return mounts


def render_job(
    request: CellRequest, spec: KubernetesJobSpec, image: str, runs: Sequence[tuple[str, RunSpec]]
) -> dict[str, Any]:
    """The `batch/v1` Job of one cell: `runs` (name, RunSpec) in order, the last as the main container.

    `image` must be pinned by digest (`registry/repository@sha256:…`): a tag can move between the push
    and the pod's start. BadInput names what does not fit.
    """
    try:
        pinned = parse_pinned(image).pinned
    except ImageReferenceError as exc:
        raise BadInput(f"the Kubernetes Job's image {image}: {exc}") from None
    if not runs:
        raise BadInput(f"cell {request.cell_id}: no container to run")
    containers = [_container(name, run, pinned or image, spec, _mounts(run, spec)) for name, run in runs]
    shm = [run.shm_size for _, run in runs if run.shm_size]
    volumes: list[dict[str, Any]] = [
        {"name": SHARED_VOLUME, "persistentVolumeClaim": {"claimName": spec.shared_claim}},
    ]
    if shm:
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": _quantity(shm[0])}})
    labels = {
        f"{LABEL_PREFIX}.managed": "true",
        f"{LABEL_PREFIX}.cell": _label_value(request.cell_id),
        f"{LABEL_PREFIX}.target": _label_value(spec.name),
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": containers[:-1],
        "containers": containers[-1:],
        "volumes": volumes,
    }
    if not pod["initContainers"]:
        del pod["initContainers"]
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = [t.model_dump(exclude_none=True) for t in spec.tolerations]
    if spec.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": spec.image_pull_secret}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(request.cell_id),
            "namespace": spec.namespace,
            "labels": dict(labels),
            "annotations": {f"{LABEL_PREFIX}.cell-id": request.cell_id, f"{LABEL_PREFIX}.image": pinned or image},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": request.timeout_s,
            "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
        },
    }


def job_yaml(manifest: Mapping[str, Any]) -> str:
    """The manifest as YAML for `kubectl apply -f -` (keys in the order rendered)."""
    return yaml.safe_dump(dict(manifest), sort_keys=False, default_flow_style=False, width=120)
