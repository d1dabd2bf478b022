"""What a container writes is untrusted: never followed, regular files only, size-bounded, parsed safely.

The output folder here stands for `sample-output/` after the sample ran; the links, FIFOs and huge
files are what a compromised package in the image could leave there. Every case must end as a failed
check naming the file (or an `UnsafeOutput` from the reader), never a crash, never a host file read.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import struct
import threading
import tracemalloc
from pathlib import Path

import pytest

from orchestrator.checks.arrays import read_npy
from orchestrator.checks.sample import compare, read_output, sample_checks, where
from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.dossier.models import CosineComparison, LimitsSpec, MaxAbsComparison
from orchestrator.engine import ImageInfo, RunOutcome, RunSpec, describe_exit
from orchestrator.model.checks import Check
from orchestrator.model.host import CompatVerdict
from orchestrator.plan.run import GpuMapping, make_run_plan
from orchestrator.stages.device_stage import device_stage
from orchestrator.stages.inventory import run_inventory
from orchestrator.stages.sample_stage import sample_stage
from orchestrator.untrusted import (
    CappedStream,
    OutputMissing,
    UnsafeOutput,
    last_line,
    open_output,
    read_output_bytes,
    read_output_json,
)
from tests.paths import EXAMPLES

TINY = EXAMPLES / "tiny-embeddings"
CANARY = "host-canary-7f3a9c: this host file must never reach a report"
WHY = "stated before comparing, for the test"


@pytest.fixture
def out(tmp_path: Path) -> Path:
    folder = tmp_path / "sample-output"
    folder.mkdir()
    return folder


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A host file outside the output folder, standing for /etc/shadow or the dossier's reference."""
    path = tmp_path / "host" / "secret.json"
    path.parent.mkdir()
    path.write_text(json.dumps([CANARY]))
    return path


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()


def _sparse_npy(path: Path, shape: tuple[int, ...]) -> Path:
    """A float32 .npy of zeros whose data is a hole: large on paper, nothing on disk."""
    header = _npy_header(shape)
    with path.open("wb") as handle:
        handle.write(header)
        handle.truncate(len(header) + 4 * shape[0] * shape[1])
    return path


def _texts(checks: list[Check]) -> str:
    return json.dumps([c.model_dump() for c in checks])


# -- the reader ----------------------------------------------------------------------------------------


def test_a_symlinked_file_is_refused_naming_it(out: Path, canary: Path) -> None:
    (out / "ids.json").symlink_to(canary)
    with pytest.raises(UnsafeOutput, match=r"sample-output/ids\.json is a symbolic link") as refused:
        read_output_json(out, "ids.json", 1 << 20)
    assert CANARY not in str(refused.value)


def test_a_symlink_in_a_parent_folder_is_refused_naming_it(out: Path, canary: Path) -> None:
    (out / "sub").symlink_to(canary.parent)
    with pytest.raises(UnsafeOutput, match=r"sample-output/sub is a symbolic link"):
        read_output_bytes(out, "sub/secret.json", 1 << 20)


def test_a_fifo_is_refused_without_blocking(out: Path) -> None:
    os.mkfifo(out / "embeddings.npy")
    result: list[BaseException] = []

    def read() -> None:
        try:
            read_output_bytes(out, "embeddings.npy", 100)
        except UnsafeOutput as exc:
            result.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=5)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert "sample-output/embeddings.npy is a FIFO, not a regular file" in str(result[0])


def test_a_folder_is_refused(out: Path) -> None:
    (out / "embeddings.npy").mkdir()
    with pytest.raises(UnsafeOutput, match="is a folder, not a regular file"):
        read_output_bytes(out, "embeddings.npy", 100)


def test_missing_and_oversize(out: Path) -> None:
    with pytest.raises(OutputMissing):
        read_output_bytes(out, "nothing.json", 100)
    (out / "big.json").write_bytes(b"[" + b"1," * 100 + b"1]")
    with pytest.raises(UnsafeOutput, match=r"big\.json is 203 bytes, over the limit of 100 bytes \(hint\)"):
        read_output_bytes(out, "big.json", 100, limit_hint=" (hint)")
    assert read_output_bytes(out, "big.json", 203).startswith(b"[1,")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\xff\xfe[1]", "is not UTF-8 text"),
        (b"[1, 2", "is not valid JSON"),
        (b"not json at all", "is not valid JSON"),
        (b"[" + b"9" * 5000 + b"]", "is not valid JSON: Exceeds the limit"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
    ids=["non-utf8", "truncated", "text", "5000-digit-integer", "deep-nesting"],
)
def test_malformed_json_is_one_named_refusal(out: Path, content: bytes, reason: str) -> None:
    (out / "ids.json").write_bytes(content)
    with pytest.raises(UnsafeOutput, match=reason) as refused:
        read_output_json(out, "ids.json", 1 << 20)
    assert str(refused.value).startswith("sample-output/ids.json ")


