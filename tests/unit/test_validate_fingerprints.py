"""`orch validate` checks every fingerprint the dossier declares, before any build, and says both hashes in full."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli.main import main
from orchestrator.dossier.load import file_sha256, load_dossier
from tests.paths import EXAMPLES


def _flip_last(digest: str) -> str:
    """Another hash that shares 63 characters: a cut to 16 would show the two as equal."""
    return digest[:-1] + ("0" if digest[-1] != "0" else "1")


def _example(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(EXAMPLES / name, target)
    return target / "dossier.yaml"


def _validate(dossier: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(["validate", str(dossier), *args])
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


@pytest.mark.parametrize(
    ("example", "relative", "field"),
    [
        ("tiny-embeddings", "sample/sample.jsonl", "expect.inputs[0].sha256"),
        ("same-categories", "weights/classifier.pt", "weights[0].sha256"),
        ("resume-training", "weights/checkpoint.pt", "weights[0].sha256"),
        ("minilm-embeddings", "reference/embeddings.npy", "expect.outputs[0].compare.sha256"),
    ],
)
def test_a_wrong_fingerprint_fails_validate_with_both_hashes_in_full(
    example: str, relative: str, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dossier = _example(tmp_path, example)
    actual = file_sha256(dossier.parent / relative)
    wrong = _flip_last(actual)
    text = dossier.read_text()
    assert text.count(actual) >= 1, "fixture drift: the example declares this file's hash"
    dossier.write_text(text.replace(actual, wrong, 1))
    code, out, err = _validate(dossier, capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    # One error line, then one hint line: what to do whether the change was intended or not.
    assert len(lines) == 2 and "Traceback" not in err, err
    assert lines[1].strip().startswith("hint: If the file changed on purpose, write the new sha256"), lines[1]
    line = lines[0]
    assert f"[{field}]" in line and relative in line, line
    assert wrong in line and actual in line, "both hashes, in full"
    assert "differ from character 64" in line, line
    number = next(n for n, t in enumerate(dossier.read_text().splitlines(), start=1) if wrong in t)
    assert re.search(rf":{number} \[", line), f"the line that declares it ({number}): {line}"


def test_a_wrong_variant_reference_fingerprint_is_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dossier = _example(tmp_path, "minilm-embeddings").with_name("dossier-cuda.yaml")
    actual = file_sha256(dossier.parent / "reference" / "embeddings.npy")
    text = dossier.read_text()
    last = text.rindex(f"sha256: {actual}")  # the cpu variant's own comparison
    wrong = _flip_last(actual)
    dossier.write_text(text[:last] + f"sha256: {wrong}" + text[last + len(f"sha256: {actual}") :])
    code, _, err = _validate(dossier, capsys)
    assert code == 2 and "[variants[0].compare.embeddings.sha256]" in err and wrong in err and actual in err, err


def test_matching_fingerprints_are_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dossier = _example(tmp_path, "same-categories")
    code, out, _ = _validate(dossier, capsys, "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["fingerprints_checked"] == 2 and summary["fingerprints_remote"] == []


def test_loading_without_the_check_still_works_for_build_and_probe(tmp_path: Path) -> None:
    """Only validate stops at a mismatch: probe reports it as a failed sample check (see test_probe)."""
    dossier = _example(tmp_path, "tiny-embeddings")
    actual = file_sha256(dossier.parent / "sample" / "sample.jsonl")
    dossier.write_text(dossier.read_text().replace(actual, _flip_last(actual)))
    assert load_dossier(dossier).files["sample/sample.jsonl"] == actual


def test_a_large_hash_shows_a_byte_bar_and_a_small_one_none() -> None:
    from orchestrator.cli.progress import hash_progress

    shown = io.StringIO()
    console = Console(file=shown, force_terminal=True, width=100)
    with hash_progress(console, "hashing weights", threshold=1000) as bar:
        bar.total(4000)
        for _ in range(4):
            bar.advance(1000)
            bar.progress.refresh() if bar.progress else None
    assert "hashing weights" in shown.getvalue()
    quiet = io.StringIO()
    with hash_progress(Console(file=quiet, force_terminal=True), "hashing", threshold=1000) as bar:
        bar.total(999)
        bar.advance(999)
    assert quiet.getvalue() == ""


def test_validate_drives_the_bar_with_every_byte_it_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import progress

    seen: dict[str, int] = {"total": 0, "advanced": 0}
    real_total, real_advance = progress.HashProgress.total, progress.HashProgress.advance

    def total(self: progress.HashProgress, size: int) -> None:
        seen["total"] = size
        real_total(self, size)

    def advance(self: progress.HashProgress, size: int) -> None:
        seen["advanced"] += size
        real_advance(self, size)

    monkeypatch.setattr(progress.HashProgress, "total", total)
    monkeypatch.setattr(progress.HashProgress, "advance", advance)
    dossier = _example(tmp_path, "same-categories")
    code, _, _ = _validate(dossier, capsys)
    assert code == 0
    assert seen["total"] > 0 and seen["advanced"] == seen["total"], seen


# --- the same mismatch at `orch probe` time: the sample stage's check and report facts


def test_the_sample_stage_reports_both_hashes_in_full(tmp_path: Path) -> None:
    from orchestrator.plan.run import GpuMapping, make_run_plan
    from orchestrator.stages.sample_stage import sample_stage, verify_fingerprints

    dossier = _example(tmp_path, "same-categories")
    loaded = load_dossier(dossier)
    weights = dossier.parent / "weights" / "classifier.pt"
    declared = file_sha256(weights)
    weights.write_bytes(weights.read_bytes() + b"\0")  # changed after load: probe hashes again
    observed = file_sha256(weights)
    check = next(c for c in verify_fingerprints(loaded) if c.name == "weights classifier fingerprint")
    assert not check.passed
    assert check.expected == f"sha256 {declared}" and check.observed == f"sha256 {observed}"
    assert check.detail is not None and "differ from character" in check.detail
    plan = make_run_plan(loaded, "sha256:unused", GpuMapping(), tmp_path / "out")
    stage = sample_stage(None, loaded, plan)  # type: ignore[arg-type]  # stops before the engine
    assert stage.status == "failed"
    facts = stage.facts.recorded()["fingerprints"]["weights classifier fingerprint"]
    assert facts == {"expected": declared, "observed": observed}
    error = stage.first_error
    assert error is not None and declared in error.message and observed in error.message
    report_json = stage.model_dump_json()
    assert declared in report_json and observed in report_json


def test_a_reference_output_fingerprint_failure_shows_both_hashes(tmp_path: Path) -> None:
    from orchestrator.checks.sample import output_checks

    dossier = _example(tmp_path, "minilm-embeddings")
    loaded = load_dossier(dossier)
    reference = dossier.parent / "reference" / "embeddings.npy"
    declared = file_sha256(reference)
    output = tmp_path / "sample-output"
    output.mkdir()
    shutil.copy(reference, output / "embeddings.npy")
    shutil.copy(dossier.parent / "sample" / "ids.json", output / "ids.json")
    reference.write_bytes(reference.read_bytes()[:-4] + b"\0\0\0\0")  # the reference changed after load
    observed = file_sha256(reference)
    spec = loaded.model.expect.outputs[0]
    checks, _, _ = output_checks(loaded, spec, output)
    check = next(c for c in checks if c.name.endswith("reference fingerprint"))
    assert check.expected == f"sha256 {declared}" and check.observed == f"sha256 {observed}"
    assert check.detail is not None and "differ from character" in check.detail
