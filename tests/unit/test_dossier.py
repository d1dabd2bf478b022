from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.dossier.load import apply_variant, load_dossier
from orchestrator.dossier.models import Dossier
from orchestrator.errors import DossierError
from tests.paths import EXAMPLES

EXAMPLE_DOSSIERS = sorted(EXAMPLES.glob("*/dossier*.yaml"))


@pytest.mark.parametrize("path", EXAMPLE_DOSSIERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_example_dossier_is_valid(path: Path) -> None:
    loaded = load_dossier(path)
    assert loaded.model.name
    assert len(loaded.identity) == 64
    assert loaded.files, "an example references its lock, code and sample"


def test_identity_survives_a_move_and_changes_with_any_referenced_byte(tiny_example: Path, tmp_path: Path) -> None:
    original = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml").identity
    moved = load_dossier(tiny_example / "dossier.yaml").identity
    assert moved == original

    sample = tiny_example / "sample" / "ids.json"
    sample.write_bytes(sample.read_bytes().replace(b"s12", b"s13"))
    assert load_dossier(tiny_example / "dossier.yaml").identity != original


def test_identity_changes_with_code_and_with_defaults_spelled_out(tiny_example: Path) -> None:
    base = load_dossier(tiny_example / "dossier.yaml").identity
    # Spelling out a default does not change what the dossier means, so not its identity either.
    text = (tiny_example / "dossier.yaml").read_text()
    (tiny_example / "dossier.yaml").write_text(
        text.replace("  seed: 0\n", "  seed: 0\n  cublas_workspace_config: ':4096:8'\n")
    )
    assert load_dossier(tiny_example / "dossier.yaml").identity == base
    (tiny_example / "app" / "embed.py").write_text((tiny_example / "app" / "embed.py").read_text() + "\n# edit\n")
    assert load_dossier(tiny_example / "dossier.yaml").identity != base


def test_cache_folders_do_not_count_towards_identity(tiny_example: Path) -> None:
    base = load_dossier(tiny_example / "dossier.yaml").identity
    cache = tiny_example / "app" / "__pycache__"
    cache.mkdir()
    (cache / "embed.cpython-311.pyc").write_bytes(b"\0junk")
    assert load_dossier(tiny_example / "dossier.yaml").identity == base


def test_variant_replaces_system_python_and_is_part_of_identity() -> None:
    path = EXAMPLES / "tiny-embeddings" / "dossier-cuda.yaml"
    reference = load_dossier(path)
    cpu = load_dossier(path, variant="cpu")
    assert reference.model.system.platform == "cuda"
    assert cpu.model.system.platform == "cpu"
    assert cpu.model.python.install == "wheelhouse"
    lock_torch = cpu.lock.get("torch")
    assert lock_torch is not None and str(lock_torch.version) == "2.13.0+cpu"
    assert cpu.base_image.ref == "orch/debian-python:bookworm"
    assert cpu.identity != reference.identity
    assert cpu.reference_model == reference.model


def test_apply_variant_overrides_comparisons_by_output_name() -> None:
    model = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml").model
    data = model.model_dump()
    data["variants"] = [
        {
            "name": "loose",
            "description": "looser tolerance",
            "compare": {
                "embeddings": {
                    "metric": "max_abs",
                    "max": 0.01,
                    "reference": "reference/embeddings.npy",
                    "justification": "different hardware sums in another order",
                }
            },
        }
    ]
    effective = apply_variant(Dossier.model_validate(data), "loose")
    comparison = effective.expect.outputs[0].compare
    assert comparison is not None and comparison.metric == "max_abs"
    with pytest.raises(DossierError, match="'missing' is not declared"):
        apply_variant(Dossier.model_validate(data), "missing")


def test_a_bad_variant_is_caught_at_validation(tiny_example: Path) -> None:
    shutil.copy(EXAMPLES / "tiny-embeddings" / "dossier-cuda.yaml", tiny_example / "dossier-cuda.yaml")
    path = tiny_example / "dossier-cuda.yaml"
    path.write_text(path.read_text().replace("      platform: cpu\n", "      platform: rocm\n      version: '6.2'\n"))
    with pytest.raises(DossierError) as caught:
        load_dossier(path)
    assert caught.value.field is not None and caught.value.field.startswith("variants[0].")
    assert "rocm" in caught.value.message
