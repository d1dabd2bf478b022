"""Golden files for the hand-over's PROCEDURE.md and ACCESS.md, for every example dossier and variant.

Byte-for-byte, like the report's renderings: the text is rendered from templates
(templates/handover/), and a template change that alters one byte is a change to review.
`make golden` (pytest --update-golden) rewrites them; review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.stages.handover import _procedure_md
from orchestrator.stages.handover_access import access_md
from tests.paths import EXAMPLES, GOLDEN

HANDOVER_GOLDEN = GOLDEN / "handover"
IMAGE_ID = "sha256:" + "5f" * 32
DOSSIERS = sorted(EXAMPLES.glob("*/dossier*.yaml"))
CASES = [(path, None) for path in DOSSIERS] + [
    (path, variant.name) for path in DOSSIERS for variant in load_dossier(path).reference_model.variants
]
# A dossier that needs credentials (an index and a data set, by name), so ACCESS.md's table is pinned too.
WITH_ACCESS = """
  indexes:
    - url: https://download.pytorch.org/whl/cpu
      access: TORCH_INDEX_AUTH
"""
DATA_WITH_ACCESS = """
data:
  - name: corpus
    uri: s3://example-bucket/corpus|v2.jsonl
    sha256: 3fc49cc507b286d765673698d13a09e1602ae5bb833534a15344d1ba8104f101
    provenance: made by the reference team
    access: CORPUS_READ_TOKEN
"""


def _name(path: Path, variant: str | None) -> str:
    return f"{path.parent.name}--{path.stem}" + (f"+{variant}" if variant else "")


def _check(rendered: str, name: str, request: pytest.FixtureRequest) -> None:
    golden = HANDOVER_GOLDEN / name
    if request.config.getoption("--update-golden"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered, encoding="utf-8", newline="")
    assert golden.exists(), f"no golden file handover/{name}: run `make golden`"
    assert rendered.encode("utf-8") == golden.read_bytes(), f"handover/{name} differs: run `make golden` and review"


def _documents(loaded: LoadedDossier) -> tuple[str, str]:
    tag = f"orch/{loaded.model.name}:{loaded.short_identity}"
    return _procedure_md(loaded, loaded.path.name, IMAGE_ID, tag), access_md(loaded)


@pytest.mark.parametrize(("path", "variant"), CASES, ids=[_name(p, v) for p, v in CASES])
def test_handover_documents_match_golden(path: Path, variant: str | None, request: pytest.FixtureRequest) -> None:
    procedure, access = _documents(load_dossier(path, variant=variant))
    _check(procedure, f"{_name(path, variant)}.PROCEDURE.md", request)
    _check(access, f"{_name(path, variant)}.ACCESS.md", request)


def test_access_with_credentials_matches_golden(tiny_example: Path, request: pytest.FixtureRequest) -> None:
    dossier = tiny_example / "dossier.yaml"
    text = dossier.read_text(encoding="utf-8")
    text = text.replace("\n  indexes:\n    - url: https://download.pytorch.org/whl/cpu\n", WITH_ACCESS)
    dossier.write_text(text.replace("\nsystem:\n", DATA_WITH_ACCESS + "\nsystem:\n"), encoding="utf-8")
    procedure, access = _documents(load_dossier(dossier))
    assert "TORCH_INDEX_AUTH" in access and "CORPUS_READ_TOKEN" in access
    _check(access, "with-access.ACCESS.md", request)
    _check(procedure, "with-access.PROCEDURE.md", request)


def test_handover_golden_files_have_no_orphans() -> None:
    expected = {f"{_name(p, v)}.{doc}.md" for p, v in CASES for doc in ("PROCEDURE", "ACCESS")}
    expected |= {"with-access.ACCESS.md", "with-access.PROCEDURE.md"}
    present = {path.name for path in HANDOVER_GOLDEN.iterdir()} if HANDOVER_GOLDEN.exists() else set()
    assert present == expected, f"orphan or missing golden files: {present ^ expected}"
