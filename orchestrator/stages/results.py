"""A stage's result from its checks: passed, failed at its first failed check (or at an error), not run."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.model.checks import Check, first_failure, mismatch
from orchestrator.model.report import StageError, StageName, StageResult


def check(name: str, expected: str, observed: str, passed: bool, detail: str | None = None) -> Check:
    return Check(name=name, expected=expected, observed=observed, passed=passed, detail=detail)


def stage_result(
    name: StageName,
    started: float,
    checks: list[Check],
    facts: dict[str, Any],
    *,
    error: StageError | None = None,
    warnings: list[str] | None = None,
) -> StageResult:
    """`started` is a `time.monotonic()` reading; the first failed check becomes the stage's first error."""
    failed = first_failure(checks)
    if error is None and failed is not None:
        error = StageError(
            step=failed.name,
            message=mismatch(failed) + (f" ({failed.detail})" if failed.detail else ""),
        )
    return StageResult(
        name=name,
        status="failed" if error is not None else "passed",
        facts=facts,
        checks=checks,
        duration_s=round(time.monotonic() - started, 3),
        first_error=error,
        warnings=warnings or [],
    )


def not_run(name: StageName, reason: str) -> StageResult:
    return StageResult(name=name, status="not_run", reason=reason)
