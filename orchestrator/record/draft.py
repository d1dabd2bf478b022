"""The draft dossier `orch record` writes: observed facts filled in, human decisions marked TO CONFIRM.

Pure: a document (dict) from what was observed; `orch validate` lists the marked fields left
(`fields_to_confirm`). The marker is a string prefix, so a draft is a valid dossier from the start: it can
be locked and rebuilt before every decision is taken, and the report says it is a draft.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from orchestrator.model.platform import Platform
from orchestrator.record.outputs import ObservedOutput

TO_CONFIRM = "TO CONFIRM"


@dataclass(frozen=True)
class Mapped:
    """A host path of the reference command and where the sample's container sees it."""

    host: str
    container: str


def identifier(text: str) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._") or "output"
    return name[:63]


def container_command(argv: list[str], mapped: list[Mapped]) -> list[str]:
    """The reference command with its host paths replaced by the container's (`--x=PATH` forms too)."""
    by_length = sorted(mapped, key=lambda m: len(m.host), reverse=True)
    out: list[str] = []
    for position, token in enumerate(argv):
        if position == 0 and re.fullmatch(r".*/?python(3(\.\d+)?)?", token):
            out.append("python")
            continue
        replaced = token
        for item in by_length:
            host = item.host.rstrip("/")
            if replaced == host or replaced.startswith(host + "/"):
                replaced = item.container + replaced[len(host) :]
                break
            if "=" in replaced:
                key, _, value = replaced.partition("=")
                if value == host or value.startswith(host + "/"):
                    replaced = f"{key}={item.container}{value[len(host) :]}"
                    break
        out.append(replaced)
    return out


def spread_sentence(output: ObservedOutput) -> str:
    spread = output.spread
    runs = spread.get("runs", 0)
    if not runs:
        return "no rerun was measured (orch record --repeat N measures the run-to-run spread)"
    if spread.get("identical"):
        return f"{runs} rerun(s) on the reference host gave identical bytes"
    parts = [f"{runs} rerun(s) on the reference host"]
    if isinstance(spread.get("max_abs"), float):
        parts.append(f"max |a-b| = {spread['max_abs']:.3g}")
    if isinstance(spread.get("min_cosine"), float):
        parts.append(f"smallest row cosine = {spread['min_cosine']:.12g}")
    return ", ".join(parts)


def _differences(spread: dict[str, object]) -> str:
    if spread.get("missing"):
        return "the output was missing"
    if spread.get("identical"):
        return "identical bytes"
    parts = []
    if isinstance(spread.get("max_abs"), float):
        parts.append(f"max |a-b| = {spread['max_abs']:.3g}")
    if isinstance(spread.get("min_cosine"), float):
        parts.append(f"smallest row cosine = {spread['min_cosine']:.12g}")
    return ", ".join(parts) or "different bytes"


def measured_sentence(output: ObservedOutput) -> str:
    """The reruns' spread (`--repeat`) and, next to it, each other setting's (`--vary`)."""
    varied = [f"with {key}: {_differences(spread)}" for key, spread in output.varied.items()]
    if not varied:
        return spread_sentence(output)
    repeat = [spread_sentence(output)] if output.spread.get("runs") else []
    return "; ".join([*repeat, "one rerun per other setting on the reference host", *varied])


#: Machine epsilon (the gap from 1.0 to the next value) of each float format an output may have.
_EPSILON = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
#: Units in the last place a float result may move when only the order of a reduction changes (another BLAS
#: blocking, another CPU's vector width, another thread count): a few, at the output's own scale.
FLOOR_ULPS = 8


def tolerance_floor(output: ObservedOutput) -> float:
    """The smallest tolerance worth proposing for a float output: FLOOR_ULPS units in the last place at its
    largest magnitude. Two bit-identical reruns on one host say nothing about another CPU, whose BLAS sums in
    another order; a tolerance of 0.0 would fail a change of one ulp."""
    epsilon = _EPSILON.get(output.dtype or "", 0.0)
    return float(FLOOR_ULPS * epsilon * (output.scale or 0.0))


def largest_spread(output: ObservedOutput) -> float:
    """The largest max |a-b| over the reruns and every varied setting (0.0 when all were identical)."""
    seen = [s.get("max_abs") for s in (output.spread, *output.varied.values())]
    return max((float(v) for v in seen if isinstance(v, float)), default=0.0)


