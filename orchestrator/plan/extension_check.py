"""The extension check's container: the device probe's spec (same image, GPU mapping, CPU knobs, limits)
running probes/extension_check.py with the dossier's checks. Pure, like the rest of the run plan."""

from __future__ import annotations

import json
from dataclasses import replace

from orchestrator.dossier.load import LoadedDossier
from orchestrator.plan.run import PROBE_LABEL, probe_command
from orchestrator.plan.specs import RunSpec


def extension_check_spec(loaded: LoadedDossier, device: RunSpec) -> RunSpec | None:
    """None when the dossier's extensions name no check."""
    build = loaded.model.build
    checks = [
        {"name": ext.name, **ext.check.model_dump(mode="json", exclude={"justification"})}
        for ext in (build.extensions if build is not None else [])
        if ext.check is not None
    ]
    if not checks:
        return None
    return replace(
        device,
        command=probe_command("extension_check.py"),
        environment={**device.environment, "ORCH_EXT_CHECKS": json.dumps(checks, sort_keys=True)},
        labels={**device.labels, PROBE_LABEL: "extension-check"},
    )