def test_a_path_that_leaves_the_folder_is_refused(out: Path) -> None:
    for path in ("../x.json", "/etc/passwd", "a//b", "./x"):
        with pytest.raises(UnsafeOutput, match="not a plain relative path"):
            open_output(out, path, 100)


# -- sample checks on such folders ---------------------------------------------------------------------


def _tiny_outputs(folder: Path) -> None:
    shutil.copyfile(TINY / "reference" / "embeddings.npy", folder / "embeddings.npy")
    shutil.copyfile(TINY / "sample" / "ids.json", folder / "ids.json")


def test_the_reference_outputs_pass(out: Path) -> None:
    _tiny_outputs(out)
    assert all(c.passed for c in sample_checks(load_dossier(TINY / "dossier.yaml"), out))


def test_an_output_symlinked_to_the_reference_fails(out: Path) -> None:
    _tiny_outputs(out)
    (out / "embeddings.npy").unlink()
    (out / "embeddings.npy").symlink_to(TINY / "reference" / "embeddings.npy")
    checks = sample_checks(load_dossier(TINY / "dossier.yaml"), out)
    failed = [c for c in checks if not c.passed]
    assert failed[0].name == "embeddings: readable"
    assert "sample-output/embeddings.npy is a symbolic link" in failed[0].observed
    assert not any("cosine" in c.name and c.passed for c in checks), "no comparison on data the sample never wrote"


def test_ids_linked_to_a_host_file_fail_and_leak_nothing(out: Path, canary: Path) -> None:
    _tiny_outputs(out)
    (out / "ids.json").unlink()
    (out / "ids.json").symlink_to(canary)
    checks = sample_checks(load_dossier(TINY / "dossier.yaml"), out)
    ids = next(c for c in checks if c.name == "embeddings: identifiers")
    assert not ids.passed and "sample-output/ids.json is a symbolic link" in ids.observed
    assert CANARY not in _texts(checks)


@pytest.mark.parametrize("content", [b"this is not JSON", b"\xff\xff", b'{"a": 1}'], ids=["text", "binary", "object"])
def test_a_malformed_ids_file_is_a_failed_check_not_a_crash(out: Path, content: bytes) -> None:
    _tiny_outputs(out)
    (out / "ids.json").write_bytes(content)
    checks = {c.name: c for c in sample_checks(load_dossier(TINY / "dossier.yaml"), out)}
    ids = checks["embeddings: identifiers"]
    assert not ids.passed and ids.observed.startswith("refused: sample-output/ids.json ")


def _with_limits(loaded: LoadedDossier, **limits: int) -> LoadedDossier:
    expect = loaded.model.expect.model_copy(update={"limits": LimitsSpec(**limits)})
    return dataclasses.replace(loaded, model=loaded.model.model_copy(update={"expect": expect}))


def test_an_output_over_its_limit_is_a_failed_check(out: Path) -> None:
    _tiny_outputs(out)
    _sparse_npy(out / "embeddings.npy", (1 << 18, 16))  # 16 MiB on paper
    loaded = _with_limits(load_dossier(TINY / "dossier.yaml"), output_mib=1)
    checks = sample_checks(loaded, out)
    assert checks[0].name == "embeddings: readable" and not checks[0].passed
    assert "over the limit of 1048576 bytes (expect.limits.output_mib in the dossier)" in checks[0].observed
    (out / "ids.json").write_bytes(b"[" + b'"x",' * 300_000 + b'"x"]')
    loaded = _with_limits(load_dossier(TINY / "dossier.yaml"), json_mib=1)
    ids = next(c for c in sample_checks(loaded, out) if c.name == "embeddings: identifiers")
    assert "expect.limits.json_mib" in ids.observed and not ids.passed


def test_a_bad_npy_header_is_a_failed_check(out: Path) -> None:
    _tiny_outputs(out)
    for header in (b"\x93NUMPY\x01\x00\xff\xff", _npy_header((-1, 16)), _npy_header((12, 16), descr="<c8")):
        (out / "embeddings.npy").write_bytes(header)
        check = sample_checks(load_dossier(TINY / "dossier.yaml"), out)[0]
        assert check.name == "embeddings: readable" and not check.passed
        assert check.observed.startswith("refused: sample-output/embeddings.npy is not a usable .npy file")


