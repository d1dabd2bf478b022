from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dossier.lock import parse_lock
from orchestrator.dossier.models import IndexSpec
from orchestrator.errors import BadInput, WheelhouseError
from orchestrator.stages.wheelhouse import (
    TargetPlatform,
    collect_wheels,
    pip_index_environment,
)


def test_platform_tags_cover_every_manylinux_the_glibc_accepts() -> None:
    tags = TargetPlatform("3.11", "2.28").platform_tags()
    assert tags[0] == "manylinux_2_28_x86_64"
    assert "manylinux_2_5_x86_64" in tags and "manylinux_2_4_x86_64" not in tags
    assert len([t for t in tags if t.startswith("manylinux_2_")]) == 24  # 5 … 28
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"} <= set(tags)
    older = TargetPlatform("3.11", "2.12").platform_tags()
    assert "manylinux2014_x86_64" not in older and "manylinux2010_x86_64" in older


def test_private_index_credentials_come_from_the_named_variable_only() -> None:
    indexes = [IndexSpec(url="https://pypi.example.org/simple", access="ORCH_TEST_INDEX")]
    env = pip_index_environment(indexes, use_pypi=False, environ={"ORCH_TEST_INDEX": "bob:to/ken"})
    assert env == {"PIP_INDEX_URL": "https://bob:to%2Fken@pypi.example.org/simple"}
    with pytest.raises(BadInput, match="ORCH_TEST_INDEX, which is not set"):
        pip_index_environment(indexes, use_pypi=False, environ={})
    assert pip_index_environment([], use_pypi=False, environ={}) == {"PIP_NO_INDEX": "1"}


class FakePip:
    """Stands in for `pip download`: writes the given wheel files into --dest."""

    def __init__(self, files: dict[str, bytes], returncode: int = 0, stderr: str = "") -> None:
        self.files = files
        self.returncode = returncode
        self.stderr = stderr
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((command, kwargs["env"]))
        dest = Path(command[command.index("--dest") + 1])
        dest.mkdir(parents=True, exist_ok=True)
        for name, content in self.files.items():
            (dest / name).write_bytes(content)
        return subprocess.CompletedProcess(command, self.returncode, "", self.stderr)


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def test_collect_downloads_once_then_serves_from_the_cache(tmp_path: Path) -> None:
    wheel = b"fake wheel bytes"
    lock = parse_lock(
        f"demo==1.0 --hash=sha256:{_sha(wheel)}\nwinonly==1.0 ; sys_platform == 'win32' --hash=sha256:{'0' * 64}\n"
    )
    pip = FakePip({"demo-1.0-py3-none-any.whl": wheel})
    target = TargetPlatform("3.11", "2.36")
    wheels = collect_wheels(lock, target, tmp_path / "ctx1", cache=tmp_path / "cache", run=pip, environ={})
    assert [w.file_name for w in wheels] == ["demo-1.0-py3-none-any.whl"], "the win32-only line is skipped"
    assert (tmp_path / "ctx1" / "demo-1.0-py3-none-any.whl").read_bytes() == wheel
    command = pip.calls[0][0]
    assert command[command.index("--python-version") + 1] == "3.11"
    assert command[command.index("--abi") + 1] == "cp311"
    assert "--require-hashes" in command and "--no-deps" in command
    assert command.count("--platform") == len(target.platform_tags())

    again = collect_wheels(lock, target, tmp_path / "ctx2", cache=tmp_path / "cache", run=pip, environ={})
    assert len(pip.calls) == 1, "the second collection is served by the content-addressed cache"
    assert again == wheels


def test_a_wheel_with_another_hash_is_refused(tmp_path: Path) -> None:
    lock = parse_lock(f"demo==1.0 --hash=sha256:{'1' * 64}\n")
    pip = FakePip({"demo-1.0-py3-none-any.whl": b"tampered"})
    with pytest.raises(WheelhouseError, match=r"no wheel matching the locked hashes of demo==1\.0"):
        collect_wheels(
            lock, TargetPlatform("3.11", "2.36"), tmp_path / "ctx", cache=tmp_path / "c", run=pip, environ={}
        )


def test_pip_failure_is_reported_redacted(tmp_path: Path) -> None:
    lock = parse_lock(f"demo==1.0 --hash=sha256:{'1' * 64}\n")
    pip = FakePip({}, returncode=1, stderr="ERROR: Could not find a version at https://bob:hunter2@idx/simple\n")
    with pytest.raises(WheelhouseError) as caught:
        collect_wheels(
            lock, TargetPlatform("3.11", "2.36"), tmp_path / "ctx", cache=tmp_path / "c", run=pip, environ={}
        )
    assert "hunter2" not in str(caught.value)
    assert "https://****@idx/simple" in str(caught.value)


def test_unhashed_locks_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="--hash on every line"):
        collect_wheels(parse_lock("demo==1.0\n"), TargetPlatform("3.11", "2.36"), tmp_path, run=FakePip({}))


def test_collect_without_a_runner_meets_the_unit_test_tripwire(tmp_path: Path) -> None:
    """The default runner is looked up at call time: the tripwire on `subprocess.run` catches it."""
    lock = parse_lock(f"demo==1.0 --hash=sha256:{'1' * 64}\n")
    with pytest.raises(AssertionError, match="must not call"):
        collect_wheels(lock, TargetPlatform("3.11", "2.36"), tmp_path / "ctx", cache=tmp_path / "cache", environ={})
