"""Copies out of the untrusted dossier folder (build context, its tar, the hand-over's dossier, git
exports) never carry a host file: real folders, real git, no Docker.

The "host secret" is a file made outside the dossier's folder holding a canary string; every test scans
what orch wrote, byte for byte, for that canary. A link planted *after* the dossier was loaded is the
hard case: the copy must check again, not trust what load saw.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.errors import BadInput, DossierError
from orchestrator.plan.build import make_plan
from orchestrator.stages.build_context import context_tar
from orchestrator.stages.code_source import copy_code, inspect_code
from orchestrator.stages.context import MARKER, write_context
from orchestrator.stages.handover import _copy_dossier
from tests.paths import EXAMPLES

CANARY = b"ORCH-CANARY-7a33e1b0-host-secret"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    host.mkdir()
    path = host / "shadow"
    path.write_bytes(b"root:" + CANARY + b":19000:0:99999:7:::\n")
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """tiny-embeddings, installed online (no wheel download), outside any git work tree."""
    root = tmp_path / "dossier"
    shutil.copytree(EXAMPLES / "tiny-embeddings", root)
    path = root / "dossier.yaml"
    path.write_text(path.read_text().replace("install: wheelhouse", "install: online"))
    return root


def assert_no_leak(where: Path) -> int:
    """No file under `where` holds the canary and no link there leads out of it; returns files scanned."""
    scanned = 0
    for base, dirs, files in os.walk(where):
        for name in dirs + files:
            path = Path(base) / name
            if path.is_symlink():
                assert Path(os.path.realpath(path)).is_relative_to(where.resolve()), f"{path} leads out"
            elif path.is_file():
                assert CANARY not in path.read_bytes(), f"the host secret leaked into {path}"
                scanned += 1
    return scanned


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def test_a_link_planted_after_load_is_refused_by_the_render(folder: Path, secret: Path, tmp_path: Path) -> None:
    loaded = load_dossier(folder / "dossier.yaml")
    (folder / "app" / "leak.txt").symlink_to(secret)
    out = tmp_path / "context"
    with pytest.raises(DossierError, match=r"app/leak\.txt"):
        write_context(loaded, make_plan(loaded), out)
    assert not out.exists(), "nothing half-written is left"
    left = [child.name for child in tmp_path.iterdir() if child.name not in ("host", "dossier")]
    assert left == [], f"staging folders left behind: {left}"


def test_a_link_inside_reaches_context_and_tar_as_a_regular_file(folder: Path, secret: Path, tmp_path: Path) -> None:
    (folder / "app" / "alias.py").symlink_to("embed.py")
    (folder / "app" / "samples").symlink_to("../sample")
    loaded = load_dossier(folder / "dossier.yaml")
    out = tmp_path / "context"
    write_context(loaded, make_plan(loaded), out)
    alias = out / "app" / "alias.py"
    assert not alias.is_symlink() and alias.read_bytes() == (folder / "app" / "embed.py").read_bytes()
    assert (out / "app" / "samples" / "sample.jsonl").is_file()
    assert not any(path.is_symlink() for path in out.rglob("*")), "the context holds no links"
    marker = json.loads((out / MARKER).read_text())
    assert marker["links"] == {"app/alias.py": "app/embed.py", "app/samples": "sample"}, "recorded"
    built = context_tar(out)
    with tarfile.open(fileobj=built.file) as tar:
        members = tar.getmembers()
        assert not any(member.issym() or member.islnk() for member in members)
        for member in members:
            if member.isfile():
                extracted = tar.extractfile(member)
                assert extracted is not None and CANARY not in extracted.read()
    built.file.close()
    assert assert_no_leak(out) > 0


def test_a_committed_link_out_of_a_git_tree_is_refused(tmp_path: Path, secret: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "tiny-embeddings", repo / "tiny")
    (repo / "tiny" / "app" / "leak.txt").symlink_to(secret)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "a link out")
    revision = _git(repo, "rev-parse", "HEAD")
    (repo / "tiny" / "app" / "leak.txt").unlink()  # the work tree is clean of it: only the commit holds it
    path = repo / "tiny" / "dossier.yaml"
    path.write_text(path.read_text().replace("  dirty: record\n", f"  revision: {revision}\n"))
    loaded = load_dossier(path)
    state = inspect_code(loaded)
    dest = tmp_path / "out"
    with pytest.raises(BadInput, match=r"'leak.txt' -> '.*shadow'.*leaves the code's tree"):
        copy_code(loaded, state, dest, scratch=tmp_path / "scratch")
    for written in (tmp_path / "scratch", dest):
        if written.exists():
            assert_no_leak(written)
    assert not (dest / "leak.txt").exists()


def test_a_committed_link_inside_a_git_tree_becomes_its_file(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "tiny-embeddings", repo / "tiny")
    (repo / "tiny" / "app" / "alias.py").symlink_to("embed.py")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "a link inside")
    revision = _git(repo, "rev-parse", "HEAD")
    path = repo / "tiny" / "dossier.yaml"
    path.write_text(path.read_text().replace("  dirty: record\n", f"  revision: {revision}\n"))
    loaded = load_dossier(path)
    dest = tmp_path / "out"
    copy_code(loaded, inspect_code(loaded), dest, scratch=tmp_path / "scratch")
    alias = dest / "alias.py"
    assert not alias.is_symlink() and alias.read_bytes() == (repo / "tiny" / "app" / "embed.py").read_bytes()


def test_the_hand_over_copy_checks_again(folder: Path, secret: Path, tmp_path: Path) -> None:
    loaded = load_dossier(folder / "dossier.yaml")
    (folder / "sample" / "sample.jsonl").unlink()
    (folder / "sample" / "sample.jsonl").symlink_to(secret)  # swapped after load
    dest = tmp_path / "handover" / "dossier"
    with pytest.raises(DossierError, match="outside the dossier's folder"):
        _copy_dossier(loaded, dest)
    assert_no_leak(tmp_path / "handover")


def test_the_hand_over_copies_inside_links_as_files(folder: Path, tmp_path: Path) -> None:
    (folder / "app" / "alias.py").symlink_to("embed.py")
    loaded = load_dossier(folder / "dossier.yaml")
    dest = tmp_path / "handover" / "dossier"
    _copy_dossier(loaded, dest)
    assert (dest / "app" / "alias.py").is_file() and not (dest / "app" / "alias.py").is_symlink()
    assert (dest / "sample" / "sample.jsonl").read_bytes() == (folder / "sample" / "sample.jsonl").read_bytes()
    assert not any(path.is_symlink() for path in dest.rglob("*"))
