"""The BuildKit branch of step `build`, on the fake engine: the context server, the remote URL, the mounted wheels.

What the real engine does with them (the same environment digest as a classic build, the first error of a
failed step, a remote TLS endpoint) is tests/integration/test_buildkit.py's.
"""

from __future__ import annotations

import json
import re
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.dossier.load import LoadedDossier, load_dossier
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


def _buildkit_engine(loaded: LoadedDossier, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeEngine, ImageInfo]:
    from orchestrator.stages.code_source import CodeState

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
    return engine, base


def _executed(out: Path) -> dict[str, str]:
    return {step["name"]: step["status"] for step in json.loads((out / "steps.json").read_text())["executed"]}


def test_a_buildkit_build_mounts_the_wheels_from_their_image_and_serves_the_rest_and_runs_the_planned_steps(
    tiny_example: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    loaded = load_dossier(tiny_example / "dossier.yaml")
    engine, base = _buildkit_engine(loaded, monkeypatch)
    out = tmp_path / "out"
    record = run_build(loaded, engine, BuildOptions(out=out))

    assert record.context.builder == "buildkit" and record.context.network == "none"
    # Two services, one after the other: the wheels image's context, then the build's.
    [(wheels_spec, wheels_served), (spec, served)] = engine.feeds
    assert [n for n in wheels_served if n.endswith("/context.tar")] != [n for n in served if n.endswith("/context.tar")]
    assert spec == wheels_spec and spec.network == "bridge" and spec.port is not None and spec.image == base.id
    assert spec.labels["io.orch.role"] == "context-server"
    [member] = [name for name in served if name.endswith("/context.tar")]
    assert re.fullmatch(r"srv/[0-9a-f]{32}/context\.tar", member), "a random path the engine alone is told"
    assert "srv/index.html" in served, "the server lists no folder"
    [sent] = engine.contexts
    assert not any(name.startswith("wheels") for name in sent), "the build's context leaves the wheels out"
    assert {"orch/install-venv.sh", "orch/venv_seed.py", "orch/compile_venv.py", "Dockerfile"} <= set(sent)
    [wheels_sent] = engine.wheels_contexts
    assert wheels_sent == ["Dockerfile", "wheels", *sorted(f"wheels/{w.file}" for w in record.context.wheels)]
    assert record.context.wheels_image is not None
    tag, _, image_id = record.context.wheels_image.partition("@")
    assert re.fullmatch(r"orch/wheels:[0-9a-f]{24}", tag)
    wheels_image = engine.image(tag)
    assert wheels_image is not None and wheels_image.id == image_id
    assert wheels_image.labels["io.orch.role"] == "wheels"
    assert wheels_image.labels["io.orch.wheels.digest"].startswith("sha256:")
    dockerfile = (out / "context" / "Dockerfile").read_text()
    assert "RUN --mount=type=bind,source=orch," in dockerfile
    assert f"--mount=type=bind,from={tag},source=/wheels,target=/tmp/orch/wheels" in dockerfile
    uv = next(w for w in record.context.wheels if w.file.startswith("uv-"))
    install = dockerfile.split("sh /tmp/orch/bin/install-venv.sh ", 1)[1].split()
    assert install[:2] == ["python3.11", uv.file] and install[3:5] == ["\\", uv.sha256], "uv's sha256 is checked"
    assert "COPY wheels" not in dockerfile and "wheel feed" not in dockerfile and "python3.11 -c" not in dockerfile
    assert not engine.feeds_running, "the context server is gone once the build returns"
    planned = dry_run_build(loaded, BuildOptions(out=out), environ={})
    assert "builder: BuildKit" in planned and "context server:" in planned and f"wheels image {tag}" in planned
    assert list(_executed(out)) == step_names(planned)
    assert _executed(out)["wheels"] == "done"


def test_the_wheels_image_is_reused_by_content_built_again_when_its_label_differs_and_skipped_with_the_image(
    tiny_example: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    loaded = load_dossier(tiny_example / "dossier.yaml")
    engine, _ = _buildkit_engine(loaded, monkeypatch)
    out = tmp_path / "out"
    first = run_build(loaded, engine, BuildOptions(out=out))
    assert first.context.wheels_image is not None
    tag = first.context.wheels_image.partition("@")[0]

    # --no-cache builds the image again, but the wheels image is an input named by its content: reused.
    second = run_build(loaded, engine, BuildOptions(out=out, no_cache=True))
    assert _executed(out)["wheels"] == "reused" and second.context.wheels_image == first.context.wheels_image
    assert len(engine.wheels_contexts) == 1 and len(engine.contexts) == 2

    # Nothing changed: the tag's image is reused, and no engine build needs the wheels.
    run_build(loaded, engine, BuildOptions(out=out))
    assert _executed(out)["wheels"] == "skipped" and _executed(out)["build"] == "reused"

    # Another image under the tag (another user, an older wheel set): its label differs, so it is built again.
    held = engine.image(tag)
    assert held is not None
    engine.add_image(replace(held, id="sha256:" + "e" * 64, labels={"io.orch.wheels.digest": "sha256:other"}), tag)
    third = run_build(loaded, engine, BuildOptions(out=out, no_cache=True))
    assert _executed(out)["wheels"] == "done" and len(engine.wheels_contexts) == 2
    assert third.context.wheels_image is not None and "e" * 64 not in third.context.wheels_image


def test_a_classic_build_makes_no_wheels_image(
    tiny_example: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    loaded = load_dossier(tiny_example / "dossier.yaml")
    engine, _ = _buildkit_engine(loaded, monkeypatch)
    record = run_build(loaded, engine, BuildOptions(out=tmp_path / "out", builder="classic"))
    assert record.context.wheels_image is None and engine.wheels_contexts == []
    assert _executed(tmp_path / "out")["wheels"] == "skipped", "the same steps, whatever the builder"
