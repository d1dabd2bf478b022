"""The Kubernetes Job of a cell (nightly/k8s.py, design only): rendered from the cell's own containers and
checked against the vendored upstream batch/v1 Job schema (tests/fixtures/kubernetes/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from orchestrator.dossier.load import load_dossier
from orchestrator.errors import BadInput
from orchestrator.nightly.cell import CellRequest
from orchestrator.nightly.k8s import KubernetesJobSpec, Toleration, job_name, job_yaml, render_job
from orchestrator.plan.run import GpuMapping, SampleFolders, device_spec, inventory_spec, probe_command, sample_spec
from tests.paths import EXAMPLES, REPO

SCHEMA = json.loads((REPO / "tests" / "fixtures" / "kubernetes" / "job-batch-v1.schema.json").read_text())
IMAGE = "registry.example.org:5000/team/nightly@sha256:" + "a" * 64


def _validate(manifest: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(manifest)


def _cell(tmp_path: Path, example: str, flavour: str | None = None) -> tuple[CellRequest, KubernetesJobSpec, list]:  # type: ignore[type-arg]
    """A cell staged under the shared claim's folder, as the runner would stage it, and its containers."""
    shared = tmp_path / "shared"
    staged = shared / "2026-12-02" / example
    import shutil

    shutil.copytree(EXAMPLES / example, staged / "dossier")
    loaded = load_dossier(staged / "dossier" / (f"dossier-{flavour}.yaml" if flavour else "dossier.yaml"))
    platform = loaded.model.system.platform
    mapping = {
        "cuda": GpuMapping(nvidia_gpus=True, description="all"),
        "rocm": GpuMapping(devices=("/dev/kfd", "/dev/dri/renderD128"), description="kfd"),
        "cpu": GpuMapping(),
    }[platform]
    runs = [
        ("inventory", inventory_spec(IMAGE)),
        ("device", device_spec(loaded, IMAGE, mapping)),
        ("sample", sample_spec(loaded, IMAGE, mapping, SampleFolders.under(staged / "out"))),
    ]
    request = CellRequest(
        cell_id=f"{example}{'-' + flavour if flavour else ''}@k8s-a100", dossier=loaded.path, out=staged / "out",
        timeout_s=5400,
    )  # fmt: skip
    spec = KubernetesJobSpec(
        name="k8s-a100",
        gpu_resource={"rocm": "amd.com/gpu"}.get(platform, "nvidia.com/gpu"),  # type: ignore[arg-type]
        gpus_per_job=2,
        shared_claim="orch-nightly-shared",
        shared_root=shared,
        node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        tolerations=(Toleration(key="nvidia.com/gpu", effect="NoSchedule"),),
        image_pull_secret="orch-registry",
    )
    return request, spec, runs


def test_a_cuda_cell_is_a_valid_job_with_gpu_limits_on_its_gpu_containers(tmp_path: Path) -> None:
    request, spec, runs = _cell(tmp_path, "tiny-embeddings", "cuda")
    manifest = render_job(request, spec, IMAGE, runs)
    _validate(manifest)
    pod = manifest["spec"]["template"]["spec"]
    inventory, device = pod["initContainers"]
    (sample,) = pod["containers"]
    assert "nvidia.com/gpu" not in inventory["resources"]["limits"], "the inventory needs no GPU"
    assert device["resources"]["limits"]["nvidia.com/gpu"] == 2 and sample["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert device["command"] == probe_command("device.py"), "the same stdlib-only probe the Docker engine runs"
    assert {c["image"] for c in [inventory, device, sample]} == {IMAGE}
    assert manifest["spec"]["backoffLimit"] == 0 and manifest["spec"]["activeDeadlineSeconds"] == 5400
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    for container in [inventory, device, sample]:
        context = container["securityContext"]
        assert context["capabilities"] == {"drop": ["ALL"]} and context["allowPrivilegeEscalation"] is False
        assert context["runAsNonRoot"] is True and context["runAsUser"] == 10001
    mounts = {m["mountPath"]: m for m in sample["volumeMounts"]}
    assert mounts["/orch/output"] == {
        "name": "orch-shared", "mountPath": "/orch/output", "subPath": "2026-12-02/tiny-embeddings/out/sample-output",
        "readOnly": False,
    }  # fmt: skip
    assert all(m["readOnly"] for path, m in mounts.items() if path.startswith("/orch/input/"))
    assert pod["imagePullSecrets"] == [{"name": "orch-registry"}]
    text = job_yaml(manifest)
    assert yaml.safe_load(text) == manifest and "&id" not in text, "plain YAML, no anchors for kubectl readers"


def test_a_rocm_cell_asks_for_amd_gpus(tmp_path: Path) -> None:
    request, spec, runs = _cell(tmp_path, "tiny-embeddings", "rocm")
    manifest = render_job(request, spec, IMAGE, runs)
    _validate(manifest)
    sample = manifest["spec"]["template"]["spec"]["containers"][0]
    assert sample["resources"]["limits"]["amd.com/gpu"] == 2 and "nvidia.com/gpu" not in sample["resources"]["limits"]


def test_a_cpu_cell_asks_for_no_gpu_and_names_are_dns_labels(tmp_path: Path) -> None:
    request, spec, runs = _cell(tmp_path, "tiny-embeddings")
    manifest = render_job(request, spec, IMAGE, runs)
    _validate(manifest)
    pod = manifest["spec"]["template"]["spec"]
    assert all(set(c["resources"]["limits"]) == {"memory"} for c in pod["initContainers"] + pod["containers"])
    name = manifest["metadata"]["name"]
    assert len(name) <= 63 and name == job_name(request.cell_id) and name.startswith("orch-tiny-embeddings-k8s-a100-")
    long_name = job_name("a" * 200 + "@target")
    assert len(long_name) <= 63 and long_name != job_name("a" * 201 + "@target")


def test_the_schema_is_strict_so_the_check_can_fail(tmp_path: Path) -> None:
    request, spec, runs = _cell(tmp_path, "tiny-embeddings", "cuda")
    manifest = render_job(request, spec, IMAGE, runs)
    manifest["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1  # a field Kubernetes does not have
    with pytest.raises(jsonschema.ValidationError, match="gpus"):
        _validate(manifest)
    manifest = render_job(request, spec, IMAGE, runs)
    manifest["spec"]["backoffLimit"] = "none"
    with pytest.raises(jsonschema.ValidationError):
        _validate(manifest)


def test_a_tag_only_image_or_a_mount_outside_the_claim_is_refused(tmp_path: Path) -> None:
    request, spec, runs = _cell(tmp_path, "tiny-embeddings", "cuda")
    with pytest.raises(BadInput, match="a tag can move"):
        render_job(request, spec, "registry.example.org:5000/team/nightly:latest", runs)
    elsewhere = spec.model_copy(update={"shared_root": tmp_path / "elsewhere"})
    with pytest.raises(BadInput, match="not under the shared claim"):
        render_job(request, elsewhere, IMAGE, runs)