def test_checking_a_large_npy_keeps_python_memory_bounded(out: Path) -> None:
    """16 MiB of float32 (4M values): read whole, it took ~150 MiB of Python objects; streamed, a few MiB."""
    _sparse_npy(out / "embeddings.npy", (1 << 18, 16))
    output = load_dossier(TINY / "dossier.yaml").model.expect.outputs[0]
    tracemalloc.start()
    try:
        array, size = read_output(out, output, LimitsSpec())
        zeros = sum(1 for block in array.blocks() for value in block if value == 0.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        array.close()
    assert size == (1 << 22) * 4 + 128 and zeros == 1 << 22
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB"


# -- what the messages say ------------------------------------------------------------------------------


def test_max_abs_names_the_row_id_and_column_of_the_worst_difference(out: Path) -> None:
    from orchestrator.checks.arrays import from_json_value

    reference = from_json_value([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    observed = from_json_value([[0.0, 0.001, 0.0], [0.0, 0.0, -0.5]])
    rule = MaxAbsComparison(metric="max_abs", max=0.01, reference="r.npy", justification=WHY)
    failed = compare("e", observed, reference, rule, ["first", "second"])
    assert failed.observed == "max |Δ| = 0.5 at row 1 ('second'), column 2"
    assert failed.detail == "observed -0.5, reference 0.0"
    assert where(23, (2, 3, 4)) == "row 1, index (2, 3)" and where(4, (9,), ["a"] * 9) == "index 4 ('a')"


def test_cosine_shows_the_digits_that_differ_from_the_threshold() -> None:
    from orchestrator.checks.arrays import from_json_value

    row = [0.6, 0.8]
    turned = [0.6 + 1e-6, 0.8 - 0.75e-6]  # cosine 1 - 7.8e-13: printed as "1" before
    rule = CosineComparison(metric="cosine", min=1.0, reference="r.npy", justification=WHY)
    failed = compare("e", from_json_value([turned]), from_json_value([row]), rule)
    assert not failed.passed and failed.expected == "cosine ≥ 1 for every row"
    number = failed.observed.removeprefix("min cosine = ").split(" ")[0]
    assert number.startswith("0.999999999999") and float(number) < 1.0, failed.observed
    assert re.search(r"\(1 - \d\.\de-13\) \(row 0\)$", failed.observed), failed.observed
    assert compare("e", from_json_value([row]), from_json_value([row]), rule).observed == "min cosine = 1 (row 0)"


# -- streams and exits ---------------------------------------------------------------------------------


def test_a_capped_stream_keeps_head_and_tail_and_counts_the_cut() -> None:
    kept = CappedStream(1000, head=100)
    kept.feed(b"START\n")
    for _ in range(10_000):
        kept.feed(b"x" * 100)
    kept.feed(b'\n{"last": "line"}\n')
    text = kept.text()
    assert kept.total == 6 + 1_000_000 + 18 and kept.cut == kept.total - 1000
    assert text.startswith("START\n") and text.endswith('{"last": "line"}\n')
    assert f"[orch: {kept.cut} bytes cut here; the container printed {kept.total} bytes, 1000 are kept]" in text
    assert len(text) < 1100
    assert last_line("a\n" + "y" * 10_000 + "\n\n", limit=50) == "y" * 49 + "…"


def test_an_oom_kill_names_the_memory_limit_and_how_to_raise_it() -> None:
    spec = RunSpec(image="x", command=["python"], mem_limit="4096m")
    killed = RunOutcome(exit_code=137, stdout="", stderr="", timed_out=False, duration_s=1, oom_killed=True)
    message = describe_exit(killed, spec, "raise expect.limits.memory_mib")
    assert message == (
        "the container was killed at its memory limit of 4096 MiB (exit 137, out of memory); "
        "raise expect.limits.memory_mib"
    )
    crashed = RunOutcome(exit_code=1, stdout="", stderr="boom\nValueError: x\n", timed_out=False, duration_s=1)
    assert describe_exit(crashed, spec, "unused") == "exited 1: ValueError: x"


def test_the_committed_reference_still_reads(tmp_path: Path) -> None:
    array = read_npy(TINY / "reference" / "embeddings.npy")
    try:
        assert array.shape == (12, 16) and len(array.row(11)) == 16
    finally:
        array.close()


# -- what probes print is untrusted too ----------------------------------------------------------------


class _Runs:
    """An engine whose only side effect is `run`, answering with a canned outcome (and recording specs)."""

    def __init__(self, outcome: RunOutcome) -> None:
        self.outcome = outcome
        self.specs: list[RunSpec] = []

    def run(self, spec: RunSpec) -> RunOutcome:
        self.specs.append(spec)
        return self.outcome


def _outcome(stdout: str = "", stderr: str = "", exit_code: int = 0, oom: bool = False) -> RunOutcome:
    return RunOutcome(
        exit_code=exit_code, stdout=stdout, stderr=stderr, timed_out=False, duration_s=0.1, oom_killed=oom
    )


IMAGE = ImageInfo(id="sha256:x", tags=(), labels={}, env={}, repo_digests=(), size=0)
VERDICT = CompatVerdict(status="not-applicable", explanation="CPU")


@pytest.mark.parametrize(
    "stdout",
    ['{"torch": "a string, not an object"}', '{"torch": {}, "accelerator": [1]}', "[" * 50_000, "9" * 5000],
    ids=["torch-str", "accelerator-list", "deep-nesting", "huge-int"],
)
def test_a_malformed_device_report_fails_the_stage_without_a_traceback(stdout: str) -> None:
    loaded = load_dossier(TINY / "dossier.yaml")
    result = device_stage(
        _Runs(_outcome(stdout)), loaded, make_run_plan(loaded, IMAGE.id, GpuMapping(), Path("out")), VERDICT
    )  # type: ignore[arg-type]
    assert result.status == "failed" and result.first_error is not None
    assert result.first_error.step == "device probe"


def test_an_oom_killed_device_probe_names_the_memory_limit() -> None:
    loaded = load_dossier(TINY / "dossier.yaml")
    engine = _Runs(_outcome(exit_code=137, oom=True))
    result = device_stage(engine, loaded, make_run_plan(loaded, IMAGE.id, GpuMapping(), Path("out")), VERDICT)  # type: ignore[arg-type]
    assert result.first_error is not None
    assert "killed at its memory limit of 4 GiB" in result.first_error.message
    assert engine.specs[0].mem_limit == "4g"


@pytest.mark.parametrize(
    "stdout",
    ['{"pip": ["not", "an", "object"]}', "[1, 2]", '{"python": {"version": 3}, "pip": {"freeze": 7}}', "{" * 10],
    ids=["pip-list", "not-object", "wrong-types", "not-json"],
)
def test_a_malformed_inventory_report_is_an_error_not_a_traceback(stdout: str) -> None:
    inventory, error = run_inventory(_Runs(_outcome(stdout)), "sha256:x")  # type: ignore[arg-type]
    assert inventory is None and error is not None and error.startswith("the inventory probe printed")


def test_an_oom_killed_sample_names_its_limit_and_the_dossier_field(tmp_path: Path) -> None:
    loaded = _with_limits(load_dossier(TINY / "dossier.yaml"), memory_mib=512)
    engine = _Runs(_outcome(exit_code=137, oom=True))
    result = sample_stage(engine, loaded, make_run_plan(loaded, IMAGE.id, GpuMapping(), tmp_path))  # type: ignore[arg-type]
    assert engine.specs[0].mem_limit == "512m"
    assert result.first_error is not None and result.first_error.message == (
        "the container was killed at its memory limit of 512 MiB (exit 137, out of memory); "
        "if the sample needs more, raise expect.limits.memory_mib in the dossier (now 512)"
    )


def test_a_linked_determinism_record_is_a_failed_check_and_leaks_nothing(tmp_path: Path, canary: Path) -> None:
    loaded = load_dossier(TINY / "dossier.yaml")

    class LinksMeta(_Runs):
        def run(self, spec: RunSpec) -> RunOutcome:
            (tmp_path / "sample-meta" / "determinism.json").symlink_to(canary)
            _tiny_outputs(tmp_path / "sample-output")
            return super().run(spec)

    result = sample_stage(LinksMeta(_outcome()), loaded, make_run_plan(loaded, IMAGE.id, GpuMapping(), tmp_path))  # type: ignore[arg-type]
    assert result.status == "failed" and result.first_error is not None
    assert result.first_error.step == "determinism record"
    assert "sample-meta/determinism.json is a symbolic link" in result.first_error.message
    assert CANARY not in result.model_dump_json()


def test_a_json_output_with_an_integer_beyond_64_bits_is_refused(out: Path) -> None:
    from orchestrator.checks.arrays import json_array

    with pytest.raises(UnsafeOutput, match="does not fit in 64 bits"):
        json_array(b"[1.5, " + b"9" * 30 + b"]", "json", "sample-output/labels.json")
