"""A check: one expectation, what was observed, and whether it held. Every report section lists them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Check(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    expected: str
    observed: str
    passed: bool
    detail: str | None = None


def first_failure(checks: list[Check]) -> Check | None:
    return next((check for check in checks if not check.passed), None)


def mismatch(check: Check) -> str:
    """`expected X, observed Y`: the one wording of a check that did not hold (a stage's first error, a
    report's headline, a nightly cell's first error)."""
    return f"expected {check.expected}, observed {check.observed}"
