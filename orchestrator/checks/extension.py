"""The extension check's lines in the device stage: one per extension that names a check. Pure.

A failure names the extension and its first error; on a GPU whose arch is not among the ones compiled
into the extension's object, it says so ("built for sm_80, this GPU is sm_90, no PTX").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.checks.cuda_archs import arch_gap
from orchestrator.checks.failures import explain_first
from orchestrator.dossier.extensions import BuildSpec
from orchestrator.model.checks import Check
from orchestrator.text import one_line


def _arch_note(found: dict[str, Any], compiled: Sequence[str] | None) -> str | None:
    device_arch = found.get("device_arch")
    if not isinstance(device_arch, str) or not compiled:
        return None
    return arch_gap(device_arch, [str(arch) for arch in compiled])


def extension_check_lines(
    build: BuildSpec,
    found: dict[str, Any] | None,
    failure: str | None,
    compiled_archs: Mapping[str, Sequence[str]] | None = None,
) -> list[Check]:
    """`found` is the probe's JSON (None when it printed none; then `failure` says why); `compiled_archs` the
    archs the inventory read from each extension's object (its .nv_fatbin), by extension name."""
    compiled_archs = compiled_archs or {}
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
        note = _arch_note(found or {}, compiled_archs.get(extension.name))
        if error is not None:
            observed = one_line(f"{extension.name}: {error}")
            # An extension kernel that fails for a GPU-stack reason ("invalid device function", "no kernel
            # image") is explained by the failure catalogue, as the device probe's own errors are.
            known = explain_first(str(error))
            detail = "; ".join(filter(None, (note, known.sentence() if known else None))) or None
            lines.append(Check(name=name, expected=expected, observed=observed, passed=False, detail=detail))
            continue
        diff = result.get("max_abs_diff")
        observed = f"max |Δ| = {diff:.3g} on {result.get('device')}" if isinstance(diff, float) else "no difference"
        lines.append(
            Check(name=name, expected=expected, observed=observed, passed=result.get("ok") is True, detail=note)
        )
    return lines
