"""The probes' JSON against the host's models: what the probes print validates, and a renamed key is caught.

Two sources of probe output: the reports recorded from a real image (`tests/fixtures/probe-outputs/`),
and the probes' own code run here in-process (`probes/device.py` against a small numpy-backed stand-in
for torch, `probes/inventory.py` with pip's answers canned), so renaming a key in a probe fails a test.
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError

from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.engine import ImageInfo, RunOutcome, RunSpec
from orchestrator.model.device import DEVICE_FACTS, DeviceProbeReport
from orchestrator.model.host import CompatVerdict
from orchestrator.model.inventory import InventoryProbeReport, ProbePip
from orchestrator.model.recorded import mismatch_line
from orchestrator.pipeline.host_mode import run_host_mode
from orchestrator.plan.run import GpuMapping, RunPlan, make_run_plan
from orchestrator.stages.device_stage import device_stage
from orchestrator.stages.inventory import run_inventory
from tests.paths import EXAMPLES, REPO
from tests.probe_outputs import device_output, inventory_output

PROBES = REPO / "probes"


def _key_paths(value: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every dict key in a JSON document, as a path (list items by index)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _key_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _key_paths(item, (*prefix, index))


def _renamed(document: dict[str, Any], path: tuple[str | int, ...]) -> dict[str, Any]:
    copy = json.loads(json.dumps(document))
    parent: Any = copy
    for part in path[:-1]:
        parent = parent[part]
    parent[str(path[-1]) + "_renamed"] = parent.pop(path[-1])
    return copy


def _free_form(model: type[BaseModel], path: tuple[str | int, ...]) -> bool:
    """Keys under a `dict[str, …]` field (env vars, os-release, packages) are data, not contract."""
    free = {
        DeviceProbeReport: {"expect", "env"},
        InventoryProbeReport: {"release", "packages", "env", "environment", "direct_url"},
    }[model]
    return any(part in free for part in path[:-1])


@pytest.mark.parametrize(
    ("model", "document"),
    [(DeviceProbeReport, device_output()), (InventoryProbeReport, inventory_output())],
    ids=["device", "inventory"],
)
def test_a_recorded_probe_report_validates_and_every_renamed_key_fails(
    model: type[BaseModel], document: dict[str, Any]
) -> None:
    parsed = model.model_validate(document)
    assert parsed.model_dump(mode="json") == document, "a report serialises back exactly as the probe printed it"
    checked = 0
    for path in _key_paths(document):
        if _free_form(model, path):
            continue
        with pytest.raises(ValidationError):
            model.model_validate(_renamed(document, path))
        checked += 1
    assert checked > 20


class _FakeTensor(np.ndarray):
    """Just enough of torch.Tensor for the probe's matmul check, backed by numpy."""

    def to(self, device: str, dtype: Any) -> _FakeTensor:
        return np.asarray(self, dtype=dtype).view(_FakeTensor)

    def cpu(self) -> _FakeTensor:
        return self

    def double(self) -> _FakeTensor:
        return np.asarray(self, dtype=np.float64).view(_FakeTensor)

    def abs(self) -> _FakeTensor:  # type: ignore[override]
        return np.abs(self).view(_FakeTensor)


