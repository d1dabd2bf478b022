"""CPU facts and knobs: the host's CPU model and ISA flags are host facts, torch's CPU capability is a device
fact, and a dossier may pin the knobs that make CPU float results steadier across hosts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import ImageInfo, RunOutcome, RunSpec
from orchestrator.errors import DossierError
from orchestrator.host.collect import collect_host_facts, parse_cpuinfo
from orchestrator.model.host import HostFacts
from tests.paths import GOLDEN
from tests.probe_outputs import device_output
from tests.unit.host_fakes import FakeRun

# Two logical CPUs of a Sapphire Rapids-class Xeon, as /proc/cpuinfo lists them (flags trimmed).
FLAGS = "fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni " + (
    "avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8 hypervisor"
)
CPUINFO = f"""\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: {FLAGS}

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: {FLAGS}
"""

KNOBS = """
determinism:
  seed: 0
  cpu:
    aten_cpu_capability: avx2
    onednn_max_cpu_isa: AVX2
    threads: 1
"""


def test_cpuinfo_gives_the_model_and_the_isa_flags_that_change_float_results() -> None:
    cpu = parse_cpuinfo(CPUINFO)
    assert cpu is not None
    assert cpu.model == "Intel(R) Xeon(R) Platinum 8480+" and cpu.vendor == "GenuineIntel"
    assert cpu.logical_cpus == 2
    assert cpu.isa_flags == [
        "sse4_1",
        "sse4_2",
        "avx",
        "fma",
        "f16c",
        "avx2",
        "avx512f",
        "avx512dq",
        "avx512bw",
        "avx512vl",
        "avx512_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
    ]
    assert parse_cpuinfo("") is None


def test_host_facts_carry_the_cpu(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(CPUINFO)
    facts = collect_host_facts(None, root=tmp_path, run=FakeRun())
    assert facts.cpu is not None and "amx_tile" in facts.cpu.isa_flags
    bare = collect_host_facts(None, root=tmp_path / "nothing", run=FakeRun())
    assert bare.cpu is None and any("cpuinfo" in note for note in bare.notes)


def test_the_host_stage_reports_the_cpu(tiny_example: Path) -> None:
    from orchestrator.stages.host_stage import host_stage

    cpu = parse_cpuinfo(CPUINFO)
    host = HostFacts(kernel="6.1", nvidia=None, amd=None, docker=None, cpu=cpu)
    image = ImageInfo(id="sha256:" + "a" * 64, tags=(), labels={}, env={}, repo_digests=(), size=1)
    result, _, _ = host_stage(load_dossier(tiny_example / "dossier.yaml"), host, image, None)
    assert result.facts.recorded()["cpu"]["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert "avx512f" in result.facts.recorded()["cpu"]["isa_flags"]


class _DeviceEngine:
    def __init__(self, found: dict[str, Any]) -> None:
        self.found = found
        self.specs: list[RunSpec] = []

    def run(self, spec: RunSpec) -> RunOutcome:
        self.specs.append(spec)
        return RunOutcome(exit_code=0, stdout=json.dumps(self.found), stderr="", timed_out=False, duration_s=0.1)


def _with_knobs(tiny_example: Path) -> Path:
    text = (tiny_example / "dossier.yaml").read_text()
    head, _, _ = text.partition("\ndeterminism:")
    dossier = tiny_example / "dossier-knobs.yaml"
    dossier.write_text(head + "\n" + KNOBS.lstrip("\n"))
    return dossier


def test_the_device_stage_reports_torchs_cpu_capability_under_the_pinned_knobs(tiny_example: Path) -> None:
    from orchestrator.model.host import CompatVerdict
    from orchestrator.plan.run import GpuMapping, make_run_plan
    from orchestrator.stages.device_stage import device_stage

    found = device_output(cpu_capability="AVX2")
    engine = _DeviceEngine(found)
    loaded = load_dossier(_with_knobs(tiny_example))
    image = ImageInfo(id="sha256:" + "a" * 64, tags=(), labels={}, env={}, repo_digests=(), size=1)
    verdict = CompatVerdict(status="not-applicable", explanation="CPU")
    result = device_stage(engine, loaded, make_run_plan(loaded, image.id, GpuMapping(), tiny_example / "out"), verdict)  # type: ignore[arg-type]
    assert result.facts.recorded()["cpu_capability"] == "AVX2"
    assert engine.specs[0].environment["ATEN_CPU_CAPABILITY"] == "avx2", "the probe runs under the same knobs"


def test_a_dossier_pins_the_cpu_knobs_and_the_sample_gets_them(tiny_example: Path) -> None:
    from orchestrator.plan.run import sample_environment

    loaded = load_dossier(_with_knobs(tiny_example))
    env = sample_environment(loaded)
    assert env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert env["OMP_NUM_THREADS"] == "1" and env["MKL_NUM_THREADS"] == "1"
    assert json.loads(env["ORCH_DETERMINISM"])["cpu"]["aten_cpu_capability"] == "avx2", "recorded with the rest"
    plain = sample_environment(load_dossier(tiny_example / "dossier.yaml"))
    assert not {"ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS"} & set(plain)


@pytest.mark.parametrize(
    ("knob", "value"),
    [("aten_cpu_capability", "avx"), ("onednn_max_cpu_isa", "avx2"), ("threads", "0")],
)
def test_a_knob_value_torch_would_ignore_is_refused(tiny_example: Path, knob: str, value: str) -> None:
    dossier = _with_knobs(tiny_example)
    text = dossier.read_text()
    dossier.write_text(
        "\n".join(f"    {knob}: {value}" if line.strip().startswith(f"{knob}:") else line for line in text.splitlines())
        + "\n"
    )
    with pytest.raises(DossierError, match=rf"determinism\.cpu\.{knob}"):
        load_dossier(dossier)


def test_dossiers_without_cpu_knobs_keep_their_identity(tiny_example: Path) -> None:
    golden = (GOLDEN / "tiny-embeddings--dossier.Dockerfile").read_text()
    loaded = load_dossier(tiny_example / "dossier.yaml")
    assert f"# Dossier identity: {loaded.identity}" in golden, "a dossier without knobs has the golden's identity"
    assert load_dossier(_with_knobs(tiny_example)).identity != loaded.identity, "pinning a knob is a new identity"


def test_doctor_prints_the_cpu() -> None:
    import io

    from rich.console import Console

    from orchestrator.cli.summary import print_doctor
    from orchestrator.pipeline.doctor import Diagnosis

    buffer = io.StringIO()
    host = HostFacts(kernel="6.1", nvidia=None, amd=None, docker=None, cpu=parse_cpuinfo(CPUINFO))
    print_doctor(Console(file=buffer, width=300), Diagnosis(host=host))
    line = next(line for line in buffer.getvalue().splitlines() if line.startswith("cpu"))
    assert "Xeon(R) Platinum 8480+" in line and "avx512f" in line and "amx_tile" in line


def _side_with_cpu(flags: list[str], capability: str) -> Any:
    from orchestrator.compare.read import Side
    from orchestrator.model.report import StageResult
    from tests.compare_sample import Run, make_report

    report = make_report(Run())
    host = report.stages["host"]
    device = report.stages["device"]
    cpu = {"model": "Intel(R) Xeon(R)", "vendor": "GenuineIntel", "logical_cpus": 2, "isa_flags": flags}
    stages: dict[str, StageResult] = {
        **report.stages,
        "host": StageResult.model_validate({**dict(host), "facts": {**host.facts.recorded(), "cpu": cpu}}),
        "device": StageResult.model_validate(
            {**dict(device), "facts": {**device.facts.recorded(), "cpu_capability": capability}}
        ),
    }
    return Side(path=Path("/runs/x"), report=report.model_copy(update={"stages": stages}), record=None)


def test_compare_names_a_cpu_difference_as_a_host_difference() -> None:
    from orchestrator.compare.verdict import compare_sides

    a = _side_with_cpu(["avx", "fma", "avx2"], "AVX2")
    b = _side_with_cpu(["avx", "fma", "avx2", "avx512f", "amx_tile"], "AVX512")
    rows = {row.field: row for row in compare_sides(a, b).system}
    assert rows["host CPU"].verdict == "host" and "avx512f" in rows["host CPU"].b
    assert rows["torch CPU capability"].verdict == "host"
    assert (rows["torch CPU capability"].a, rows["torch CPU capability"].b) == ("AVX2", "AVX512")
    same = {row.field: row for row in compare_sides(a, a).system}
    assert same["host CPU"].verdict == "same"


def test_host_mode_reports_the_cpu_and_torchs_capability() -> None:
    import subprocess

    from orchestrator.pipeline.host_mode import run_host_mode

    found = device_output(cpu_capability="AVX512")

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, json.dumps(found), "")

    host = HostFacts(kernel="6.1", nvidia=None, amd=None, docker=None, cpu=parse_cpuinfo(CPUINFO))
    host_result, device = run_host_mode("cpu", None, "python3", host_facts=lambda: host, run=run)
    assert "amx_tile" in host_result.facts.recorded()["cpu"]["isa_flags"]
    assert device.facts.recorded()["cpu_capability"] == "AVX512"
