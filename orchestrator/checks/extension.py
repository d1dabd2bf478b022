"""The extension check's lines in the device stage: one per extension that names a check. Pure.

A failure names the extension and its first error; on a GPU whose arch is not among the ones compiled
into the extension's object, it says so ("built for sm_80, this GPU is sm_90, no PTX").
"""

from __future__ import annotations

from typing import Any

from orchestrator.dossier.extensions import BuildSpec
from orchestrator.model.checks import Check
from orchestrator.text import one_line


def _arch_note(found: dict[str, Any], result: dict[str, Any]) -> str | None:
    device_arch, compiled = found.get("device_arch"), result.get("compiled_archs")
    if not device_arch or not isinstance(compiled, list) or device_arch in compiled:
        return None
    ptx = any(str(arch).startswith("compute_") for arch in compiled)
    return (
        f"built for {', '.join(map(str, compiled)) or 'no arch'}, this GPU is {device_arch}{'' if ptx else ', no PTX'}"
    )


def extension_check_lines(build: BuildSpec, found: dict[str, Any] | None, failure: str | None) -> list[Check]:
    """`found` is the probe's JSON (None when it printed none; then `failure` says why)."""
    results = {str(r.get("name")): r for r in (found or {}).get("results") or [] if isinstance(r, dict)}
    lines: list[Check] = []
    for extension in build.extensions:
        if extension.check is None:
            continue
        spec = extension.check
        name = f"extension {extension.name}: {spec.function} matches {spec.reference}"
        expected = f"|Δ| ≤ {spec.atol:g} + {spec.rtol:g}·|reference|"
        result = results.get(extension.name)
        if result is None:
            why = failure or (found or {}).get("error") or "the extension check reported nothing for it"
            lines.append(Check(name=name, expected=expected, observed=one_line(str(why)), passed=False))
            continue
        error = result.get("error")
        note = _arch_note(found or {}, result)
        if error is not None:
            observed = one_line(f"{extension.name}: {error}")
            lines.append(Check(name=name, expected=expected, observed=observed, passed=False, detail=note))
            continue
        diff = result.get("max_abs_diff")
        observed = f"max |Δ| = {diff:.3g} on {result.get('device')}" if isinstance(diff, float) else "no difference"
        lines.append(
            Check(name=name, expected=expected, observed=observed, passed=result.get("ok") is True, detail=note)
        )
    return lines
