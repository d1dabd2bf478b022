"""The dossier's folder is untrusted, on the real engine: a code symlink to a host file is refused before
any image exists; a symlink that stays inside is built as the file it names.

The "host secret" is a file this test makes outside the dossier's folder, holding a canary string.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import Engine, RunSpec
from orchestrator.errors import DossierError
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.execute import run_build
from tests.integration.helpers import orch

CANARY = "ORCH-CANARY-c0d3-host-secret-" + uuid.uuid4().hex[:8]


class BuildSpy:
    """The real engine, with every image build it is asked for counted."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.builds = 0

    def build(self, *args: Any, **kwargs: Any) -> Any:
        self.builds += 1
        return self._engine.build(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def _renamed(root: Path) -> tuple[Path, str]:
    """The example under a name of its own, so images made from it can be found by label."""
    name = f"tiny-untrusted-{uuid.uuid4().hex[:8]}"
    path = root / "dossier.yaml"
    path.write_text(path.read_text().replace("name: tiny-embeddings", f"name: {name}"))
    return path, name


def _images_named(name: str) -> list[str]:
    client = docker.from_env()
    try:
        return [str(image.id) for image in client.images.list(filters={"label": f"io.orch.dossier.name={name}"})]
    finally:
        client.close()


def _no_canary_under(folder: Path) -> None:
    for base, _, files in os.walk(folder):
        for name in files:
            path = Path(base) / name
            if not path.is_symlink():
                assert CANARY.encode() not in path.read_bytes(), f"the host secret leaked into {path}"


def test_a_code_link_to_a_host_file_is_refused_before_any_image(
    engine: Engine, base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "host" / "shadow"
    secret.parent.mkdir()
    secret.write_text(f"root:{CANARY}:19000::::::\n")
    dossier, name = _renamed(tiny_example)
    (tiny_example / "app" / "leak.txt").symlink_to(secret)

    result = orch("build", str(dossier), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert "app/leak.txt" in result.stderr and str(secret) in result.stderr
    assert "Traceback" not in result.stderr and CANARY not in result.stdout + result.stderr
    assert _images_named(name) == [], "no image was made"

    # Planted after the dossier was loaded: the build checks again, before the engine builds anything.
    (tiny_example / "app" / "leak.txt").unlink()
    loaded = load_dossier(dossier)
    (tiny_example / "app" / "leak.txt").symlink_to(secret)
    spy = BuildSpy(engine)
    with pytest.raises(DossierError, match="outside the dossier's folder"):
        run_build(loaded, spy, BuildOptions(out=tmp_path / "again"))  # type: ignore[arg-type]
    assert spy.builds == 0 and _images_named(name) == []
    _no_canary_under(tmp_path / "out")
    _no_canary_under(tmp_path / "again")


def test_a_code_link_inside_the_folder_is_built_as_its_file(
    engine: Engine, base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    dossier, _ = _renamed(tiny_example)
    (tiny_example / "app" / "alias.py").symlink_to("embed.py")
    loaded = load_dossier(dossier)
    assert loaded.links == {"app/alias.py": "app/embed.py"}
    record = run_build(loaded, engine, BuildOptions(out=tmp_path / "out"))
    assert record.status == "passed", record.failure
    assert record.image is not None
    shown = engine.run(
        RunSpec(
            image=record.image.id,
            command=[
                "sh",
                "-c",
                "test -L alias.py && echo LINK; test -f alias.py && cmp alias.py embed.py && echo SAME",
            ],
            timeout_s=60,
        )
    )
    assert "SAME" in shown.stdout and "LINK" not in shown.stdout, shown.stdout + shown.stderr
