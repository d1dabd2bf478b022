"""The inventory probe: one container start in an image, its JSON report read back as an `Inventory`."""

from __future__ import annotations

from pydantic import ValidationError

from orchestrator.engine import Engine, describe_exit
from orchestrator.model.inventory import Inventory, InventoryProbeReport, parse_inventory
from orchestrator.model.recorded import mismatch_line
from orchestrator.plan.run import INVENTORY_TIMEOUT_S, inventory_spec
from orchestrator.plan.specs import RunSpec
from orchestrator.untrusted import UnsafeOutput, last_line, parse_json


def run_inventory(engine: Engine, image: str, spec: RunSpec | None = None) -> tuple[Inventory | None, str | None]:
    """The inventory probe in one container start; (inventory, None) or (None, first error)."""
    spec = spec or inventory_spec(image)
    outcome = engine.run(spec)
    if outcome.timed_out:
        return None, f"the inventory probe did not finish within {INVENTORY_TIMEOUT_S}s"
    last = last_line(outcome.stdout, limit=len(outcome.stdout) + 1)
    if outcome.exit_code != 0 or last is None:
        return None, "the inventory probe " + describe_exit(
            outcome, spec, "the probe only runs pip and reads the image's files"
        )
    try:
        document = parse_json(last.encode("utf-8", errors="replace"), "the inventory probe's output")
        if not isinstance(document, dict):
            raise UnsafeOutput("the inventory probe's output", "is not a JSON object")
        InventoryProbeReport.model_validate(document)
        return parse_inventory(document), None
    except ValidationError as exc:
        return None, mismatch_line(exc, "the inventory probe")
    except UnsafeOutput as exc:
        return None, f"the inventory probe printed no JSON document: {exc}"
    except (ValueError, TypeError, AttributeError) as exc:
        # The probe runs in the image; a report of the wrong shape is a failure, not a traceback.
        return None, f"the inventory probe printed a report not shaped as the probe's: {str(exc).splitlines()[0][:200]}"
