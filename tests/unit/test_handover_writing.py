"""What `orch handover` writes: a procedure that works when followed literally, sparse files kept sparse."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import pytest

from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.engine import EngineSettings, ImageInfo
from orchestrator.model.host import HostFacts
from orchestrator.model.report import StageResult
from orchestrator.stages.execute import run_probe
from orchestrator.stages.handover import _copy_dossier, _procedure_md, procedure_blocks
from orchestrator.stages.probe import ProbeOptions
from tests.paths import EXAMPLES

IMAGE_ID = "sha256:" + "ab" * 32


def _with_weights_and_data(tmp_path: Path, *, data_file: str = "data/table.bin", data: bytes = b"rows\n") -> Path:
    """A private tiny-embeddings that also declares a weights file and a data file."""
    root = tmp_path / "tiny"
    shutil.copytree(EXAMPLES / "tiny-embeddings", root)
    (root / "weights").mkdir()
    (root / "weights" / "tiny model.bin").write_bytes(b"weights\n")
    (root / data_file).parent.mkdir(parents=True, exist_ok=True)
    (root / data_file).write_bytes(data)
    extra = (
        "data:\n"
        f"  - name: table\n    path: {data_file}\n    sha256: {hashlib.sha256(b'rows').hexdigest()}\n"
        "    provenance: made by the test\n"
        "weights:\n"
        f"  - name: tiny\n    path: weights/tiny model.bin\n    sha256: {hashlib.sha256(b'w').hexdigest()}\n"
        "    provenance: made by the test\n"
    )
    dossier = root / "dossier.yaml"
    dossier.write_text(dossier.read_text().replace("expect:\n", extra + "\nexpect:\n", 1))
    return dossier


@pytest.fixture
def loaded(tmp_path: Path) -> LoadedDossier:
    return load_dossier(_with_weights_and_data(tmp_path))


def test_procedure_is_fenced_shell_blocks_that_mount_every_input_data_and_weight(loaded: LoadedDossier) -> None:
    text = _procedure_md(loaded, "dossier.yaml", IMAGE_ID, "orch/tiny-embeddings:abc")
    script = "\n".join(procedure_blocks(text))
    assert "docker load -i image.tar.gz" in script and "orch verify ." in script
    assert "'dossier/weights/tiny model.bin:/orch/weights/tiny:ro'" in script, script
    assert "dossier/data/table.bin:/orch/data/table:ro" in script
    assert "dossier/sample/sample.jsonl:/orch/input/sample/sample.jsonl:ro" in script
    assert f"{IMAGE_ID} python embed.py" in script


def test_procedure_writes_nothing_inside_the_handover_folder(loaded: LoadedDossier) -> None:
    script = "\n".join(procedure_blocks(_procedure_md(loaded, "dossier.yaml", IMAGE_ID, "orch/t:abc")))
    outputs = re.findall(r"--out (\S+)", script) + re.findall(r'-v "?([^ ]+):/orch/(?:output|meta)', script)
    assert outputs, script
    for target in outputs:
        assert target.startswith(('"$WORK/', '"$WORK"/', "$WORK/")), f"{target} is written inside the folder"
    assert re.search(r"mkdir -p \"\$WORK/out\"", script) and "mkdir -p out" not in script


def test_procedure_blocks_are_read_only_from_sh_fences() -> None:
    text = "intro\n```sh\necho one\n```\n\n    indented is not run\n```text\nnot run\n```\n```sh\necho two\n```\n"
    assert procedure_blocks(text) == ["echo one", "echo two"]


def test_a_sparse_input_stays_sparse_in_the_handover(tmp_path: Path) -> None:
    size = 256 << 20
    dossier = _with_weights_and_data(tmp_path, data_file="data/sparse.bin")
    sparse = dossier.parent / "data" / "sparse.bin"
    with sparse.open("r+b") as handle:
        handle.truncate(size)
        handle.seek(size // 2)
        handle.write(b"x" * 4096)
    if sparse.stat().st_blocks * 512 > 8 << 20:
        pytest.skip("this file system does not keep holes")
    _copy_dossier(load_dossier(dossier), tmp_path / "out")
    copy = tmp_path / "out" / "data" / "sparse.bin"
    assert copy.stat().st_size == size
    assert copy.stat().st_blocks * 512 < 8 << 20, f"{copy.stat().st_blocks * 512} bytes on disk for 4 KiB of data"
    with sparse.open("rb") as a, copy.open("rb") as b:
        assert hashlib.sha256(a.read()).digest() == hashlib.sha256(b.read()).digest()
    assert os.stat(copy).st_mode == os.stat(sparse).st_mode


class _NoContainers:
    """An engine that knows one image and refuses to start anything."""

    def image(self, ref: str, *, layers: bool = False) -> ImageInfo | None:
        return ImageInfo(id=IMAGE_ID, tags=(), labels={}, env={}, repo_digests=(), size=1)

    settings = EngineSettings()

    def info(self) -> object:
        raise AssertionError("the host stage ran after a failed image stage")

    def run(self, spec: object) -> object:
        raise AssertionError("a container started after a failed image stage")


def test_a_failed_image_stage_stops_the_later_stages_when_asked(
    loaded: LoadedDossier, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = StageResult(name="image", status="failed")
    monkeypatch.setattr("orchestrator.stages.probe.image_stage", lambda *args, **kwargs: (failed, None))
    report = run_probe(
        loaded,
        _NoContainers(),  # type: ignore[arg-type]
        ProbeOptions(out=tmp_path / "out", image=IMAGE_ID, stop_after_failure=True),
        # The host is observed before the first step (read-only); no stage after the image's runs.
        host_facts=lambda: HostFacts(kernel="k", nvidia=None, amd=None, docker=None),
    )
    assert report.verdict == "failed"
    assert [report.stage(n).status for n in ("image", "host", "device", "sample")] == [
        "failed",
        "not_run",
        "not_run",
        "not_run",
    ]
    assert report.stage("sample").reason == "image stage failed: the stages after it are not run"
