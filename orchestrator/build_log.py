"""Reading the classic builder's log: which steps came from the layer cache. Pure."""

from __future__ import annotations

import re

from orchestrator.build_record import CacheStats

_STEP = re.compile(r"^Step \d+/\d+ : (?P<instruction>.*)$")


def cache_stats(log: str) -> CacheStats:
    """Every non-FROM step is either cached (`---> Using cache`) or rebuilt; FROM steps only select a base."""
    steps: list[tuple[str, bool]] = []
    for line in log.splitlines():
        match = _STEP.match(line)
        if match:
            steps.append((match.group("instruction"), False))
        elif line.strip() == "---> Using cache" and steps:
            steps[-1] = (steps[-1][0], True)
    buildable = [(instruction, cached) for instruction, cached in steps if not instruction.upper().startswith("FROM ")]
    return CacheStats(
        steps=len(buildable),
        cached=sum(1 for _, cached in buildable if cached),
        rebuilt=[instruction for instruction, cached in buildable if not cached],
    )
