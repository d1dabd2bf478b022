"""Timing helper shared by the benchmarks: wall time of one command, which must succeed."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping


def timed(command: list[str], env: Mapping[str, str] | None = None) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return elapsed
