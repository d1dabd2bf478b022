"""The plan is the program: the steps `--dry-run` prints are the steps the executor runs and records.

Every example dossier is rebuilt on the in-memory engine (engine/fake.py) with a hand-over, and the step
names of `orch rebuild --dry-run` (the numbered lines, parsed from its text) are compared with `steps.json`;
so are the wheel-feed, reuse and failed-build branches. A traced `rebuild --handover` through the CLI
checks the one-writer rule: one engine connection, no document read back after it is written, the image
checks run once.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.engine import Builder, Connection, ImageInfo
from orchestrator.engine.fake import FakeEngine, ScriptedBuild, ScriptedRun
from orchestrator.model.host import DockerGpuFacts, HostFacts
from orchestrator.pipeline.dry_run import dry_run_build, dry_run_rebuild
from orchestrator.pipeline.rebuild import rebuild_run
from orchestrator.plan.build import default_tag
from orchestrator.plan.describe import step_names
from orchestrator.plan.program import BuildFacts, BuildOptionsPlan, ProbeFacts, names, rebuild_program
from orchestrator.stages.build import BuildOptions, code_ref
from orchestrator.stages.code_source import inspect_code
from orchestrator.stages.execute import run_build
from tests.paths import EXAMPLES
from tests.unit.test_pipeline_fake_engine import base_image, clock, device_stdout, inventory_stdout, passing_runs

CPU_HOST = HostFacts(
    kernel="6.1.0", nvidia=None, amd=None, docker=DockerGpuFacts(runtimes=["runc"], nvidia_runtime=False)
)
DOSSIERS = sorted(EXAMPLES.glob("*/dossier*.yaml"))
BUILD_STEPS = ["base", "render", "wheels", "build", "inventory", "image-checks", "build-record"]
PROBE_STEPS = ["image", "host", "device", "sample"]


@pytest.fixture(autouse=True)
def _code_is_a_plain_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's copy is no git work tree; answering that needs no `git` process."""
    monkeypatch.setattr("orchestrator.stages.code_source._work_tree", lambda folder: None)


def _online_copy(path: Path, tmp_path: Path) -> LoadedDossier:
    """A private copy of an example, installed online: the in-memory engine needs no wheel downloaded."""
    folder = tmp_path / path.parent.name
    shutil.copytree(path.parent, folder)
    copy = folder / path.name
    copy.write_text(copy.read_text().replace("install: wheelhouse", "install: online"))
    return load_dossier(copy)


def _executed(out: Path) -> list[tuple[str, str]]:
    document = json.loads((out / "steps.json").read_text())
    assert document["format"] == "orch.steps/1"
    assert document["planned"] == [step["name"] for step in document["executed"]]
    return [(step["name"], step["status"]) for step in document["executed"]]


def _dry_rebuild(loaded: LoadedDossier, out: Path, handover: Path | None) -> list[str]:
    text = dry_run_rebuild(loaded, BuildOptions(out=out), environ={}, handover=handover, host=CPU_HOST)
    return step_names(text)


def _any_run(loaded: LoadedDossier) -> dict[str, ScriptedRun]:
    """The tiny example's answers; other examples get an inventory of their lock, a CPU device report and a
    sample that fails (a failed stage is still a step that ran)."""
    if loaded.model.name == "tiny-embeddings" and loaded.model.system.platform == "cpu":
        return passing_runs(loaded)
    return {
        "inventory": ScriptedRun(stdout=inventory_stdout(loaded)),
        "device": ScriptedRun(stdout=device_stdout()),
        "sample": ScriptedRun(exit_code=1, stderr="no outputs scripted"),
    }


