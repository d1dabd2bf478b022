from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.paths import EXAMPLES


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="Rewrite golden files instead of comparing.")


@pytest.fixture
def tiny_example(tmp_path: Path) -> Path:
    """A private copy of examples/tiny-embeddings that a test may change."""
    target = tmp_path / "tiny-embeddings"
    shutil.copytree(EXAMPLES / "tiny-embeddings", target)
    return target
