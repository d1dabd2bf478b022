"""Every fact `orch compare` reads is a declared field of the typed stage facts, and reaches a row.

Chain of custody for a fact: `probes/device.py` prints it (test_probe_contracts runs the probe's own
code against `DeviceProbeReport`), the device stage keeps it (`DEVICE_FACTS`, each a field of both
models), and compare reads it as an attribute (mypy) or through `given` (checked here).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.compare import diff
from orchestrator.compare.diff import SYSTEM_FIELDS, given
from orchestrator.compare.read import Side
from orchestrator.model.device import DEVICE_FACTS, DeviceProbeReport
from orchestrator.model.facts import FACTS_BY_STAGE, DeviceStageFacts, HostStageFacts
from orchestrator.model.report import StageResult
from tests.compare_sample import cuda_reference, make_report


def test_every_fact_compare_names_is_a_field_of_a_stage_s_facts() -> None:
    source = Path(diff.__file__).read_text(encoding="utf-8")
    named = set(re.findall(r'given\(\w+, "(\w+)"\)', source))
    # An image fact is named once for `given` and read once as an attribute: the two must be the same.
    pairs = re.findall(r'"(\w+)",\s*lambda facts: facts\.(\w+)', source)
    assert pairs and all(name == attribute for name, attribute in pairs), pairs
    named |= {name for name, _ in pairs}
    assert {"nvidia", "amd", "python", "cuda_toolkit", "rocm"} <= named, named
    declared = {field for model in FACTS_BY_STAGE.values() for field in model.model_fields}
    assert named <= declared, named - declared


def test_the_device_facts_are_fields_of_the_probe_s_report_and_of_the_stage_s_facts() -> None:
    assert set(DEVICE_FACTS) <= set(DeviceProbeReport.model_fields)
    assert set(DEVICE_FACTS) <= set(DeviceStageFacts.model_fields)
    for field in DEVICE_FACTS:
        probe, stage = DeviceProbeReport.model_fields[field], DeviceStageFacts.model_fields[field]
        kept = stage.annotation in (probe.annotation, probe.annotation | None)  # type: ignore[operator]
        assert kept, f"{field}: the stage keeps the probe's value as its type"


def test_given_refuses_a_field_the_model_does_not_declare() -> None:
    with pytest.raises(AssertionError, match="'accel' is not a field of DeviceStageFacts"):
        given(DeviceStageFacts(), "accel")
    assert given(HostStageFacts.model_validate({"nvidia": None}), "nvidia")
    assert not given(HostStageFacts(), "nvidia")


def test_every_system_row_reads_its_fact_from_a_report_alone() -> None:
    """A report with every fact recorded gives every system row on both sides (no 'not recorded')."""
    report = make_report(cuda_reference())
    host, device = report.stages["host"], report.stages["device"]
    cpu = {"model": "Intel(R) Xeon(R)", "vendor": "GenuineIntel", "logical_cpus": 2, "isa_flags": ["avx2"]}
    stages = {
        **report.stages,
        "host": StageResult.model_validate({**dict(host), "facts": {**host.facts.recorded(), "cpu": cpu}}),
        "device": StageResult.model_validate(
            {**dict(device), "facts": {**device.facts.recorded(), "cpu_capability": "AVX2"}}
        ),
    }
    side = Side(path=Path("/runs/a"), report=report.model_copy(update={"stages": stages}))
    values = {field: read(side) for field, read, _ in SYSTEM_FIELDS}
    assert None not in values.values(), [field for field, value in values.items() if value is None]
    assert values["devices"] == "NVIDIA H100 80GB HBM3" and values["device count"] == "1"
    assert values["host NVIDIA driver"] == "550.54.15 (CUDA ≤ 12.4)"
    assert values["torch CPU capability"] == "AVX2" and values["host CPU"] == "Intel(R) Xeon(R); ISA avx2"


def test_a_stage_s_facts_take_the_type_its_name_says_and_refuse_another_stage_s_keys() -> None:
    for name, model in FACTS_BY_STAGE.items():
        assert isinstance(StageResult.model_validate({"name": name, "status": "not_run"}).facts, model)
    with pytest.raises(ValueError, match="accelerator"):
        StageResult.model_validate({"name": "host", "status": "passed", "facts": {"accelerator": None}})


def test_a_real_report_reads_and_writes_back_byte_for_byte() -> None:
    """A report.json orch wrote (a replay of the minilm hand-over, CPU machine) survives the typed facts unchanged."""
    from orchestrator.model.report import Report
    from tests.paths import REPO

    text = (REPO / "tests" / "fixtures" / "reports" / "minilm-replay-report.json").read_text(encoding="utf-8")
    report = Report.model_validate_json(text)
    assert isinstance(report.stage("device").facts, DeviceStageFacts)
    assert report.model_dump_json(indent=2) + "\n" == text
