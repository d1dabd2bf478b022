from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine import ImageInfo
from orchestrator.errors import BadInput, EnvironmentFailure, ToolMissing
from orchestrator.stages import base_image
from orchestrator.stages.base_image import LABEL, BaseRecipe, ensure_base_image, image_changes


class FakeEngine:
    """Only `image` is used before any side effect; any other member reached fails the test."""

    def __init__(self, images: dict[str, ImageInfo] | None = None) -> None:
        self.images = images or {}

    def image(self, ref: str, *, layers: bool = False) -> ImageInfo | None:
        return self.images.get(ref)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"engine.{name} must not be reached in this test")


def _image(labels: dict[str, str]) -> ImageInfo:
    return ImageInfo(id="sha256:" + "a" * 64, tags=(), labels=labels, env={}, repo_digests=(), size=1)


def test_recipe_command_and_snapshot_mirror() -> None:
    recipe = BaseRecipe(suite="bookworm", snapshot="20250520T000000Z", extra_packages=("git",))
    assert recipe.effective_mirror == "http://snapshot.debian.org/archive/debian/20250520T000000Z"
    command = recipe.debootstrap_command(Path("/tmp/root"))
    assert command[:3] == ["debootstrap", "--variant=minbase", "--arch=amd64"]
    assert "--include=ca-certificates,git,python3,python3-pip,python3-venv" in command
    assert command[-3:] == ["bookworm", "/tmp/root", recipe.effective_mirror]
    assert recipe.ref == "orch/debian-python:bookworm" and recipe.python == "3.11"


def test_fingerprint_is_about_content() -> None:
    assert BaseRecipe().fingerprint() == BaseRecipe().fingerprint()
    assert BaseRecipe().fingerprint() != BaseRecipe(snapshot="20250520T000000Z").fingerprint()
    assert BaseRecipe(extra_packages=("git",)).fingerprint() != BaseRecipe().fingerprint()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"suite": "buster"}, "not supported"), ({"snapshot": "yesterday"}, "must look like 20250520T000000Z")],
)
def test_bad_recipes(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(BadInput, match=message):
        BaseRecipe(**kwargs)  # type: ignore[arg-type]


def test_labels_say_what_the_image_is_made_of() -> None:
    changes = image_changes(BaseRecipe(), "2026-01-01T00:00:00Z", "debootstrap 1.0")
    label_line = next(change for change in changes if change.startswith("LABEL "))
    assert f'{LABEL}.suite="bookworm"' in label_line
    assert f'{LABEL}.python="3.11"' in label_line
    assert f'{LABEL}.recipe="{BaseRecipe().fingerprint()}"' in label_line
    assert 'org.opencontainers.image.created="2026-01-01T00:00:00Z"' in label_line


def test_an_existing_tag_with_the_same_recipe_is_reused() -> None:
    recipe = BaseRecipe()
    engine = FakeEngine({recipe.ref: _image({f"{LABEL}.recipe": recipe.fingerprint()})})
    outcome = ensure_base_image(engine, recipe)
    assert outcome.reused and outcome.image_id.startswith("sha256:")


def test_an_existing_tag_with_another_recipe_is_refused() -> None:
    recipe = BaseRecipe()
    engine = FakeEngine({recipe.ref: _image({f"{LABEL}.recipe": "something else"})})
    with pytest.raises(BadInput, match="made from another recipe"):
        ensure_base_image(engine, recipe)


def test_not_root_is_an_environment_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base_image.os, "geteuid", lambda: 1000)
    with pytest.raises(EnvironmentFailure, match="must run as root") as caught:
        ensure_base_image(FakeEngine(), BaseRecipe())
    assert caught.value.exit_code == 3


def test_missing_debootstrap_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base_image.os, "geteuid", lambda: 0)
    monkeypatch.setattr(base_image.shutil, "which", lambda name: None)
    with pytest.raises(ToolMissing, match="debootstrap is not installed") as caught:
        ensure_base_image(FakeEngine(), BaseRecipe())
    assert caught.value.hint == "apt-get install debootstrap"


def test_suites_come_from_the_base_image_table() -> None:
    """`orch base` knows exactly the suites data/base_images.json lists as orch/debian-python, with their Python."""
    from orchestrator.stages.base_image import REPOSITORY, SUITES
    from orchestrator.vendor import find_base_image

    assert SUITES == {"bookworm": "3.11", "trixie": "3.13"}
    for suite, python in SUITES.items():
        row = find_base_image(f"{REPOSITORY}:{suite}")
        assert row is not None and row.python_versions[0] == python
        assert BaseRecipe(suite=suite).python == python
