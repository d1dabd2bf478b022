"""orch probe against a bare `docker run` of the same image importing torch, in the same run.

    .venv/bin/python benchmarks/probe_overhead.py [--runs 5]

Builds examples/tiny-embeddings (warm), then compares the median of N bare
`docker run --rm --network none IMAGE python -c "import torch"` with the median of N `orch probe`
wall times minus the sample stage's own duration (sample compute excluded, as the issue asks).
Prints the ratio; the target is <= 1.5x. Record results in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import timed  # noqa: E402 - the benchmarks folder is not a package

ORCH = [sys.executable, "-m", "orchestrator"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="orch-bench-probe-"))
    try:
        dossier = str(REPO / "examples" / "tiny-embeddings" / "dossier.yaml")
        out = work / "out"
        timed([*ORCH, "build", dossier, "--out", str(out)])
        image = json.loads((out / "build.json").read_text())["image"]["id"]
        bare = ["docker", "run", "--rm", "--network", "none", image, "python", "-c", "import torch"]
        timed(bare)
        bare_times = [timed(bare) for _ in range(args.runs)]
        probe_times, sample_times = [], []
        for _ in range(args.runs):
            probe_times.append(timed([*ORCH, "probe", dossier, "--out", str(out)]))
            report = json.loads((out / "report.json").read_text())
            sample_times.append(report["stages"]["sample"]["duration_s"])
        without_sample = [p - s for p, s in zip(probe_times, sample_times, strict=True)]
        b, o = statistics.median(bare_times), statistics.median(without_sample)
        print(f"({args.runs} runs, median)")
        print(f"  bare docker run importing torch            {b:6.2f} s")
        print(f"  orch probe, whole                          {statistics.median(probe_times):6.2f} s")
        print(f"  orch probe minus the sample stage          {o:6.2f} s   ratio {o / b:4.2f}x  (target <= 1.5x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
