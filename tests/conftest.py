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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """GPU tests run only where a GPU interpreter is named; CI never needs them."""
    import os

    if os.environ.get("ORCH_GPU_PYTHON"):
        return
    skip = pytest.mark.skip(reason="needs a GPU machine: set ORCH_GPU_PYTHON to an interpreter with CUDA torch")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
