"""The environment digest: the probe's hashing and its one normalisation, the host's validation of the
untrusted list, the diff `orch compare` and `orch verify` show, and the hand-over carrying it."""

from __future__ import annotations

import json
import os
import runpy
import shutil
import struct
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from orchestrator.cli.main import cli
from orchestrator.compare.read import load_side
from orchestrator.compare.verdict import compare_sides
from orchestrator.engine.fake import FakeEngine, ScriptedRun
from orchestrator.model.environment import (
    MAX_NAMED,
    EnvironmentListing,
    EnvironmentSummary,
    diff_environments,
    fold_digest,
)
from orchestrator.report.compare_markdown import render_compare_markdown
from orchestrator.stages.inventory import probe_inventory
from tests.compare_sample import ENVIRONMENT, Run, cpu_variant_of_cuda, cuda_reference, write_run
from tests.paths import REPO
from tests.probe_outputs import environment_section, inventory_output

PROBE = runpy.run_path(str(REPO / "probes" / "inventory.py"))
environment_probe: Callable[..., dict[str, Any]] = PROBE["environment_section"]
PYC_RULE = "source mtime in timestamp-based __pycache__/*.pyc"
UV_FILE, UV_LINES = "uv_cache.json in *.dist-info", "RECORD lines naming uv_cache.json"


def _pyc(flags: int, word: int, body: bytes) -> bytes:
    """A .pyc: magic, PEP 552 flags, then the source mtime (flags 0) or half the source hash, size, code."""
    return b"\xa7\r\r\n" + struct.pack("<III", flags, word, 1234) + body


def _tree(
    root: Path, *, mtime: int = 1_796_172_556, body: bytes = b"\xe3code", extra: bytes = b"", stray: bool = True
) -> Path:
    venv = root / "opt" / "venv"
    shutil.rmtree(venv, ignore_errors=True)  # the same paths again: a second install into the same place
    package = venv / "lib" / "python3.11" / "site-packages" / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_bytes(b"VALUE = 1\n" + extra)
    (package / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(_pyc(0, mtime, body))
    (package / "__pycache__" / "hashed.cpython-311.pyc").write_bytes(_pyc(1, 0xABCD, body))
    if stray:
        (package / "stray.pyc").write_bytes(_pyc(0, mtime, body))  # not in __pycache__: hashed whole
    (venv / "bin").mkdir()
    os.symlink("/usr/bin/python3.11", venv / "bin" / "python")
    os.symlink("lib", venv / "lib64")
    return venv


def _listing(root: Path, **tree: Any) -> dict[str, Any]:
    venv = _tree(root, **tree)
    return environment_probe([str(venv)])


# -- the probe: what is hashed, what is normalised ----------------------------------------------------


def test_the_probe_lists_every_file_and_link_and_folds_them_as_the_host_does(tmp_path: Path) -> None:
    listing = _listing(tmp_path)
    venv = str(tmp_path / "opt" / "venv")
    assert sorted(path.removeprefix(venv) for path in listing["files"]) == [
        "/bin/python",
        "/lib/python3.11/site-packages/pkg/__init__.py",
        "/lib/python3.11/site-packages/pkg/__pycache__/__init__.cpython-311.pyc",
        "/lib/python3.11/site-packages/pkg/__pycache__/hashed.cpython-311.pyc",
        "/lib/python3.11/site-packages/pkg/stray.pyc",
        "/lib64",
    ]
    assert listing["files"][venv + "/bin/python"].startswith("link:")
    assert listing["digest"] == fold_digest(listing["files"]) == PROBE["fold_digest"](listing["files"])
    assert listing["normalised"] == {PYC_RULE: 1, UV_FILE: 0, UV_LINES: 0}
    EnvironmentListing.model_validate(listing)  # the host accepts what the probe prints


def test_two_installs_that_differ_only_in_the_pyc_source_mtime_have_one_digest(tmp_path: Path) -> None:
    first = _listing(tmp_path, stray=False)
    later = _listing(tmp_path, stray=False, mtime=1_796_172_649)
    assert first["digest"] == later["digest"] and first["files"] == later["files"]
    assert _listing(tmp_path, stray=False, body=b"\xe3codf")["digest"] != first["digest"]


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ({"body": b"\xe3codf"}, ["__init__.cpython-311.pyc", "hashed.cpython-311.pyc", "stray.pyc"]),
        ({"extra": b"#"}, ["__init__.py"]),
    ],
    ids=["compiled code", "source"],
)
def test_one_byte_anywhere_else_changes_the_file_and_the_digest(
    tmp_path: Path, change: dict[str, bytes], differs: list[str]
) -> None:
    base = list(_listing(tmp_path / "a")["files"].items())
    other = list(_listing(tmp_path / "b", **change)["files"].items())
    changed = sorted(Path(a[0]).name for a, b in zip(base, other, strict=True) if a[1] != b[1])
    assert changed == sorted(differs)
    assert fold_digest(dict(base)) != fold_digest({a[0]: b[1] for a, b in zip(base, other, strict=True)})


