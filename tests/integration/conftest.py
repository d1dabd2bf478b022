"""Integration tests run against a real Docker engine.

On a laptop without one they are skipped; under CI=true a missing engine is a failure, never a skip
(`make test` starts one first with scripts/ensure-engine.sh).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from orchestrator.base_image import BaseOutcome, BaseRecipe, ensure_base_image
from orchestrator.engine import MANAGED_LABEL, Engine, connect
from orchestrator.errors import EngineUnavailable


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    try:
        connected = connect()
    except EngineUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no Docker engine answers: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    yield connected
    connected.close()


@pytest.fixture(scope="session")
def base_image(engine: Engine) -> BaseOutcome:
    """The local Debian base every example builds on; made once (about a minute) and then reused."""
    return ensure_base_image(engine, BaseRecipe())


@pytest.fixture
def no_leftover_containers(engine: Engine) -> Iterator[None]:
    before = set(engine.containers(MANAGED_LABEL))
    yield
    assert set(engine.containers(MANAGED_LABEL)) == before, "orch left containers behind"
