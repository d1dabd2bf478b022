"""The BuildKit branch of step `build`, on the fake engine: the context server, the remote URL, the mounted wheels.

What the real engine does with them (the same environment digest as a classic build, the first error of a
failed step, a remote TLS endpoint) is tests/integration/test_buildkit.py's.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import EngineInfo, ImageInfo
from orchestrator.engine.docker_build import builders
from orchestrator.engine.fake import FakeEngine, ScriptedRun
from orchestrator.errors import BadInput
from orchestrator.pipeline.dry_run import dry_run_build
from orchestrator.plan.builder import choose_builder, requested_builder
from orchestrator.plan.describe import step_names
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.build_context import served_context_tar
from orchestrator.stages.execute import run_build
from tests.probe_outputs import inventory_output

OFFERS_BUILDKIT = EngineInfo("fake://", "0", "1.41", "linux", ("runc",), (), builders=("buildkit", "classic"))


@pytest.mark.parametrize(
    ("os_type", "api", "offered"),
    [
        ("linux", "1.41", ("buildkit", "classic")),
        ("linux", "1.39", ("buildkit", "classic")),
        ("linux", "1.38", ("classic",)),
        ("windows", "1.41", ("classic",)),
        ("linux", "not-a-version", ("classic",)),
    ],
)
def test_the_engine_offers_buildkit_on_linux_from_api_1_39(os_type: str, api: str, offered: tuple[str, ...]) -> None:
    assert builders(os_type, api) == offered


def test_the_builder_is_the_engines_preferred_one_unless_asked_and_an_unoffered_one_is_bad_input() -> None:
    assert choose_builder(None, ("buildkit", "classic")) == "buildkit"
    assert choose_builder(None, ("classic",)) == "classic"
    assert choose_builder("classic", ("buildkit", "classic")) == "classic"
    with pytest.raises(BadInput, match="--builder buildkit: this engine offers classic"):
        choose_builder("buildkit", ("classic",))
    assert requested_builder(None, {"ORCH_BUILDER": "classic"}) == "classic"
    assert requested_builder("buildkit", {"ORCH_BUILDER": "classic"}) == "buildkit", "the option wins"
    assert requested_builder("auto", {}) is None
    with pytest.raises(BadInput, match="ORCH_BUILDER='kaniko'"):
        requested_builder(None, {"ORCH_BUILDER": "kaniko"})


def test_the_served_tar_holds_the_context_as_one_member_and_an_empty_index(tmp_path: Path) -> None:
    context = tmp_path / "context"
    (context / "wheels").mkdir(parents=True)
    (context / "Dockerfile").write_text("FROM scratch\n")
    (context / "wheels" / "a-1-py3-none-any.whl").write_bytes(b"w" * 1000)
    with served_context_tar(context, "srv/tok/context.tar") as served, tarfile.open(fileobj=served) as outer:
        assert [(m.name, m.size) for m in outer.getmembers()] == [
            ("srv/index.html", 0),
            ("srv/tok/context.tar", member_size := outer.getmember("srv/tok/context.tar").size),
        ]
        assert member_size > 0
        member = outer.getmember("srv/tok/context.tar")
        inner = outer.extractfile(member)
        assert inner is not None
        with tarfile.open(fileobj=inner) as tar:
            assert tar.getnames() == ["wheels", "Dockerfile", "wheels/a-1-py3-none-any.whl"]
            wheel = tar.extractfile("wheels/a-1-py3-none-any.whl")
            assert wheel is not None and wheel.read() == b"w" * 1000


def test_a_buildkit_build_serves_the_whole_context_and_runs_the_planned_steps(
    tiny_example: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from orchestrator.stages.code_source import CodeState

    loaded = load_dossier(tiny_example / "dossier.yaml")
    state = CodeState("folder", "app", None, False, None, "0" * 64)
    monkeypatch.setattr("orchestrator.stages.observe.inspect_code", lambda loaded: state)
    monkeypatch.setattr("orchestrator.stages.code_source._work_tree", lambda folder: None)
    document = inventory_output()
    document["pip"].update(freeze=[], check_ok=True, check_lines=[])
    base = ImageInfo(
        id="sha256:" + "b" * 64, tags=(loaded.base_image.from_line,), labels={}, env={}, repo_digests=(), size=1
    )
    engine = FakeEngine(
        images=[base], runs={"inventory": ScriptedRun(stdout=json.dumps(document))}, info=OFFERS_BUILDKIT
    )
    out = tmp_path / "out"
    record = run_build(loaded, engine, BuildOptions(out=out))

    assert record.context.builder == "buildkit" and record.context.network == "none"
    [(spec, served)] = engine.feeds
    assert spec.network == "bridge" and spec.port is not None and spec.image == base.id
    assert spec.labels["io.orch.role"] == "context-server"
    [member] = [name for name in served if name.endswith("/context.tar")]
    assert re.fullmatch(r"srv/[0-9a-f]{32}/context\.tar", member), "a random path the engine alone is told"
    assert "srv/index.html" in served, "the server lists no folder"
    [sent] = engine.contexts
    assert "wheels/" + record.context.wheels[0].file in sent, "BuildKit's context carries the wheels"
    assert {"orch/install-venv.sh", "orch/venv_seed.py", "orch/compile_venv.py", "Dockerfile"} <= set(sent)
    dockerfile = (out / "context" / "Dockerfile").read_text()
    assert "RUN --mount=type=bind,source=orch," in dockerfile and "--mount=type=bind,source=wheels," in dockerfile
    assert "COPY wheels" not in dockerfile and "wheel feed" not in dockerfile and "python3.11 -c" not in dockerfile
    assert not engine.feeds_running, "the context server is gone once the build returns"
    executed = json.loads((out / "steps.json").read_text())["executed"]
    planned = dry_run_build(loaded, BuildOptions(out=out), environ={})
    assert "builder: BuildKit" in planned and "context server:" in planned
    assert [step["name"] for step in executed] == step_names(planned)
