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


def inventory_output(**changes: Any) -> dict[str, Any]:
    """The recorded inventory-probe report with top-level sections replaced (a value of None removes it)."""
    document = copy.deepcopy(_load("inventory.json"))
    for key, value in changes.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    return document
