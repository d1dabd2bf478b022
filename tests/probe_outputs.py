"""Real probe outputs, recorded, for tests that feed a stage what a probe prints (importable as `tests.probe_outputs`).

`tests/fixtures/probe-outputs/` holds what `probes/device.py` and `probes/inventory.py` printed in the
tiny-embeddings image (torch 2.13.0+cpu, Debian bookworm): `docker run --rm --network none -e
ORCH_PROBE_EXPECT='{"platform": "cpu", "version": null}' IMAGE python -I -c "$(cat probes/device.py)"`.
A test changes only the keys it is about, so every document a stage sees has the probe's real shape.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from orchestrator.model.environment import fold_digest
from tests.paths import REPO

FIXTURES = REPO / "tests" / "fixtures" / "probe-outputs"


def _load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return document


def device_output(**changes: Any) -> dict[str, Any]:
    """The recorded CPU device-probe report with top-level keys replaced (a value of None removes the key)."""
    document = copy.deepcopy(_load("device-cpu.json"))
    for key, value in changes.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    return document


#: A few of the tiny-embeddings image's installed files, as the probe lists them (the recorded report
#: predates the environment digest; its real list is 22 561 files, 3.6 MB).
ENVIRONMENT_FILES = {
    "/opt/app/embed.py": "5f" * 32,
    "/opt/venv/bin/python": "link:" + "7a" * 32,
    "/opt/venv/lib/python3.11/site-packages/numpy/__init__.py": "c2" * 32,
    "/opt/venv/lib/python3.11/site-packages/torch/__pycache__/__init__.cpython-311.pyc": "d3" * 32,
    "/opt/venv/pyvenv.cfg": "e4" * 32,
}


def environment_section(files: dict[str, str] | None = None) -> dict[str, Any]:
    """The inventory probe's `environment` section for `files` (default ENVIRONMENT_FILES), digest folded."""
    files = dict(ENVIRONMENT_FILES if files is None else files)
    return {
        "roots": ["/opt/venv", "/opt/app"],
        "digest": fold_digest(files),
        "normalised": {"source mtime in timestamp-based __pycache__/*.pyc": 1},
        "files": files,
    }


def inventory_output(**changes: Any) -> dict[str, Any]:
    """The recorded inventory-probe report with top-level sections replaced (a value of None removes it)."""
    document = copy.deepcopy(_load("inventory.json"))
    document["environment"] = environment_section()
    for key, value in changes.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    return document