@pytest.mark.parametrize("path", DOSSIERS, ids=[f"{p.parent.name}/{p.name}" for p in DOSSIERS])
def test_the_dry_run_lists_the_steps_a_rebuild_executes(path: Path, tmp_path: Path) -> None:
    loaded = _online_copy(path, tmp_path)
    out, handover = tmp_path / "out", tmp_path / "handover"
    planned = _dry_rebuild(loaded, out, handover)
    remote = any(a.uri is not None for a in (*loaded.model.data, *loaded.model.weights))
    # Remote weights are fetched first, before a build that could take an hour fails on a revoked credential.
    assert planned == [*(["fetch"] if remote else []), *BUILD_STEPS, *PROBE_STEPS, "report", "handover"]
    if loaded.model.build is not None or remote:
        # An extension's toolchain (.debs from a container of the base, nvcc's wheels) is collected while the
        # context renders: real engine only (tests/integration/test_cpp_extension.py records its steps.json).
        facts = BuildFacts(
            code=code_ref(inspect_code(loaded)),
            base_id="sha256:" + "b" * 64,
            base_repo_digests=(),
            previous_labels=None,
            engine_labels={},
            now="2026-12-01T12:00:00Z",
        )
        # Remote weights come from their registry or bucket: real servers only (tests/integration/
        # test_remote_minilm.py records its steps.json).
        probe = ProbeFacts(
            image_ref=default_tag(loaded), image_id=None, host=CPU_HOST, selection=None, sources_cache=tmp_path / "c"
        )
        options = BuildOptionsPlan(out=out.resolve(), tag=default_tag(loaded))
        assert names(rebuild_program(loaded, facts, probe, options, handover=handover)) == planned
        return
    engine = FakeEngine(images=[base_image(loaded)], runs=_any_run(loaded))
    rebuild_run(loaded, engine, BuildOptions(out=out), clock=clock, host_facts=lambda: CPU_HOST, handover=handover)
    assert [name for name, _ in _executed(out)] == planned


def test_a_passed_rebuild_runs_every_step_and_hands_over(tmp_path: Path) -> None:
    loaded = _online_copy(EXAMPLES / "tiny-embeddings" / "dossier.yaml", tmp_path)
    out, handover = tmp_path / "out", tmp_path / "handover"
    engine = FakeEngine(images=[base_image(loaded)], runs=passing_runs(loaded))
    result = rebuild_run(
        loaded, engine, BuildOptions(out=out), clock=clock, host_facts=lambda: CPU_HOST, handover=handover
    )
    assert result.run.report is not None and result.run.report.verdict == "passed"
    # An online install mounts no wheels image: that step alone is skipped, and says why.
    assert {status for name, status in _executed(out) if name != "wheels"} == {"done"}
    assert dict(_executed(out))["wheels"] == "skipped"
    assert (handover / "SHA256SUMS").is_file() and result.run.manifest is not None


def test_a_signed_rebuild_hand_over_says_so_in_its_plan_and_its_attestations_check(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

    from orchestrator.attest.keys import load_trust
    from orchestrator.stages.attestations import check_folder_attestations
    from orchestrator.stages.handover_folder import check_folder_files

    key = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "key").write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()))
    public = key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    (tmp_path / "allowed_signers").write_text(f"team@example.org {public}\n")
    loaded = _online_copy(EXAMPLES / "tiny-embeddings" / "dossier.yaml", tmp_path)
    out, handover = tmp_path / "out", tmp_path / "handover"
    text = dry_run_rebuild(
        loaded, BuildOptions(out=out), environ={}, handover=handover, sign_key=tmp_path / "key", host=CPU_HOST
    )
    assert f"sign: attestations/ (provenance, verification) with the key {tmp_path / 'key'}" in text
    engine = FakeEngine(images=[base_image(loaded)], runs=passing_runs(loaded))
    result = rebuild_run(
        loaded,
        engine,
        BuildOptions(out=out),
        clock=clock,
        host_facts=lambda: CPU_HOST,
        handover=handover,
        sign_key=tmp_path / "key",
    )
    assert result.run.manifest is not None
    checked = check_folder_files(handover)
    attribution = check_folder_attestations(
        handover,
        checked.present,
        checked.listed,
        load_trust(tmp_path / "allowed_signers"),
        image_id=result.run.manifest.image_id,
        pinned=None,
    )
    assert attribution.principals == "team@example.org"