def test_a_stray_pyc_and_a_hash_based_pyc_are_hashed_whole(tmp_path: Path) -> None:
    base = _listing(tmp_path / "a")["files"]
    later = _listing(tmp_path / "b", mtime=1)["files"]
    by_name = {Path(p).name: v for p, v in base.items()}
    later_by_name = {Path(p).name: v for p, v in later.items()}
    assert by_name["stray.pyc"] != later_by_name["stray.pyc"], "outside __pycache__ the mtime is not zeroed"
    assert by_name["hashed.cpython-311.pyc"] == later_by_name["hashed.cpython-311.pyc"]  # its word is not an mtime


def test_the_probe_walks_its_roots_and_skips_absent_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = _tree(tmp_path)
    module = runpy.run_path(str(REPO / "probes" / "inventory.py"))
    module["environment_section"].__globals__["ENVIRONMENT_ROOTS"] = (str(venv), str(tmp_path / "absent"))
    listing = module["environment_section"]()
    assert listing["roots"] == [str(venv)] and len(listing["files"]) == 6


# -- the host: the list is untrusted ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("/opt/venv/../../etc/passwd", "ab" * 32, "not an absolute, normalised path"),
        ("opt/venv/x", "ab" * 32, "not an absolute, normalised path"),
        ("/etc/passwd", "ab" * 32, "not under the listed roots"),
        ("/opt/venvx/evil", "ab" * 32, "not under the listed roots"),
        ("/opt/venv/a\nb", "ab" * 32, "control character"),
        ("/opt/venv/x", "not-a-hash", "is not a sha256"),
        ("/opt/venv/" + "x" * 5000, "ab" * 32, "longer than"),
    ],
    ids=["traversal", "relative", "outside", "prefix", "newline", "value", "long"],
)
def test_a_forged_list_is_refused_naming_the_path(path: str, value: str, message: str) -> None:
    section = environment_section({path: value})
    with pytest.raises(ValidationError, match=message):
        EnvironmentListing.model_validate(section)


def test_a_digest_that_is_not_its_list_s_fold_and_an_unknown_rule_are_refused() -> None:
    section = environment_section()
    with pytest.raises(ValidationError, match="not the fold of its file list"):
        EnvironmentListing.model_validate({**section, "digest": "sha256:" + "0" * 64})
    with pytest.raises(ValidationError, match="not a normalisation rule"):
        EnvironmentListing.model_validate({**section, "normalised": {"*.so": 3}})
    with pytest.raises(ValidationError, match="absolute, normalised folder"):
        EnvironmentListing.model_validate({**section, "roots": ["/"]})


