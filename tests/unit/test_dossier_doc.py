"""docs/dossier.md documents what orch really does: every mount of the sample, the vendor tables as the data
files hold them, and the determinism knobs."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from orchestrator import vendor
from orchestrator.dossier.doc_sections import SAMPLE_MOUNTS
from orchestrator.dossier.load import load_dossier
from orchestrator.dossier.models import Artifact
from orchestrator.plan.run import sample_mounts
from tests.paths import EXAMPLES

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "dossier.md").read_text()


def _pattern(target: str) -> re.Pattern[str]:
    return re.compile(
        "^" + re.escape(target).replace(re.escape("<path>"), ".+").replace(re.escape("<name>"), "[^/]+") + "$"
    )


def test_every_mount_the_sample_gets_is_documented_and_every_documented_one_is_made(tmp_path: Path) -> None:
    loaded = load_dossier(EXAMPLES / "same-categories" / "dossier.yaml")
    assert loaded.model.expect.inputs and loaded.model.weights
    weights = loaded.model.weights[0]
    data = Artifact(name="corpus", path=weights.path, sha256=weights.sha256, provenance="a test's data item")
    with_data = dataclasses.replace(loaded, model=loaded.model.model_copy(update={"data": [data]}))
    targets = [mount.target for mount in sample_mounts(with_data, tmp_path / "o", tmp_path / "m", tmp_path / "s")]
    patterns = {target: _pattern(target) for target, _, _ in SAMPLE_MOUNTS}
    for target in targets:
        assert any(p.match(target) for p in patterns.values()), f"{target} is mounted but not documented"
    for documented, pattern in patterns.items():
        assert any(pattern.match(t) for t in targets), f"{documented} is documented but never mounted"
        assert f"| `{documented}` |" in DOC, f"docs/dossier.md does not list {documented}"
    assert "/orch/weights/classifier" in targets


def test_the_vendor_tables_in_the_doc_are_the_data_files() -> None:
    for release in vendor.torch_releases().values():
        row = next((line for line in DOC.splitlines() if line.startswith(f"| {release.series} |")), None)
        assert row is not None, f"torch {release.series} is missing from docs/dossier.md"
        for version in (*release.cuda, *release.rocm):
            assert version in row
        if release.pypi_cuda:
            assert f"CUDA {release.pypi_cuda}" in row
    for image in vendor.base_images():
        row = next(line for line in DOC.splitlines() if line.startswith(f"| `{image.ref}` |"))
        assert all(python in row for python in image.python_versions)


def test_the_doc_names_the_cpu_knobs() -> None:
    for knob in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        assert knob in DOC
    assert "aten_cpu_capability: avx2" in DOC