def output_entries(outputs: list[ObservedOutput]) -> list[dict[str, Any]]:
    ids_files = [o for o in outputs if o.is_ids]
    entries: list[dict[str, Any]] = []
    used_ids: set[str] = set()
    for output in outputs:
        if output.format is None or output.is_ids:
            continue
        entry: dict[str, Any] = {"name": identifier(output.file.rsplit(".", 1)[0]), "file": output.file}
        entry["format"] = output.format
        reference = f"reference/{output.file}"
        measured = measured_sentence(output)
        if output.format == "npy":
            entry["shape"] = output.shape
            entry["dtype"] = output.dtype
            if output.finite is not None:
                entry["finite"] = output.finite
            if ids_files and output.shape and ids_files[0].file not in used_ids:
                entry["ids"] = {"file": ids_files[0].file, "expected": f"reference/{ids_files[0].file}"}
                used_ids.add(ids_files[0].file)
        if output.format == "npy" and (output.dtype or "").startswith(("float", "bfloat")):
            worst = largest_spread(output)
            floor = tolerance_floor(output)
            seen = f"the largest spread seen ({worst:.3g})" if output.varied else f"the measured spread ({worst:.3g})"
            if floor > worst:
                proposed = (
                    f"orch proposes {floor:.3g}, above {seen}: {FLOOR_ULPS} units in the last place of "
                    f"{output.dtype} at the output's largest magnitude ({output.scale:.3g}), what a change of "
                    "summation order alone (another BLAS blocking, another CPU's vector width) moves a value by"
                )
            else:
                proposed = f"orch proposes {seen}, which is above the floor of {FLOOR_ULPS} ulps ({floor:.3g})"
            entry["compare"] = {
                "metric": "max_abs",
                "max": max(worst, floor),
                "reference": reference,
                "sha256": output.sha256,
                "justification": f"{TO_CONFIRM}: measured, {measured}. {proposed}; no universal threshold: say "
                "why this tolerance fits the use (docs/record.md, *Choosing a tolerance*), and widen it for other "
                "GPUs or library builds only with a reason.",
            }
        else:
            entry["compare"] = {
                "metric": "exact",
                "reference": reference,
                "sha256": output.sha256,
                "justification": f"{TO_CONFIRM}: not floating point ({output.dtype or output.format}); measured, "
                f"{measured}. Exact equality is proposed: confirm that no difference is acceptable.",
            }
        entries.append(entry)
    return entries


def draft_document(
    *,
    name: str,
    entrypoint: str,
    options_note: str,
    python_version: str,
    platform: Platform,
    backend_version: str | None,
    base_image: str | None,
    torch_index: str | None,
    command: list[str],
    inputs: list[dict[str, str]],
    weights: list[dict[str, str]],
    outputs: list[ObservedOutput],
    timeout_s: int,
    base_image_note: str | None = None,
) -> dict[str, Any]:
    system: dict[str, Any] = {"platform": platform}
    if backend_version:
        system["version"] = backend_version
    if base_image:
        system["base_image"] = {"ref": base_image}
    python: dict[str, Any] = {
        "version": python_version,
        "requirements": "requirements.lock",
        "install": "wheelhouse",
        # The rebuild's `pip freeze --all` is compared with it. requirements.in pins only the top-level
        # distributions; the first lock prefers this inventory's versions for the rest, so a faithful rebuild
        # shows no difference.
        "reference_inventory": "record/pip-freeze.txt",
    }
    if torch_index:
        python["indexes"] = [{"url": torch_index}]
    document: dict[str, Any] = {
        "dossier": 1,
        "name": name,
        "description": f"{TO_CONFIRM}: what this reference run computes and what its outputs are used for.",
        "code": {"source": "app", "entrypoint": entrypoint, "dirty": "record", "options": {"recorded": options_note}},
        "python": python,
        "system": system,
    }
    if base_image_note:
        # The model has no free-text field in system: the decision is asked where `orch validate` lists it.
        document["code"]["options"]["base_image"] = base_image_note
    if weights:
        document["weights"] = weights
    document["expect"] = {
        "command": command,
        "inputs": inputs,
        "timeout_s": timeout_s,
        "outputs": output_entries(outputs),
    }
    return document


def fields_to_confirm(value: Any, where: str = "") -> list[str]:
    """Dotted paths of every string in a dossier that still carries the TO CONFIRM marker."""
    found: list[str] = []
    if isinstance(value, str) and value.startswith(TO_CONFIRM):
        found.append(where)
    elif isinstance(value, dict):
        for key, item in value.items():
            found += fields_to_confirm(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += fields_to_confirm(item, f"{where}[{index}]")
    return found
