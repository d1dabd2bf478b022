"""A weights or data folder is one dossier item (issue 24): its sha256 is the tree hash of its regular files,
it is checked by `orch validate` like a file, and the sample's container sees it mounted as a folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.dossier.paths import Where, path_sha256
from orchestrator.errors import DossierError
from orchestrator.plan.run import GpuMapping, make_run_plan


def _with_model_folder(tiny_example: Path) -> tuple[Path, str]:
    model = tiny_example / "weights" / "model"
    (model / "tokenizer").mkdir(parents=True)
    (model / "config.json").write_text('{"dim": 16}')
    (model / "tokenizer" / "vocab.txt").write_text("a\nb\n")
    digest = path_sha256(tiny_example, "weights/model", Where("test"))
    dossier = tiny_example / "dossier.yaml"
    weights = f"weights:\n  - name: model\n    path: weights/model\n    sha256: {digest}\n    provenance: a test\n"
    dossier.write_text(dossier.read_text().replace("python:\n", weights + "python:\n", 1))
    return dossier, digest


def test_a_model_folder_is_one_item_fingerprinted_as_a_tree_and_mounted_as_a_folder(tiny_example: Path) -> None:
    dossier, digest = _with_model_folder(tiny_example)
    loaded = load_dossier(dossier, check_fingerprints=True)
    assert loaded.files["weights/model"] == digest == loaded.fingerprint("weights/model")
    plan = make_run_plan(loaded, "sha256:" + "4" * 64, GpuMapping(), tiny_example / "out")
    mounts = {mount.target: mount.source for mount in plan.sample.mounts}
    assert mounts["/orch/weights/model"] == (tiny_example / "weights" / "model").resolve()
    assert mounts["/orch/weights/model"].is_dir()


def test_a_changed_file_inside_the_folder_fails_its_fingerprint(tiny_example: Path) -> None:
    dossier, digest = _with_model_folder(tiny_example)
    (tiny_example / "weights" / "model" / "tokenizer" / "vocab.txt").write_text("a\nc\n")
    with pytest.raises(DossierError) as caught:
        load_dossier(dossier, check_fingerprints=True)
    assert "[weights[0].sha256]" in str(caught.value) and digest in str(caught.value)
    assert caught.value.hint is not None and "changed on purpose" in caught.value.hint


def test_the_tree_hash_names_files_by_their_place_so_a_renamed_file_changes_it(tiny_example: Path) -> None:
    _with_model_folder(tiny_example)
    before = path_sha256(tiny_example, "weights/model", Where("test"))
    (tiny_example / "weights" / "model" / "config.json").rename(tiny_example / "weights" / "model" / "conf.json")
    assert path_sha256(tiny_example, "weights/model", Where("test")) != before
