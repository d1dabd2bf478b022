"""Environment equivalence between two sides: the same environment digest, or the files that differ.

A side's digest comes from its build record's inventory, else its report's image facts; its per-file
list from the `environment.json` beside them (written by `orch build` and by the probe's image stage,
shipped in a hand-over's build/). The list is used only when it folds to the side's own digest, so a
stale or edited file can never name the wrong files. `orch verify` judges a replay with the same
`environment_verdict`, so compare and verify cannot disagree about an environment.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.compare.diff import Intent
from orchestrator.compare.read import Side, environment_of
from orchestrator.model.comparison import Verdict
from orchestrator.model.environment import EnvironmentDiff, EnvironmentSummary, diff_environments

#: What an installed file's difference says about B (the per-file lines list which ones).
SAME_ENVIRONMENT = "same environment"


def environment_verdict(
    a: EnvironmentSummary,
    b: EnvironmentSummary,
    files_a: Mapping[str, str] | None,
    files_b: Mapping[str, str] | None,
    intent: Intent | None,
) -> tuple[EnvironmentDiff, Verdict, str | None]:
    """Same digest: `same`. Otherwise `intended` when a declared variant replaces python or system, else `changed`."""
    diff = diff_environments(a, b, dict(files_a) if files_a else None, dict(files_b) if files_b else None)
    if diff.same:
        return diff, "same", SAME_ENVIRONMENT
    if intent is not None and intent.covers(frozenset({"python", "system"})):
        return diff, "intended", intent.label
    return diff, "changed", None


def environment_rows(
    a: Side, b: Side, intent: Intent | None, not_compared: list[str]
) -> tuple[EnvironmentDiff | None, Verdict | None, str | None]:
    summary_a, summary_b = environment_of(a), environment_of(b)
    if summary_a is None or summary_b is None:
        missing = (
            "A and B record"
            if summary_a is None and summary_b is None
            else f"{'A' if summary_a is None else 'B'} records"
        )
        not_compared.append(f"environment: {missing} no environment digest (built by an orch without it)")
        return None, None, None
    return environment_verdict(summary_a, summary_b, a.environment_files, b.environment_files, intent)