class _Prints:
    """An engine whose every container prints `document`."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.stdout = json.dumps(document)

    def run(self, spec: Any) -> Any:
        return FakeEngine(runs={"inventory": ScriptedRun(stdout=self.stdout)}).run(spec)


def test_the_inventory_returns_the_summary_and_the_list_and_a_forged_one_fails_the_probe() -> None:
    outcome = probe_inventory(_Prints(inventory_output()), "sha256:x")  # type: ignore[arg-type]
    assert outcome.inventory is not None and outcome.inventory.environment is not None
    assert outcome.environment is not None and outcome.environment.summary == outcome.inventory.environment
    assert outcome.inventory.environment.files == len(outcome.environment.files) == 5
    forged = inventory_output(environment=environment_section({"/opt/venv/../../root/.ssh/id_rsa": "ab" * 32}))
    bad = probe_inventory(_Prints(forged), "sha256:x")  # type: ignore[arg-type]
    assert bad.inventory is None and bad.error is not None
    assert "field 'environment" in bad.error and "normalised path" in bad.error


def test_an_environment_the_probe_could_not_list_is_a_recorded_error() -> None:
    outcome = probe_inventory(_Prints(inventory_output(environment={"error": "OSError(13)"})), "x")  # type: ignore[arg-type]
    assert outcome.inventory is not None and outcome.inventory.environment is None and outcome.environment is None
    assert "environment: OSError(13)" in outcome.inventory.errors


# -- the diff compare and verify show -----------------------------------------------------------------


def _summary(files: dict[str, str]) -> EnvironmentSummary:
    return EnvironmentSummary(digest=fold_digest(files), files=len(files), roots=["/opt/venv"], normalised={})


def test_the_diff_names_changed_added_and_removed_files() -> None:
    a = {"/opt/venv/a": "1" * 64, "/opt/venv/b": "2" * 64, "/opt/venv/c": "3" * 64}
    b = {"/opt/venv/a": "1" * 64, "/opt/venv/b": "f" * 64, "/opt/venv/d": "4" * 64}
    assert diff_environments(_summary(a), _summary(dict(a)), a, a).same
    diff = diff_environments(_summary(a), _summary(b), a, b)
    assert not diff.same and diff.changed == ["/opt/venv/b"]
    assert diff.added == ["/opt/venv/d"] and diff.removed == ["/opt/venv/c"]
    assert diff.lines() == [
        "environment file changed: /opt/venv/b",
        "environment file added: /opt/venv/d",
        "environment file removed: /opt/venv/c",
    ]
    unknown = diff_environments(_summary(a), _summary(b), a, None)
    assert unknown.files_unknown is not None and "beside B's record" in unknown.lines()[0]


def test_a_large_diff_names_the_first_files_and_counts_the_rest() -> None:
    a = {f"/opt/venv/{n:04}": "1" * 64 for n in range(MAX_NAMED + 5)}
    b = {path: "2" * 64 for path in a}
    diff = diff_environments(_summary(a), _summary(b), a, b)
    assert len(diff.changed) == MAX_NAMED and diff.counts["changed"] == MAX_NAMED + 5
    assert diff.lines()[-1] == "environment: 5 more file(s) changed (see environment.json on each side)"


def test_compare_says_same_environment_and_names_the_one_changed_file(tmp_path: Path) -> None:
    reference = write_run(Run(), tmp_path / "a")
    same = write_run(Run(), tmp_path / "b")
    edited = dict(ENVIRONMENT)
    edited["/opt/venv/lib/python3.11/site-packages/torch/__init__.py"] = "ff" * 32
    rebuilt = write_run(Run(environment=tuple(edited.items())), tmp_path / "c")

    equal = compare_sides(load_side(reference), load_side(same))
    assert equal.environment is not None and equal.environment.same and equal.environment_verdict == "same"
    assert equal.verdict == "identical"
    assert "Same environment (sha256:" in render_compare_markdown(equal)

    differs = compare_sides(load_side(reference), load_side(rebuilt))
    assert differs.verdict == "regressed" and differs.environment_verdict == "changed"
    assert differs.unintended == ["environment file changed: /opt/venv/lib/python3.11/site-packages/torch/__init__.py"]
    result = CliRunner().invoke(cli, ["compare", str(reference), str(rebuilt)])
    assert result.exit_code == 1
    assert "file changed: /opt/venv/lib/python3.11/site-packages/torch/__init__.py" in result.output
    same_cli = CliRunner().invoke(cli, ["compare", str(reference), str(same)])
    assert same_cli.exit_code == 0 and "same environment" in same_cli.output


def test_a_stale_or_missing_environment_json_is_not_used_to_name_files(tmp_path: Path) -> None:
    reference = write_run(Run(), tmp_path / "a")
    rebuilt = write_run(Run(environment=(("/opt/app/embed.py", "0" * 64),)), tmp_path / "b")
    (rebuilt / "environment.json").write_text((reference / "environment.json").read_text())  # another digest's
    side = load_side(rebuilt)
    assert side.environment_files is None and any("lists another environment" in note for note in side.notes)
    comparison = compare_sides(load_side(reference), side)
    assert comparison.environment is not None and comparison.environment.files_unknown is not None
    assert comparison.verdict == "regressed"
    assert "no environment.json beside B's record" in comparison.unintended[0]


def test_a_side_without_a_digest_is_not_compared_and_says_why(tmp_path: Path) -> None:
    reference = load_side(write_run(Run(), tmp_path / "a"))
    old = reference.record.model_copy(  # type: ignore[union-attr]
        update={"inventory": reference.record.inventory.model_copy(update={"environment": None})}  # type: ignore[union-attr]
    )
    older = replace(reference, record=old, report=None, environment_files=None)
    comparison = compare_sides(reference, older)
    assert comparison.environment is None
    assert "environment: B records no environment digest (built by an orch without it)" in comparison.not_compared


def test_a_declared_variant_that_replaces_the_platform_explains_another_environment(tmp_path: Path) -> None:
    cuda = write_run(cuda_reference(), tmp_path / "cuda")
    cpu_files = (*ENVIRONMENT[:-1], ("/opt/venv/lib/python3.11/site-packages/torch/__init__.py", "99" * 32))
    cpu = write_run(replace(cpu_variant_of_cuda(), environment=cpu_files), tmp_path / "cpu")
    comparison = compare_sides(load_side(cuda), load_side(cpu))
    assert comparison.environment_verdict == "intended" and comparison.verdict != "regressed"
    assert comparison.environment is not None and comparison.environment.changed == [cpu_files[-1][0]]
    assert not any(line.startswith("environment") for line in comparison.unintended)


def _uv_install(root: Path, moment: int) -> dict[str, Any]:
    info = root / "opt" / "venv" / "lib" / "python3.11" / "site-packages" / "numpy-2.4.6.dist-info"
    shutil.rmtree(root / "opt", ignore_errors=True)
    info.mkdir(parents=True)
    cache = f'{{"timestamp":{{"secs_since_epoch":{moment},"nanos_since_epoch":5}}}}'.encode()
    (info / "uv_cache.json").write_bytes(cache)
    lines = ["numpy/__init__.py,sha256=abc,10", f"numpy-2.4.6.dist-info/uv_cache.json,sha256={moment},127", ""]
    (info / "RECORD").write_text("\n".join(lines))
    return environment_probe([str(root / "opt" / "venv")])


def test_uv_s_install_timestamp_and_its_record_line_are_left_out_and_nothing_else(tmp_path: Path) -> None:
    first, later = _uv_install(tmp_path, 1_796_177_249), _uv_install(tmp_path, 1_796_177_999)
    assert first["digest"] == later["digest"] and first["normalised"][UV_FILE] == 1
    assert first["normalised"][UV_LINES] == 1
    assert [Path(path).name for path in first["files"]] == ["RECORD"]
    record = tmp_path / "opt/venv/lib/python3.11/site-packages/numpy-2.4.6.dist-info/RECORD"
    record.write_text(record.read_text().replace("abc", "abd"))  # any other RECORD line still counts
    assert environment_probe([str(tmp_path / "opt" / "venv")])["digest"] != later["digest"]
