"""`orch record --image REF`: the reference environment read inside the image the reference ran in.

Two containers of REF, with no network, through the Engine protocol: orch's inventory probe (the one the
rebuilt image answers, so the two inventories compare) and a guarded torch import plus `pip config list`
(what only an import tells: cuDNN, MIOpen, the arch list, the CPU capability). The image's id, digests,
labels and environment come from the engine. Everything printed by the containers is untrusted.

The draft's base image is chosen from the image's facts (OS release, Python, torch's backend) where orch's
table has a row for them (`base_for`); otherwise it is left to a person (TO CONFIRM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator import vendor
from orchestrator.engine import Engine, connect, describe_exit
from orchestrator.errors import BadInput, UnsafeOutput
from orchestrator.model.platform import Platform
from orchestrator.plan.run import INVENTORY_TIMEOUT_S, PROBE_LABEL
from orchestrator.plan.specs import RunSpec
from orchestrator.record.observe import TORCH_SCRIPT
from orchestrator.resources import probe_source
from orchestrator.untrusted import last_line, parse_json

#: The torch facts and the pip configuration, in the image's interpreter (isolated mode, like the probes).
_TORCH_AND_CONFIG = (
    TORCH_SCRIPT.replace("print(json.dumps(out))", "_torch = out").replace(
        'print(json.dumps({"importable": False, "error": repr(exc)[:300]}))',
        '_torch = {"importable": False, "error": repr(exc)[:300]}',
    )
    + """
import subprocess, sys
try:
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=120)
    config = done.stdout.splitlines() if done.returncode == 0 else []
except Exception:
    config = []
print(json.dumps({"torch": _torch, "pip_config": config}))
"""
)


@dataclass(frozen=True)
class ImageObservation:
    interpreter: dict[str, Any]  # the inventory probe's document, with "torch" and "pip_config" as for a venv
    facts: dict[str, Any]  # ref, id, repo_digests, labels
    environment: dict[str, str]  # the image's configured environment variables


def _json_from(engine: Engine, spec: RunSpec, what: str) -> dict[str, Any]:
    outcome = engine.run(spec)
    if outcome.timed_out:
        raise BadInput(f"--image {spec.image}: {what} did not finish within {int(spec.timeout_s)} s")
    last = last_line(outcome.stdout, limit=len(outcome.stdout) + 1)
    if outcome.exit_code != 0 or last is None:
        raise BadInput(
            f"--image {spec.image}: {what} " + describe_exit(outcome, spec, "it only reads the image's files"),
            hint="the image needs a Python 3 interpreter as `python` on its PATH (or give --python PATH-IN-IMAGE)",
        )
    try:
        document = parse_json(last.encode("utf-8", errors="replace"), what)
    except UnsafeOutput as exc:
        raise BadInput(f"--image {spec.image}: {what} printed no JSON document: {exc}") from None
    if not isinstance(document, dict):
        raise BadInput(f"--image {spec.image}: {what} printed JSON that is not an object")
    return document


def observe_image(ref: str, python: str = "python") -> ImageObservation:
    """Run the inventory probe and the torch/pip-config script in containers of `ref` (network none)."""
    with connect() as engine:
        info = engine.image(ref)
        if info is None:
            raise BadInput(
                f"--image {ref}: no such image on this engine", hint="pull or load it first (docker pull / docker load)"
            )
        labels = {PROBE_LABEL: "record"}
        inventory = _json_from(
            engine,
            RunSpec(
                image=info.id,
                command=[python, "-I", "-c", probe_source("inventory.py")],
                timeout_s=INVENTORY_TIMEOUT_S,
                labels=labels,
                network=False,
            ),
            "the inventory probe",
        )
        extra = _json_from(
            engine,
            RunSpec(
                image=info.id,
                command=[python, "-I", "-c", _TORCH_AND_CONFIG],
                timeout_s=INVENTORY_TIMEOUT_S,
                labels=labels,
                network=False,
            ),
            "the torch import",
        )
    inventory["torch"] = extra.get("torch") if isinstance(extra.get("torch"), dict) else {"importable": False}
    config = extra.get("pip_config")
    inventory["pip_config"] = [str(line) for line in config] if isinstance(config, list) else []
    facts = {
        "ref": ref,
        "id": info.id,
        "repo_digests": list(info.repo_digests),
        "labels": dict(info.labels),
        "os": _release(inventory),
    }
    return ImageObservation(inventory, facts, dict(info.env))


def _release(inventory: dict[str, Any]) -> dict[str, str]:
    release = (inventory.get("os") or {}).get("release") if isinstance(inventory.get("os"), dict) else None
    if not isinstance(release, dict):
        return {}
    return {key: str(release[key]) for key in ("ID", "VERSION_ID", "PRETTY_NAME") if key in release}


def base_for(
    os_release: dict[str, str], python: str, platform: Platform, backend: str | None
) -> tuple[str | None, str | None]:
    """(base image ref, None) from orch's table when a row provides the image's OS release, its Python and torch's
    backend; else (None, why) for the TO CONFIRM marker. Pure."""
    os_key = f"{os_release.get('ID', '?')}-{os_release.get('VERSION_ID', '?')}"
    rows = [
        row
        for row in vendor.base_images()
        if row.platform == platform and row.backend_version == backend and row.os == os_key
        and python in row.python_versions
    ]  # fmt: skip
    rows.sort(key=lambda row: not row.default)
    if rows:
        return rows[0].ref, None
    return None, (
        f"TO CONFIRM: the reference image runs {os_key} with Python {python} ({platform} {backend or ''}".rstrip()
        + "); no base image in orch's table provides that (orch tables). Set system.base_image (ref, and "
        "python for an image outside the table) to a base that does, or accept the table's default."
    )
