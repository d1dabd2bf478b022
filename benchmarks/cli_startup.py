"""How long `orch --help` takes, against a bare `python -c pass` in the same run.

    .venv/bin/python benchmarks/cli_startup.py [--runs 20]

Prints the median and best wall time of each and the ratio. The target (issue 2): well under half
a second for `orch --help`. Record results in docs/benchmarks.md with the command line.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def measure(command: list[str], runs: int) -> list[float]:
    subprocess.run(command, capture_output=True, check=True)  # warm the file cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    baseline = measure([sys.executable, "-c", "pass"], args.runs)
    orch_help = measure([sys.executable, "-m", "orchestrator", "--help"], args.runs)
    validate = measure(
        [sys.executable, "-m", "orchestrator", "validate", "examples/tiny-embeddings/dossier.yaml"], args.runs
    )
    rows = [("python -c pass", baseline), ("orch --help", orch_help), ("orch validate (tiny)", validate)]
    base_median = statistics.median(baseline)
    print(f"{'command':<24} {'median':>9} {'best':>9} {'ratio':>7}   ({args.runs} runs)")
    for name, times in rows:
        median = statistics.median(times)
        print(f"{name:<24} {median * 1000:>7.0f}ms {min(times) * 1000:>7.0f}ms {median / base_median:>6.1f}x")
    verdict = "meets" if statistics.median(orch_help) < 0.5 else "MISSES"
    print(f"orch --help median {statistics.median(orch_help) * 1000:.0f} ms: {verdict} the < 500 ms target")


if __name__ == "__main__":
    main()
