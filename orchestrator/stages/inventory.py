"""The inventory probe: one container start in an image, its JSON report read back as an `Inventory`.

The report also lists every installed file with its sha256 (the environment digest,
`model/environment.py`): validated with the report, summarised in the `Inventory`, and handed back whole
as an `EnvironmentFile` for the caller to write beside its record (`environment.json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from orchestrator.engine import Engine, describe_exit
from orchestrator.errors import UnsafeOutput
from orchestrator.fsutil import atomic_write_text
from orchestrator.model.environment import ENVIRONMENT_FILE, EnvironmentFile, EnvironmentListing, environment_file
from orchestrator.model.inventory import Inventory, InventoryProbeReport, parse_inventory
from orchestrator.model.recorded import mismatch_line
from orchestrator.plan.run import INVENTORY_TIMEOUT_S, inventory_spec
from orchestrator.plan.specs import RunSpec
from orchestrator.untrusted import last_line, parse_json


@dataclass(frozen=True)
class InventoryOutcome:
    inventory: Inventory | None
    environment: EnvironmentFile | None
    error: str | None


def probe_inventory(engine: Engine, image: str, spec: RunSpec | None = None) -> InventoryOutcome:
    """The inventory probe in one container start: the inventory and the environment's file list, or the first error."""
    spec = spec or inventory_spec(image)
    outcome = engine.run(spec)
    if outcome.timed_out:
        return InventoryOutcome(None, None, f"the inventory probe did not finish within {INVENTORY_TIMEOUT_S}s")
    last = last_line(outcome.stdout, limit=len(outcome.stdout) + 1)
    if outcome.exit_code != 0 or last is None:
        return InventoryOutcome(
            None,
            None,
            "the inventory probe "
            + describe_exit(outcome, spec, "the probe only runs pip and reads the image's files"),
        )
    try:
        document = parse_json(last.encode("utf-8", errors="replace"), "the inventory probe's output")
        if not isinstance(document, dict):
            raise UnsafeOutput("the inventory probe's output", "is not a JSON object")
        report = InventoryProbeReport.model_validate(document)
        inventory = parse_inventory(document)
    except ValidationError as exc:
        return InventoryOutcome(None, None, mismatch_line(exc, "the inventory probe"))
    except UnsafeOutput as exc:
        return InventoryOutcome(None, None, f"the inventory probe printed no JSON document: {exc}")
    except (ValueError, TypeError, AttributeError) as exc:
        # The probe runs in the image; a report of the wrong shape is a failure, not a traceback.
        first = str(exc).splitlines()[0][:200]
        return InventoryOutcome(None, None, f"the inventory probe printed a report not shaped as the probe's: {first}")
    if not isinstance(report.environment, EnvironmentListing):
        return InventoryOutcome(inventory, None, None)
    listed = environment_file(report.environment)
    return InventoryOutcome(inventory.model_copy(update={"environment": listed.summary}), listed, None)


def run_inventory(engine: Engine, image: str, spec: RunSpec | None = None) -> tuple[Inventory | None, str | None]:
    """The inventory probe in one container start; (inventory, None) or (None, first error)."""
    outcome = probe_inventory(engine, image, spec)
    return outcome.inventory, outcome.error


def write_environment(out: Path, environment: EnvironmentFile | None) -> None:
    """`environment.json` beside the record; an older one is removed when this image has no list (never stale)."""
    path = out / ENVIRONMENT_FILE
    if environment is None:
        path.unlink(missing_ok=True)
        return
    atomic_write_text(path, environment.model_dump_json(indent=1) + "\n")
