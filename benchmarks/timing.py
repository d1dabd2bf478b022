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


def labelled_images(session: str) -> list[str]:
    """Ids of the images (intermediate ones included) labelled `io.orch.session=<session>`, sorted: what one
    benchmark run made (it sets ORCH_LABELS), so that it removes exactly those."""
    listed = subprocess.run(
        ["docker", "image", "ls", "-aq", "--filter", f"label=io.orch.session={session}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return sorted(set(listed.stdout.split()))
