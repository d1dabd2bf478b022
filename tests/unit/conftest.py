"""Unit tests are pure: any Docker or subprocess call fails loudly instead of touching the machine."""

from __future__ import annotations

import subprocess
from typing import Any, NoReturn

import docker
import pytest


def _forbidden(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError(f"unit tests must not call Docker or subprocesses (called with {args!r:.120})")


@pytest.fixture(autouse=True)
def _no_side_effects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docker, "from_env", _forbidden)
    monkeypatch.setattr(docker.DockerClient, "__init__", _forbidden)
    monkeypatch.setattr(docker.APIClient, "__init__", _forbidden)
    monkeypatch.setattr(subprocess, "run", _forbidden)
    monkeypatch.setattr(subprocess, "Popen", _forbidden)
