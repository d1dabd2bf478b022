"""Issue 15's build levers, without Docker: the installer choice and how it renders, the context digest,
and the reuse of an image built from the same identity and context (the in-memory engine)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.engine import ImageInfo
from orchestrator.engine.fake import FakeEngine, ScriptedRun
from orchestrator.errors import DossierError
from orchestrator.plan.build import CONTEXT_DIGEST_LABEL, default_tag, make_plan
from orchestrator.render.dockerfile import render_dockerfile
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.build_context import context_digest
from orchestrator.stages.context import installer_lock
from orchestrator.stages.execute import run_build
from orchestrator.vendor import uv_wheel
from tests.probe_outputs import inventory_output


def _edit(path: Path, old: str, new: str) -> Path:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


# -- the installer -----------------------------------------------------------------------------------------


def test_a_wheelhouse_installs_with_uv_from_its_pinned_wheel_and_ships_none_of_it(tiny_example: Path) -> None:
    loaded = load_dossier(tiny_example / "dossier.yaml")
    plan = make_plan(loaded)
    wheel = uv_wheel()
    assert plan.installer == "uv" and plan.uv == wheel and wheel is not None
    builder, final = render_dockerfile(plan).split("# ---- final image")
    assert f"-m zipfile -e /tmp/orch/wheels/{wheel.file_name} /tmp/orch/uv" in builder
    assert f"/tmp/orch/uv/{wheel.binary} pip install --python /opt/venv/bin/python --no-cache --no-index" in builder
    assert "--require-hashes -r /tmp/orch/requirements.lock" in builder
    # Bytecode for every module but the packages' own tests (compileall -x), a failed file not fatal:
    assert "python -m compileall -q -j 0 -x '/tests/' /opt/venv/lib/python3.11/site-packages" in builder
    assert "|| echo 'orch: the files above did not compile" in builder
    assert "/opt/venv/bin/pip install" not in builder
    assert "/tmp/orch" not in final and "uv-" not in final, "uv never reaches the final image"
    assert 'io.orch.installer="uv"' in final


def test_installer_pip_keeps_pip_in_the_builder(tiny_example: Path) -> None:
    path = _edit(tiny_example / "dossier.yaml", "  install: wheelhouse\n", "  install: wheelhouse\n  installer: pip\n")
    plan = make_plan(load_dossier(path))
    assert plan.installer == "pip" and plan.uv is None
    dockerfile = render_dockerfile(plan)
    assert "/opt/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/orch/wheels" in dockerfile
    assert "zipfile" not in dockerfile and 'io.orch.installer="pip"' in dockerfile


def test_an_online_install_defaults_to_pip_and_refuses_uv(tiny_example: Path) -> None:
    path = _edit(tiny_example / "dossier.yaml", "install: wheelhouse", "install: online")
    assert make_plan(load_dossier(path)).installer == "pip"
    _edit(path, "  install: online\n", "  install: online\n  installer: uv\n")
    with pytest.raises(DossierError) as caught:
        load_dossier(path)
    assert caught.value.field == "python"
    assert "installer uv comes from the wheelhouse" in caught.value.message


def test_the_installer_enters_the_identity_only_when_written(tiny_example: Path) -> None:
    before = load_dossier(tiny_example / "dossier.yaml").identity
    path = _edit(tiny_example / "dossier.yaml", "  install: wheelhouse\n", "  install: wheelhouse\n  installer: uv\n")
    assert load_dossier(path).identity != before, "a written choice is part of what the dossier says"
    _edit(path, "  installer: uv\n", "")
    assert load_dossier(path).identity == before, "older dossiers keep their identity, tag and hand-overs"


def test_the_installer_wheel_is_collected_as_a_one_line_hashed_lock() -> None:
    wheel = uv_wheel()
    assert wheel is not None
    lock = installer_lock(wheel)
    (requirement,) = lock.requirements
    assert lock.fully_hashed and requirement.text == f"uv=={wheel.version}" and requirement.hashes == (wheel.sha256,)
    assert len(wheel.sha256) == 64 and wheel.file_name.startswith(f"uv-{wheel.version}-")


# -- the context digest ------------------------------------------------------------------------------------


def _context(folder: Path) -> Path:
    (folder / "app").mkdir(parents=True)
    (folder / "Dockerfile").write_text("FROM scratch\n")
    (folder / "app" / "run.py").write_text("print(1)\n")
    (folder / "wheels").mkdir()
    (folder / "wheels" / "a-1-py3-none-any.whl").write_bytes(b"wheel")
    return folder


def test_the_context_digest_follows_content_and_mode_not_timestamps(tmp_path: Path) -> None:
    first, second = _context(tmp_path / "one"), _context(tmp_path / "two")
    (second / "app" / "run.py").touch()
    assert context_digest(first) == context_digest(second)
    (second / "app" / "run.py").write_text("print(2)\n")
    assert context_digest(first) != context_digest(second), "one byte changes it"
    (second / "app" / "run.py").write_text("print(1)\n")
    (second / "app" / "run.py").chmod(0o755)
    assert context_digest(first) != context_digest(second), "the executable bit travels in the tar"


def test_the_context_digest_takes_the_wheels_hashes_it_is_given(tmp_path: Path) -> None:
    folder = _context(tmp_path / "ctx")
    real = hashlib.sha256(b"wheel").hexdigest()
    assert context_digest(folder, {"wheels/a-1-py3-none-any.whl": real}) == context_digest(folder)
    assert context_digest(folder, {"wheels/a-1-py3-none-any.whl": "0" * 64}) != context_digest(folder)


# -- reuse -------------------------------------------------------------------------------------------------

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def online_tiny(tiny_example: Path, monkeypatch: pytest.MonkeyPatch) -> LoadedDossier:
    """Online install: the build needs no wheel downloaded on the host; the code is a plain folder."""
    monkeypatch.setattr("orchestrator.stages.code_source._work_tree", lambda folder: None)
    return load_dossier(_edit(tiny_example / "dossier.yaml", "install: wheelhouse", "install: online"))


def _engine(loaded: LoadedDossier) -> FakeEngine:
    freeze = [f"{r.name}=={r.version}" for r in loaded.lock.requirements if r.marker is None]
    document = inventory_output()
    document["pip"].update(freeze=freeze, check_ok=True, check_lines=[])
    base = ImageInfo(
        id=loaded.base_image.image_id or "sha256:" + "b" * 64,
        tags=(loaded.base_image.from_line,),
        labels={},
        env={},
        repo_digests=(),
        size=1,
    )
    return FakeEngine(images=[base], runs={"inventory": ScriptedRun(stdout=json.dumps(document))})


def test_a_second_build_with_nothing_changed_reuses_the_image(online_tiny: LoadedDossier, tmp_path: Path) -> None:
    engine = _engine(online_tiny)
    stages: list[str] = []
    first = run_build(online_tiny, engine, BuildOptions(out=tmp_path / "a"), clock=lambda: NOW)
    [(_, _, labels)] = engine.builds
    assert labels == {CONTEXT_DIGEST_LABEL: first.context.digest}, "the digest travels as a build label"
    second = run_build(online_tiny, engine, BuildOptions(out=tmp_path / "b"), on_stage=stages.append, clock=lambda: NOW)
    assert len(engine.builds) == 1, "no second engine build"
    assert second.reused and not first.reused
    assert second.image is not None and first.image is not None and second.image.id == first.image.id
    assert second.context.digest == first.context.digest
    assert any(stage.startswith(f"reuse {default_tag(online_tiny)}: same dossier identity") for stage in stages)
    assert "no engine build" in (tmp_path / "b" / "build.log").read_text()
    assert json.loads((tmp_path / "b" / "build.json").read_text())["reused"] is True


def test_no_cache_and_a_changed_context_build_again(online_tiny: LoadedDossier, tmp_path: Path) -> None:
    engine = _engine(online_tiny)
    run_build(online_tiny, engine, BuildOptions(out=tmp_path / "a"), clock=lambda: NOW)
    again = run_build(online_tiny, engine, BuildOptions(out=tmp_path / "a", no_cache=True), clock=lambda: NOW)
    assert len(engine.builds) == 2 and not again.reused
    embed = online_tiny.path.parent / "app" / "embed.py"
    embed.write_text(embed.read_text() + "\n# a code-only change\n")
    changed = run_build(load_dossier(online_tiny.path), engine, BuildOptions(out=tmp_path / "a"), clock=lambda: NOW)
    assert len(engine.builds) == 3 and not changed.reused
    assert changed.context.digest != again.context.digest
