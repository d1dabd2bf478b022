"""The device stage: what torch sees inside the container with the host GPU mapped in, and a real computation.

No silent CPU fallback: a dossier that expects a GPU fails here when none is visible.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from orchestrator.checks.extension import extension_check_lines
from orchestrator.checks.failures import explanations_for_report, unexplained
from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine, describe_exit
from orchestrator.errors import ContainerStartFailed, UnsafeOutput
from orchestrator.model.checks import Check
from orchestrator.model.device import DEVICE_FACTS, DeviceProbeReport
from orchestrator.model.host import CompatVerdict
from orchestrator.model.platform import Platform
from orchestrator.model.recorded import mismatch_line
from orchestrator.model.report import StageError, StageResult
from orchestrator.plan.extension_check import extension_check_spec
from orchestrator.plan.run import DEVICE_PROBE_TIMEOUT_S, GpuMapping, RunPlan
from orchestrator.plan.specs import RunSpec
from orchestrator.stages.results import check, stage_result
from orchestrator.untrusted import parse_json


def probe_json(stdout: str) -> dict[str, Any] | None:
    """The probe's report: the last line of its (capped) stdout that is a JSON object."""
    for line in reversed([line for line in stdout.splitlines() if line.strip()]):
        try:
            value = parse_json(line.encode("utf-8", errors="replace"), "the probe's output")
        except UnsafeOutput:
            continue
        if isinstance(value, dict):
            return value
    return None


def device_checks(platform: Platform, version: str | None, found: dict[str, Any], mapping: GpuMapping) -> list[Check]:
    """Checks on the device probe's report. Pure: also used on host-mode probe output."""
    checks: list[Check] = []
    torch = found.get("torch")
    if torch is None:
        return [
            check("torch imports", "torch importable in the image", found.get("torch_error", "not importable"), False)
        ]
    accelerator = found.get("accelerator") or {}
    count = int(accelerator.get("device_count") or 0)
    devices = found.get("devices") or []
    if platform == "cpu":
        checks.append(
            check(
                "torch is a CPU build",
                "torch.version.cuda and .hip both None",
                f"cuda={torch.get('cuda')}, hip={torch.get('hip')}",
                torch.get("cuda") is None and torch.get("hip") is None,
            )
        )
    else:
        kind, field = ("CUDA", "cuda") if platform == "cuda" else ("ROCm/HIP", "hip")
        other = "hip" if field == "cuda" else "cuda"
        built = torch.get(field)
        checks.append(
            check(
                f"torch is a {kind} build",
                f"torch.version.{field} = {version}…" if version else f"torch.version.{field} set",
                f"torch {torch.get('version')}: cuda={torch.get('cuda')}, hip={torch.get('hip')}",
                bool(built)
                and not torch.get(other)
                and (version is None or str(built).startswith(version.split(".")[0])),
            )
        )
        visible = found.get("visible") or {}
        seen = (
            f"{len(visible.get('nvidia') or [])} /dev/nvidia* nodes"
            if platform == "cuda"
            else f"/dev/kfd {'present' if visible.get('kfd') else 'absent'}, {len(visible.get('dri_render') or [])} render nodes"
        )
        checks.append(
            check(
                f"{'NVIDIA' if platform == 'cuda' else 'AMD'} GPU visible in the container",
                "at least 1 device",
                f"torch sees {count} device(s); {seen}; mapping: {mapping.description}",
                count > 0,
                found.get("cuda_error"),
            )
        )
        for device in devices:
            if device.get("arch_supported") is False:
                arch = device.get("gcn_arch") or f"sm_{str(device.get('capability', '')).replace('.', '')}"
                checks.append(
                    check(
                        f"wheel has kernels for GPU {device.get('index')}",
                        f"{arch} in torch.cuda.get_arch_list()",
                        f"not in {found.get('arch_list')}",
                        False,
                        f"{device.get('name')}: the wheel was built without kernels for this GPU",
                    )
                )
    compute = found.get("compute")
    if compute:
        for op in ("matmul", "conv2d"):
            result = compute.get(op) or {}
            observed = result.get("error") or f"max |Δ| = {result.get('max_abs_diff', float('nan')):.3g}"
            checks.append(
                check(
                    f"{op} on {compute.get('device')} matches float64",
                    f"|Δ| ≤ {compute.get('atol')} + {compute.get('rtol')}·|reference|",
                    observed,
                    bool(result.get("ok")),
                )
            )
    elif platform != "cpu" and count > 0:
        checks.append(check("compute on the device", "matmul and conv2d ran", "no compute result", False))
    return checks


def report_explanations(report: DeviceProbeReport) -> list[dict[str, str]]:
    """What the failure catalogue makes of a device probe's report: torch's warnings, the runtimes' stderr, the
    import and init errors. An import or init error no entry knows is named as unknown, with its text."""
    explained = explanations_for_report(
        {
            "probe warnings": "\n".join(report.warnings or []),
            "probe stderr": report.stderr,
            "torch import": report.torch_error,
            "CUDA/HIP init": report.cuda_error,
        }
    )
    failure_text = report.cuda_error or report.torch_error
    if not explained and failure_text:
        explained = [unexplained("probe", failure_text)]
    return explained


