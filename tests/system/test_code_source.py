"""Which state of the code goes into the image: real git repositories, no Docker."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.errors import BadInput
from orchestrator.stages.code_source import copy_code, inspect_code
from tests.paths import EXAMPLES


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "tiny-embeddings", root / "tiny")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "reference")
    return root


def _dossier(repo: Path, extra: str = "") -> Path:
    path = repo / "tiny" / "dossier.yaml"
    text = path.read_text().replace("  dirty: record\n", extra)
    path.write_text(text)
    return path


def test_clean_work_tree_records_head(repo: Path) -> None:
    path = _dossier(repo)
    _git(repo, "commit", "-qam", "refuse dirty trees")
    state = inspect_code(load_dossier(path))
    assert state.kind == "git-worktree"
    assert state.revision == _git(repo, "rev-parse", "HEAD")
    assert not state.dirty and state.variant is None


def test_dirty_tree_is_refused_by_default(repo: Path) -> None:
    path = _dossier(repo)
    _git(repo, "commit", "-qam", "refuse dirty trees")
    (repo / "tiny" / "app" / "embed.py").write_text("print('changed')\n")
    with pytest.raises(BadInput, match="uncommitted changes"):
        inspect_code(load_dossier(path))


def test_dirty_tree_can_be_recorded_as_a_variant(repo: Path) -> None:
    path = repo / "tiny" / "dossier.yaml"  # the example says dirty: record
    (repo / "tiny" / "app" / "new_helper.py").write_text("X = 1\n")
    first = inspect_code(load_dossier(path))
    assert first.dirty and first.variant is not None and first.variant.startswith("dirty-")
    (repo / "tiny" / "app" / "new_helper.py").write_text("X = 2\n")
    second = inspect_code(load_dossier(path))
    assert second.diff_sha256 != first.diff_sha256, "the diff hash follows the content of the changes"


def test_pinned_revision_exports_that_commit_not_the_work_tree(repo: Path, tmp_path: Path) -> None:
    reference = _git(repo, "rev-parse", "HEAD")
    path = _dossier(repo, extra=f"  revision: {reference}\n")
    (repo / "tiny" / "app" / "embed.py").write_text("print('edited after the reference')\n")
    loaded = load_dossier(path)
    state = inspect_code(loaded)
    assert state.kind == "git-revision" and state.revision == reference
    copy_code(loaded, state, tmp_path / "out", scratch=tmp_path / "scratch")
    exported = (tmp_path / "out" / "embed.py").read_text()
    assert exported == (EXAMPLES / "tiny-embeddings" / "app" / "embed.py").read_text()


def test_unknown_revision_is_bad_input(repo: Path) -> None:
    path = _dossier(repo, extra=f"  revision: '{'0' * 40}'\n")
    with pytest.raises(BadInput, match="is not a commit"):
        inspect_code(load_dossier(path))


def test_git_url_exports_exactly_the_revision(repo: Path, tmp_path: Path) -> None:
    app_repo = tmp_path / "app-repo"
    shutil.copytree(EXAMPLES / "tiny-embeddings" / "app", app_repo)
    _git(app_repo, "init", "-q")
    _git(app_repo, "add", "-A")
    _git(app_repo, "commit", "-qm", "v1")
    revision = _git(app_repo, "rev-parse", "HEAD")
    (app_repo / "embed.py").write_text("print('v2')\n")
    _git(app_repo, "commit", "-qam", "v2")
    _git(app_repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    path = repo / "tiny" / "dossier.yaml"
    path.write_text(
        path.read_text().replace("  source: app\n", f"  source: file://{app_repo}\n  revision: {revision}\n")
    )
    loaded = load_dossier(path)
    state = inspect_code(loaded)
    assert state.kind == "git-url" and state.revision == revision
    copy_code(loaded, state, tmp_path / "out", scratch=tmp_path / "scratch")
    assert "def main" in (tmp_path / "out" / "embed.py").read_text(), "v1, not the later v2"