def test_a_failed_build_records_every_later_step_as_skipped(tmp_path: Path) -> None:
    loaded = _online_copy(EXAMPLES / "tiny-embeddings" / "dossier.yaml", tmp_path)
    out = tmp_path / "out"
    engine = FakeEngine(images=[base_image(loaded)], builds=[ScriptedBuild(log="Step 1/1 : RUN x\n", error="boom")])
    rebuild_run(
        loaded, engine, BuildOptions(out=out), clock=clock, host_facts=lambda: CPU_HOST, handover=tmp_path / "h"
    )
    executed = _executed(out)
    assert [name for name, _ in executed] == _dry_rebuild(loaded, out, tmp_path / "h")
    assert dict(executed) == {
        "base": "done",
        "render": "done",
        "wheels": "skipped",
        "build": "failed",
        "inventory": "skipped",
        "image-checks": "skipped",
        "build-record": "done",
        "image": "skipped",
        "host": "skipped",
        "device": "skipped",
        "sample": "skipped",
        "report": "done",
        "handover": "skipped",
    }
    assert not (tmp_path / "h").exists()


def test_a_second_build_of_the_same_context_reuses_the_image_and_says_so(tmp_path: Path) -> None:
    loaded = _online_copy(EXAMPLES / "tiny-embeddings" / "dossier.yaml", tmp_path)
    out = tmp_path / "out"
    engine = FakeEngine(images=[base_image(loaded)], runs=passing_runs(loaded))
    run_build(loaded, engine, BuildOptions(out=out), clock=clock)
    record = run_build(loaded, engine, BuildOptions(out=out), clock=clock)
    assert record.reused
    executed = _executed(out)
    assert [name for name, _ in executed] == step_names(dry_run_build(loaded, BuildOptions(out=out), environ={}))
    assert dict(executed)["build"] == "reused" and dict(executed)["inventory"] == "reused"


def test_the_wheel_feed_branch_is_a_field_of_the_build_step_not_another_sequence(tmp_path: Path) -> None:
    """A wheelhouse dossier builds through the feed; its step list is the online one, the feed in its details.
    (test_wheel_feed.py runs the feed branch on an engine and compares its `steps.json` with this list.)"""
    feed = step_names_of(EXAMPLES / "tiny-embeddings" / "dossier.yaml", tmp_path, online=False, builder="classic")
    online = step_names_of(EXAMPLES / "tiny-embeddings" / "dossier.yaml", tmp_path / "o", online=True)
    buildkit = step_names_of(EXAMPLES / "tiny-embeddings" / "dossier.yaml", tmp_path / "b", online=False)
    assert feed[0] == online[0] == buildkit[0], "the builder and the feed are fields of step build, not a sequence"
    assert "wheel feed:" in feed[1] and "wheel feed:" not in online[1] and "wheel feed:" not in buildkit[1]
    assert "context server:" in buildkit[1] and "builder: BuildKit" in buildkit[1]
    assert "builder: classic" in feed[1] and "context server:" not in feed[1]
    assert "[engine] wheels: wheels image orch/wheels:" in buildkit[1]
    assert "wheels: skipped: no wheels image" in feed[1] and "wheels: skipped: no wheels image" in online[1]


def step_names_of(path: Path, tmp_path: Path, *, online: bool, builder: Builder | None = None) -> tuple[list[str], str]:
    folder = tmp_path / "copy"
    shutil.copytree(path.parent, folder)
    copy = folder / path.name
    if online:
        copy.write_text(copy.read_text().replace("install: wheelhouse", "install: online"))
    text = dry_run_build(load_dossier(copy), BuildOptions(out=tmp_path / "out", builder=builder), environ={})
    return step_names(text), text


def test_a_base_pulled_by_step_base_plans_the_rest_again_with_its_id(tmp_path: Path) -> None:
    loaded = _online_copy(EXAMPLES / "tiny-embeddings" / "dossier.yaml", tmp_path)
    out = tmp_path / "out"
    engine = _BaseArrivesLater(images=[base_image(loaded)], runs=passing_runs(loaded))
    record = run_build(loaded, engine, BuildOptions(out=out), clock=clock)
    base_id = base_image(loaded).id
    assert record.base_image.id == base_id
    dockerfile = (out / "context" / "Dockerfile").read_text()
    assert f'io.orch.base.id="{base_id}"' in dockerfile and "<id of the base image" not in dockerfile
    executed = _executed(out)
    assert executed[0] == ("base", "done")


