"""Host mode: the host and device stages on this machine, with no engine (GPU hosts with torch, no Docker)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from orchestrator import __version__
from orchestrator.checks.host_layer import ImageNeeds, compat_verdict, host_checks
from orchestrator.model.device import DEVICE_FACTS, DeviceProbeReport
from orchestrator.model.host import HostFacts
from orchestrator.model.platform import Platform
from orchestrator.model.recorded import mismatch_line
from orchestrator.model.report import Report, ReportDossier, StageError, StageResult, overall_verdict
from orchestrator.plan.run import DEVICE_PROBE_TIMEOUT_S, GpuMapping
from orchestrator.resources import probe_source
from orchestrator.stages.device_stage import (
    device_checks,
    died_explanations,
    died_sentence,
    probe_json,
    report_explanations,
)
from orchestrator.stages.probe import Clock, utc_now
from orchestrator.stages.results import not_run, stage_result
from orchestrator.timestamps import rfc3339
from orchestrator.untrusted import exited


def run_host_mode(
    platform: Platform,
    version: str | None,
    python: str,
    *,
    host_facts: Callable[[], HostFacts],
    run: Callable[..., Any],
) -> tuple[StageResult, StageResult]:
    """Host and device stages without any container: the device probe runs with `python` on this machine.

    For GPU machines that have torch but no Docker engine: the same probe, the same checks.
    """
    host = host_facts()
    started = time.monotonic()
    env = {**os.environ, "ORCH_PROBE_EXPECT": json.dumps({"platform": platform, "version": version})}
    try:
        done = run(
            [python, "-c", probe_source("device.py")],
            capture_output=True,
            text=True,
            env=env,
            timeout=DEVICE_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        device = stage_result(
            "device", started, [], {"python": python}, error=StageError(step="device probe", message=str(exc))
        )
    else:
        found = probe_json(done.stdout)
        if found is None:
            explained = died_explanations(done.stderr or "")
            device = stage_result(
                "device",
                started,
                [],
                {"python": python, **({"explanations": explained} if explained else {})},
                error=StageError(
                    step="device probe", message=exited(done.returncode, done.stderr) + died_sentence(explained)
                ),
            )
        else:
            mapping = GpuMapping(description="host mode: the host's own devices, no container")
            try:
                report = DeviceProbeReport.model_validate(found)
            except ValidationError as exc:
                message = mismatch_line(exc, "the device probe")
                device = stage_result(
                    "device", started, [], {"python": python}, error=StageError(step="device probe", message=message)
                )
            else:
                facts: dict[str, Any] = {key: getattr(report, key) for key in DEVICE_FACTS}
                facts["python"] = python
                if explained := report_explanations(report):
                    facts["explanations"] = explained
                device = stage_result("device", started, device_checks(platform, version, found, mapping), facts)
    host_started = time.monotonic()
    # The same checks as the probe's host stage; the image's needs are the version asked for, and no
    # container starts, so there is no mapping to check. Without a version there is nothing to compare.
    needs = ImageNeeds(cuda=version if platform == "cuda" else None, rocm=version if platform == "rocm" else None)
    verdict = compat_verdict(platform, host, needs, cpu_variant=None) if version or platform == "cpu" else None
    checks = host_checks(platform, host, needs, verdict, None)
    host_result = stage_result(
        "host",
        host_started,
        checks,
        {
            "kernel": host.kernel,
            "cpu": host.cpu.model_dump() if host.cpu else None,
            "nvidia": host.nvidia.model_dump() if host.nvidia else None,
            "amd": host.amd.model_dump() if host.amd else None,
            "notes": host.notes,
        },
    )
    return host_result, device


def host_mode_report(
    platform: Platform,
    version: str | None,
    python: str,
    *,
    host_facts: Callable[[], HostFacts],
    run: Callable[..., Any],
    clock: Clock = utc_now,
) -> Report:
    """`orch probe-host`: the host and device stages as a report; image and sample are not run."""
    host, device = run_host_mode(platform, version, python, host_facts=host_facts, run=run)
    stages = {
        "image": not_run("image", "host mode: no image, the host's own Python environment"),
        "host": host,
        "device": device,
        "sample": not_run("sample", "host mode runs the host and device probes only"),
    }
    verdict = "passed" if overall_verdict({"host": host, "device": device}) == "passed" else "failed"
    return Report(
        orch_version=__version__,
        created=rfc3339(clock()),
        dossier=ReportDossier(
            name="host-mode", path="-", identity="-", variant=None, platform=platform, backend_version=version
        ),
        image=None,
        verdict=verdict,
        stages=stages,
        notes=[f"host mode with {python}"],
    )