def _fake_torch(gpus: int) -> types.ModuleType:
    torch = types.ModuleType("torch")
    rng = np.random.default_rng(0)

    def conv2d(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

    properties = types.SimpleNamespace(
        name="NVIDIA H200", major=9, minor=0, total_memory=150 << 30, multi_processor_count=132
    )
    torch.__dict__.update(
        __version__="2.13.0+cu130",
        float32=np.float32,
        float64=np.float64,
        version=types.SimpleNamespace(cuda="13.0", hip=None),
        backends=types.SimpleNamespace(
            cudnn=types.SimpleNamespace(is_available=lambda: True, version=lambda: 91200),
            cpu=types.SimpleNamespace(get_cpu_capability=lambda: "AVX512"),
        ),
        cuda=types.SimpleNamespace(
            is_available=lambda: gpus > 0,
            device_count=lambda: gpus,
            get_arch_list=lambda: ["sm_80", "sm_90"],
            get_device_properties=lambda index: properties,
            synchronize=lambda: None,
        ),
        Generator=lambda: types.SimpleNamespace(manual_seed=lambda seed: None),
        randn=lambda *shape, generator: rng.standard_normal(shape).view(_FakeTensor),
        isfinite=np.isfinite,
        nn=types.SimpleNamespace(functional=types.SimpleNamespace(conv2d=conv2d)),
    )
    return torch


def _run_probe(name: str, monkeypatch: pytest.MonkeyPatch, **patches: Any) -> dict[str, Any]:
    module = runpy.run_path(str(PROBES / name))
    main = module["main"]
    for attr, value in patches.items():
        main.__globals__[attr] = value
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main()
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


@pytest.mark.parametrize(("platform", "gpus"), [("cuda", 1), ("cpu", 0), ("cuda", 0)])
def test_the_device_probe_s_own_output_validates(monkeypatch: pytest.MonkeyPatch, platform: str, gpus: int) -> None:
    monkeypatch.setitem(__import__("sys").modules, "torch", _fake_torch(gpus))
    monkeypatch.setenv("ORCH_PROBE_EXPECT", json.dumps({"platform": platform, "version": "13.0"}))
    document = _run_probe("device.py", monkeypatch)
    report = DeviceProbeReport.model_validate(document)
    assert report.model_dump(mode="json") == document
    if gpus:
        assert report.devices and report.devices[0].capability == "9.0" and report.devices[0].arch_supported
        assert report.compute is not None and report.compute.matmul is not None and report.compute.matmul.ok
        assert report.compute.conv2d is not None and report.compute.conv2d.error
        assert report.torch is not None and report.torch.cudnn == 91200


def test_the_device_probe_without_torch_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # import torch raises ImportError
    document = _run_probe("device.py", monkeypatch)
    report = DeviceProbeReport.model_validate(document)
    assert report.torch is None and report.torch_error and "ModuleNotFoundError" in report.torch_error


def test_the_inventory_probe_s_own_output_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    inspect = {
        "version": "1",
        "pip_version": "25.0",
        "environment": {"python_version": "3.11"},
        "installed": [{"metadata": {"name": "numpy", "version": "2.4.6"}, "installer": "pip", "requested": True}],
    }

    def run(args: list[str], timeout: int = 300) -> dict[str, Any]:
        answers = {"freeze": "numpy==2.4.6\n", "inspect": json.dumps(inspect), "check": "No broken requirements.\n"}
        for word, stdout in answers.items():
            if word in args:
                return {"ok": True, "returncode": 0, "stdout": stdout, "stderr": ""}
        return {"ok": False, "error": "FileNotFoundError(2)"}  # rpm, on a host without it

    document = _run_probe("inventory.py", monkeypatch, _run=run)
    report = InventoryProbeReport.model_validate(document)
    assert report.model_dump(mode="json") == document
    assert isinstance(report.pip, ProbePip) and report.pip.freeze == ["numpy==2.4.6"]


def test_the_inventory_probe_reports_each_dpkg_packages_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the SBOM's purls (pkg:deb/debian/NAME@VERSION?arch=…): read from dpkg's status, installed packages only."""
    status = (
        "Package: apt\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.6.1\n\n"
        "Package: tzdata\nStatus: install ok installed\nArchitecture: all\nVersion: 2025b-0+deb12u1\n\n"
        "Package: gone\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 1\n"
    )

    def read(path: str) -> str | None:
        return status if path == "/var/lib/dpkg/status" else None

    def run(args: list[str], timeout: int = 300) -> dict[str, Any]:
        return {"ok": False, "error": "FileNotFoundError(2)"}

    document = _run_probe("inventory.py", monkeypatch, _run=run, _read=read)
    report = InventoryProbeReport.model_validate(document)
    assert report.model_dump(mode="json") == document
    assert document["os"]["packages"] == {"apt": "2.6.1", "tzdata": "2025b-0+deb12u1"}
    assert document["os"]["architectures"] == {"apt": "amd64", "tzdata": "all"}


# -- the stages: a report that does not match is a named failure of the stage ---------------------------

IMAGE = ImageInfo(id="sha256:" + "a" * 64, tags=(), labels={}, env={}, repo_digests=(), size=1)
VERDICT = CompatVerdict(status="not-applicable", explanation="CPU")


def _plan(loaded: LoadedDossier) -> RunPlan:
    return make_run_plan(loaded, IMAGE.id, GpuMapping(), Path("out"))


class _Prints:
    def __init__(self, document: dict[str, Any]) -> None:
        self.stdout = json.dumps(document)

    def run(self, spec: RunSpec) -> RunOutcome:
        return RunOutcome(exit_code=0, stdout=self.stdout, stderr="", timed_out=False, duration_s=0.1)


def test_the_device_stage_keeps_the_probe_s_facts_typed() -> None:
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    result = device_stage(_Prints(device_output()), loaded, _plan(loaded), VERDICT)  # type: ignore[arg-type]
    assert result.status == "passed", result.first_error
    dumped = result.model_dump(mode="json")["facts"]
    assert list(dumped) == [*DEVICE_FACTS, "gpu_mapping"]
    assert dumped["compute"] == device_output()["compute"], "facts hold the probe's values as it printed them"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"accelerator": None, "accel": {"available": False, "device_count": 0}}, "accel"),
        ({"accelerator": {"available": False, "count": 0}}, "accelerator.device_count"),
        ({"probe_version": 2}, "probe_version"),
    ],
    ids=["renamed-top-level", "renamed-nested", "other-version"],
)
def test_a_device_report_off_contract_fails_the_stage_naming_the_field(change: dict[str, Any], field: str) -> None:
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    engine = _Prints(device_output(**change))
    result = device_stage(engine, loaded, _plan(loaded), VERDICT)  # type: ignore[arg-type]
    assert result.status == "failed" and result.first_error is not None
    assert result.first_error.step == "device probe"
    message = result.first_error.message
    assert message.startswith("the device probe printed a report that does not match its contract: ")
    assert f"field '{field}" in message and "\n" not in message


def test_host_mode_validates_the_probe_too() -> None:
    import subprocess

    from orchestrator.model.host import HostFacts

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, json.dumps(device_output(devices=[{"idx": 0}])), "")

    host = HostFacts(kernel="6.1", nvidia=None, amd=None, docker=None)
    _, device = run_host_mode("cpu", None, "python3", host_facts=lambda: host, run=run)
    assert device.first_error is not None and "field 'devices.0.index'" in device.first_error.message


def test_an_inventory_report_off_contract_fails_naming_the_field() -> None:
    document = inventory_output()
    document["pip"]["frozen"] = document["pip"].pop("freeze")
    inventory, error = run_inventory(_Prints(document), "sha256:x")  # type: ignore[arg-type]
    assert inventory is None and error is not None
    assert error.startswith("the inventory probe printed a report that does not match its contract: field 'pip")


def test_a_mismatch_line_counts_the_other_errors() -> None:
    with pytest.raises(ValidationError) as caught:
        DeviceProbeReport.model_validate({"probe": "device"})
    line = mismatch_line(caught.value, "the device probe")
    assert line.startswith("the device probe printed a report that does not match its contract: field 'probe_version'")
    assert line.endswith("more)")