class _BaseArrivesLater(FakeEngine):
    """The observe phase finds no base; step `base` then gets it (as a pull would)."""

    def image(self, ref: str, *, layers: bool = False) -> ImageInfo | None:
        first = not any(call == ("image", ref) for call in self.calls)
        found = super().image(ref, layers=layers)
        return None if first and found is not None and ref in found.tags and "debian" in ref else found


# -- one traced `orch rebuild --handover` -------------------------------------------------------------------


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    loaded = _online_copy(EXAMPLES / "tiny-embeddings" / "dossier.yaml", tmp_path)
    trace: dict[str, Any] = {"connections": 0, "read": [], "image_checks": 0, "loaded": loaded}

    def connect(*args: object, **kwargs: object) -> Connection:
        trace["connections"] += 1
        return FakeEngine(images=[base_image(loaded)], runs=passing_runs(loaded)).connection()

    from orchestrator import documents
    from orchestrator.checks import image as image_module

    real_read, real_checks = documents.read_json, image_module.image_checks

    def read_json(path: Path, expected: str) -> Any:
        trace["read"].append(path.name)
        return real_read(path, expected)

    def image_checks(*args: Any, **kwargs: Any) -> Any:
        trace["image_checks"] += 1
        return real_checks(*args, **kwargs)

    monkeypatch.setattr("orchestrator.engine.connect", connect)
    monkeypatch.setattr(documents, "read_json", read_json)
    monkeypatch.setattr("orchestrator.stages.build.image_checks", image_checks)
    monkeypatch.setattr("orchestrator.stages.image_stage.image_checks", image_checks)
    monkeypatch.setattr("orchestrator.stages.observe.collect_host_facts", lambda info: CPU_HOST)
    monkeypatch.setattr("orchestrator.pipeline.doctor.collect_host_facts", lambda info: CPU_HOST)
    monkeypatch.setattr("orchestrator.pipeline.rebuild.utc_now", clock, raising=False)
    yield trace


def test_a_traced_rebuild_with_a_hand_over_writes_each_document_once_on_one_connection(
    traced: dict[str, Any], tmp_path: Path
) -> None:
    from orchestrator.cli.main import cli

    loaded: LoadedDossier = traced["loaded"]
    out, handover = tmp_path / "out", tmp_path / "handover"
    result = CliRunner().invoke(
        cli, ["rebuild", str(loaded.path), "--out", str(out), "--handover", str(handover)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert traced["connections"] == 1, "the hand-over is a step of the same program, on the same engine"
    assert traced["read"] == [], "no document is read back after it is written"
    assert traced["image_checks"] == 1, "the image checks run once per rebuild"
    assert (handover / "SHA256SUMS").is_file()
    assert [name for name, _ in _executed(out)] == _dry_rebuild(loaded, out.resolve(), handover.resolve())


def test_a_probe_alone_reads_the_earlier_build_json_and_runs_its_steps(tmp_path: Path) -> None:
    from orchestrator.pipeline.dry_run import dry_run_probe
    from orchestrator.stages.execute import run_probe
    from orchestrator.stages.probe import ProbeOptions

    loaded = _online_copy(EXAMPLES / "tiny-embeddings" / "dossier.yaml", tmp_path)
    out = tmp_path / "out"
    engine = FakeEngine(images=[base_image(loaded)], runs=passing_runs(loaded))
    run_build(loaded, engine, BuildOptions(out=out), clock=clock)
    report = run_probe(
        loaded, engine, ProbeOptions(out=out), host_facts=lambda: CPU_HOST, clock=clock, write_report=True
    )
    assert report.verdict == "passed" and (out / "report.json").is_file()
    executed = _executed(out)
    assert [name for name, _ in executed] == step_names(dry_run_probe(loaded, out, None, environ={}, host=CPU_HOST))
    assert "in this run" not in report.stages["image"].facts.recorded()["built"]
