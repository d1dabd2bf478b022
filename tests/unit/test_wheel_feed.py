"""The wheel feed (issue 15, cold builds): when a build installs from it, what it serves, what the engine gets.

The feed keeps the locked wheels out of every layer while the venv is written and committed once; these
tests pin the decision (plan/build.py `wheel_feed_refusal`), the one-stage Dockerfile, and that `run_build`
serves the lock and wheels from the feed and sends a context without them. The real feed and build run in
tests/integration/test_build.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import ImageInfo
from orchestrator.engine.docker_build import build_network_mode as _build_network_mode
from orchestrator.engine.fake import FakeEngine, ScriptedRun
from orchestrator.model.build_record import CodeRef
from orchestrator.plan.build import FEED_URL, make_build_steps, make_plan, wheel_feed_refusal
from orchestrator.render.dockerfile import feed_fetch_source, render_dockerfile
from orchestrator.stages.build_context import context_tar
from tests.paths import EXAMPLES
from tests.probe_outputs import inventory_output

TINY = EXAMPLES / "tiny-embeddings"
CODE = CodeRef(kind="folder", source="app", revision=None, dirty=False, dirty_diff_sha256=None, variant=None)


def _steps(path: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    return make_build_steps(
        load_dossier(path), out=Path("/o"), code=CODE, created="C", base_id="sha256:" + "b" * 64, **kwargs
    )


def test_a_cpu_wheelhouse_build_with_uv_installs_from_the_feed() -> None:
    steps = _steps(TINY / "dossier.yaml")
    assert steps.plan.wheel_feed and steps.network == "wheel-feed"
    assert steps.feed is not None and steps.feed.image == "sha256:" + "b" * 64, "the feed runs the base by its id"
    assert steps.feed.command[:2] == ("python3.11", "-c") and "http.server" in steps.feed.command[2]
    assert "127.0.0.1" in steps.feed.command, "the feed listens on its loopback only"


def test_an_explicit_network_is_the_users_choice_and_turns_the_feed_off() -> None:
    steps = _steps(TINY / "dossier.yaml", network="none")
    assert not steps.plan.wheel_feed and steps.feed is None and steps.network == "none"
    assert "COPY --from=builder /opt/venv /opt/venv" in render_dockerfile(steps.plan)


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        (EXAMPLES / "cpp-extension" / "dossier.yaml", "compiled extensions"),
        (TINY / "dossier-cuda.yaml", "online install"),
    ],
)
def test_builds_the_feed_cannot_serve_keep_the_builder_stage(path: Path, reason: str) -> None:
    plan = make_plan(load_dossier(path))
    refusal = wheel_feed_refusal(plan)
    assert refusal is not None and reason in refusal
    steps = _steps(path)
    assert steps.feed is None and steps.network != "wheel-feed"


def test_pip_and_online_installs_are_refused() -> None:
    plan = make_plan(load_dossier(TINY / "dossier.yaml"))
    assert wheel_feed_refusal(plan) is None
    assert wheel_feed_refusal(replace(plan, installer="pip")) == "installer pip"
    assert wheel_feed_refusal(replace(plan, install_mode="online")) == "online install"
    apt_python = replace(plan, base=replace(plan.base, python_source="apt"))
    assert wheel_feed_refusal(apt_python) == "the base's Python comes from apt", "the feed runs the base's Python"
    assert wheel_feed_refusal(replace(plan, runtime_apt_packages=("libgomp1",))) == "OS packages are installed with apt"


def test_the_feed_dockerfile_has_one_stage_and_no_wheel_in_any_layer() -> None:
    loaded = load_dossier(TINY / "dossier.yaml")
    plan = _steps(TINY / "dossier.yaml").plan
    text = render_dockerfile(plan)
    assert [line for line in text.splitlines() if line.startswith("FROM ")] == ["FROM orch/debian-python:bookworm"]
    assert "COPY wheels" not in text and "COPY requirements.lock" not in text and "--from=builder" not in text
    # The copier brings the wheels into a local folder first: uv unpacks local files in parallel.
    assert f"/tmp/orch/feed_fetch.py {FEED_URL}wheels/ /tmp/orch/wheels" in text
    assert "--find-links /tmp/orch/wheels --require-hashes" in text
    # The step's text carries the lock's, uv's and the copier's sha256: a change to any misses the cache.
    lock = loaded.resolve(loaded.model.python.requirements).read_bytes()
    assert hashlib.sha256(lock).hexdigest() in text
    assert plan.uv is not None and plan.uv.sha256 in text
    assert f"feed_fetch.py {hashlib.sha256(feed_fetch_source()).hexdigest()}" in text
    # The venv is seeded by uv with ensurepip's own wheels, ensurepip itself if that fails.
    assert "-m venv --without-pip /opt/venv" in text and "-r /tmp/orch/seed.txt" in text
    assert "/opt/venv/bin/python -m ensurepip --upgrade --default-pip" in text
    assert re.search(r"&& rm -rf /tmp/orch$", text, re.MULTILINE), "uv and the lock leave the image with the step"


def test_the_build_network_mode_joins_the_feed_container() -> None:
    assert _build_network_mode("wheel-feed", "abc") == "container:abc"
    assert _build_network_mode("none", None) == "none"
    assert _build_network_mode("default", None) is None
    with pytest.raises(ValueError, match="feed's container id"):
        _build_network_mode("wheel-feed", None)


def test_context_tar_keeps_only_the_named_entries_under_a_prefix(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "a-1-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "requirements.lock").write_text("a==1\n")
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    served = context_tar(tmp_path, only=("requirements.lock", "wheels"), prefix="feed")
    with tarfile.open(fileobj=served.file) as tar:
        names = tar.getnames()
        assert tar.getmember("feed/wheels/a-1-py3-none-any.whl").mode == 0o644
    assert names == ["feed", "feed/wheels", "feed/requirements.lock", "feed/wheels/a-1-py3-none-any.whl"]
    rest = context_tar(tmp_path, only=("Dockerfile", "requirements.lock"))
    with tarfile.open(fileobj=rest.file) as tar:
        assert tar.getnames() == ["Dockerfile", "requirements.lock"]


def test_run_build_serves_the_wheels_from_the_feed_and_sends_a_context_without_them(
    tiny_example: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from orchestrator.stages import build as build_module
    from orchestrator.stages.code_source import CodeState
    from orchestrator.stages.context import RenderedContext
    from orchestrator.stages.execute import run_build
    from orchestrator.stages.wheelhouse import Wheel

    loaded = load_dossier(tiny_example / "dossier.yaml")
    state = CodeState("folder", "app", None, False, None, "0" * 64)
    context = tmp_path / "context"
    (context / "wheels").mkdir(parents=True)
    (context / "app").mkdir()
    (context / "app" / "embed.py").write_text("print(1)\n")
    (context / "wheels" / "a-1-py3-none-any.whl").write_bytes(b"wheel")
    (context / "requirements.lock").write_text("a==1\n")
    (context / "feed_fetch.py").write_bytes(feed_fetch_source())
    monkeypatch.setattr("orchestrator.stages.observe.inspect_code", lambda loaded: state)

    def rendered(loaded_: object, plan: object, directory: Path, **kwargs: object) -> RenderedContext:
        dockerfile = render_dockerfile(plan)  # type: ignore[arg-type]
        (context / "Dockerfile").write_text(dockerfile)
        wheel = Wheel("a==1", "a-1-py3-none-any.whl", hashlib.sha256(b"wheel").hexdigest())
        return RenderedContext(directory=context, dockerfile=dockerfile, wheels=(wheel,), code=state)

    monkeypatch.setattr(build_module, "write_context", rendered)
    document = inventory_output()
    document["pip"].update(freeze=[], check_ok=True, check_lines=[])
    base = ImageInfo(
        id="sha256:" + "b" * 64, tags=(loaded.base_image.from_line,), labels={}, env={}, repo_digests=(), size=1
    )
    engine = FakeEngine(images=[base], runs={"inventory": ScriptedRun(stdout=json.dumps(document))})
    record = run_build(loaded, engine, build_module.BuildOptions(out=tmp_path / "out"))
    [(spec, served)] = engine.feeds
    assert spec.image == base.id
    assert served == [
        "feed",
        "feed/feed_fetch.py",
        "feed/requirements.lock",
        "feed/wheels",
        "feed/wheels/a-1-py3-none-any.whl",
    ]
    [(_, network, _)] = engine.builds
    assert network == "wheel-feed" and record.context.network == "wheel-feed"
    [sent] = engine.contexts
    assert not any(name.startswith("wheels") for name in sent) and "feed_fetch.py" not in sent, sent
    assert "Dockerfile" in sent and "app/embed.py" in sent
    assert not engine.feeds_running, "the feed is gone once the build returns"
    # The feed branch is a field of step `build`: the steps run are the steps `--dry-run` lists.
    from orchestrator.pipeline.dry_run import dry_run_build
    from orchestrator.plan.describe import step_names

    monkeypatch.setattr("orchestrator.stages.code_source._work_tree", lambda folder: None)
    executed = json.loads((tmp_path / "out" / "steps.json").read_text())["executed"]
    # The fake engine offers the classic builder only; the dry run, asking no engine, is told the same.
    planned = dry_run_build(loaded, build_module.BuildOptions(out=tmp_path / "out", builder="classic"), environ={})
    assert "wheel feed:" in planned
    assert [step["name"] for step in executed] == step_names(planned)
