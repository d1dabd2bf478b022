"""The sample started with the device probe, on the real engine (plan/program.py `sample_runs_alongside`).

On the CPU platform `orch probe` starts the sample's container together with the device probe's. The two
are separate containers: the probe cannot change what the sample computes. Checked here byte for byte
against the order `orch verify` keeps (the sample after the device stage), and the stop that a failed
device stage or an interrupted run asks for is checked on a sample that would hang for an hour.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import docker

from orchestrator.dossier.load import file_sha256, load_dossier
from orchestrator.engine import Engine
from orchestrator.plan.run import GpuMapping, make_run_plan
from orchestrator.stages import alongside
from orchestrator.stages.execute import run_probe
from orchestrator.stages.probe import ProbeOptions
from tests.paths import EXAMPLES

TINY = EXAMPLES / "tiny-embeddings"


def _outputs(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): file_sha256(path) for path in sorted(folder.rglob("*")) if path.is_file()}


def test_the_sample_computes_the_same_bytes_with_the_device_probe_beside_it_or_before_it(
    engine: Engine, warm_tiny_out: Path, tmp_path: Path
) -> None:
    loaded = load_dossier(TINY / "dossier.yaml")
    image = json.loads((warm_tiny_out / "build.json").read_text())["image"]["id"]
    found: dict[str, dict[str, str]] = {}
    for order, replay in (("beside", False), ("after", True)):
        out = tmp_path / order
        shutil.copytree(warm_tiny_out, out)  # build.json of this image: the image stage reads it, no inventory
        report = run_probe(loaded, engine, ProbeOptions(out=out, image=image, stop_after_failure=replay))
        assert report.verdict == "passed", report.model_dump_json(indent=1)
        found[order] = _outputs(out / "sample-output")
        steps = {step["name"]: step for step in json.loads((out / "steps.json").read_text())["executed"]}
        sample_stage = report.stages["sample"].duration_s
        if order == "beside":
            # Started during step device: the stage lasted longer than the step that waited for it.
            assert sample_stage > steps["sample"]["seconds"], (sample_stage, steps)
        else:
            assert sample_stage <= steps["sample"]["seconds"] + 0.01, (sample_stage, steps)
    assert found["beside"], "the sample wrote no output"
    assert found["beside"] == found["after"]


def test_stopping_a_sample_started_beside_the_device_probe_removes_its_container(
    engine: Engine, docker_client: docker.DockerClient, warm_tiny_out: Path, tmp_path: Path
) -> None:
    loaded = load_dossier(TINY / "dossier.yaml")
    image = json.loads((warm_tiny_out / "build.json").read_text())["image"]["id"]
    plan = make_run_plan(loaded, image, GpuMapping(), tmp_path / "out")
    # A sample that would run for an hour: only the removal ends it.
    hanging = replace(plan.sample, command=["python", "-c", "import time; time.sleep(3600)"])
    started = alongside.start_alongside(engine, loaded, replace(plan, sample=hanging))
    key, value = started.label.split("=", 1)
    deadline = time.monotonic() + 60
    while not docker_client.containers.list(filters={"label": f"{key}={value}"}):
        assert time.monotonic() < deadline, "the sample's container never started"
        time.sleep(0.2)
    begun = time.monotonic()
    alongside.stop(engine, started)
    assert started.future.done()
    assert time.monotonic() - begun < 30, "the stop waited for the sample instead of removing it"
    assert docker_client.containers.list(all=True, filters={"label": started.label}) == []