def died_explanations(stderr: str) -> list[dict[str, str]]:
    """A probe that died without its report (hipErrorNoBinaryForGpu aborts the process): its stderr explained,
    or named as unknown; nothing when it said nothing."""
    explained = explanations_for_report({"probe stderr": stderr})
    if not explained and stderr.strip():
        explained = [unexplained("probe", stderr)]
    return explained


def died_sentence(explained: list[dict[str, str]]) -> str:
    """The first explanation of a dead probe, as the end of its stage's error message."""
    if not explained:
        return ""
    first = explained[0]
    known = "Known cause: " if first["id"] != "unknown" else ""
    return f". {known}{first['cause']} Next: {first['next_step']}"


def device_stage(
    engine: Engine,
    loaded: LoadedDossier,
    plan: RunPlan,
    verdict: CompatVerdict,
    compiled_archs: Mapping[str, Sequence[str]] | None = None,
) -> StageResult:
    """Run the plan's device probe, unless the host stage found the driver cannot run the image's CUDA.

    `compiled_archs`: the GPU archs the inventory read from each compiled extension's object, by name, so
    that an extension check failing on a GPU outside them says so."""
    started = time.monotonic()
    platform, version = loaded.model.system.platform, loaded.model.system.version
    mapping, spec = plan.mapping, plan.device
    if platform == "cuda" and verdict.status in ("unsupported", "refused-by-toolkit") and mapping.maps_nvidia:
        # Starting a GPU container now would only surface the runtime's cryptic "unsatisfied condition".
        return stage_result(
            "device",
            started,
            [],
            {"compatibility": verdict.model_dump()},
            error=StageError(step="compatibility", message=verdict.explanation),
        )
    try:
        outcome = engine.run(spec)
    except ContainerStartFailed as exc:
        # The daemon or its runtime refused the GPU container: the device stage failed at its start, and the
        # report says why in the catalogue's words (or that orch does not know the message), not a traceback.
        explained = explanations_for_report({"container start": exc.raw}) or [unexplained("container-start", exc.raw)]
        return stage_result(
            "device",
            started,
            [],
            {"gpu_mapping": mapping.description, "explanations": explained},
            error=StageError(step="container start", message=exc.message),
        )
    if outcome.timed_out:
        return stage_result(
            "device",
            started,
            [],
            {},
            error=StageError(
                step="device probe", message=f"no answer within {DEVICE_PROBE_TIMEOUT_S}s; the container was stopped"
            ),
        )
    found = None if outcome.oom_killed else probe_json(outcome.stdout)
    if found is None:
        # A probe that died (hipErrorNoBinaryForGpu aborts the process) printed no report: its stderr may
        # still carry a known message.
        message = describe_exit(outcome, spec, "the probe only imports torch and runs two small operations")
        explained = died_explanations("" if outcome.oom_killed else outcome.stderr)
        message += died_sentence(explained)
        return stage_result(
            "device",
            started,
            [],
            {"explanations": explained} if explained else {},
            error=StageError(step="device probe", message=message),
        )
    try:
        report = DeviceProbeReport.model_validate(found)
    except ValidationError as exc:
        return stage_result(
            "device",
            started,
            [],
            {"gpu_mapping": mapping.description},
            error=StageError(step="device probe", message=mismatch_line(exc, "the device probe")),
        )
    facts: dict[str, Any] = {key: getattr(report, key) for key in DEVICE_FACTS}
    facts["gpu_mapping"] = mapping.description
    explained = report_explanations(report)
    if explained:
        facts["explanations"] = explained
    try:
        checks = device_checks(platform, version, found, mapping)
    except (AttributeError, TypeError, ValueError, KeyError):
        # The probe runs inside the image, which a compromised package controls: a report of the wrong
        # shape is a failed stage, not a traceback.
        return stage_result(
            "device",
            started,
            [],
            {"gpu_mapping": mapping.description},
            error=StageError(step="device probe", message="printed a report that is not shaped as the probe's"),
        )
    checks += _extension_lines(engine, loaded, spec, compiled_archs or {})
    return stage_result("device", started, checks, facts)


def _extension_lines(
    engine: Engine, loaded: LoadedDossier, device: RunSpec, compiled_archs: Mapping[str, Sequence[str]]
) -> list[Check]:
    """The extensions' own checks, each its own line after the minimal compute (dossier `build`)."""
    spec = extension_check_spec(loaded, device)
    if spec is None or loaded.model.build is None:
        return []
    outcome = engine.run(spec)
    found = None if outcome.timed_out or outcome.oom_killed else probe_json(outcome.stdout)
    failure = None
    if found is None:
        failure = (
            f"no answer within {spec.timeout_s}s; the container was stopped"
            if outcome.timed_out
            else describe_exit(outcome, spec, "the check imports each extension and runs its operator once")
        )
    return extension_check_lines(loaded.model.build, found, failure, compiled_archs)
