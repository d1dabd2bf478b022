"""orch build against plain `docker build` of the same rendered context, in the same run.

    .venv/bin/python benchmarks/build_overhead.py [--runs 5]

1. Renders examples/tiny-embeddings once (`orch render`), builds it with plain `docker build` (warm-up).
2. Warm rebuild, nothing changed: median of N `docker build` vs median of N `orch build` (end to end:
   load, render with wheel cache, normalised tar, build, inventory reuse, build.json). Target <= 1.2x.
3. Code-only change vs cold: `orch build` after editing the app vs `orch build --no-cache`.
Prints the ratios; record them in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
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
    work = Path(tempfile.mkdtemp(prefix="orch-bench-"))
    try:
        example = work / "tiny-embeddings"
        shutil.copytree(REPO / "examples" / "tiny-embeddings", example)
        dossier = str(example / "dossier.yaml")
        context = work / "context"
        timed([*ORCH, "render", dossier, "--out", str(context)])
        plain = ["docker", "build", "--quiet", "--network", "none", "--tag", "orch-bench/plain:latest", str(context)]
        orch = [*ORCH, "build", dossier, "--out", str(work / "out"), "--tag", "orch-bench/orch:latest"]
        timed(plain)
        timed(orch)

        docker_warm = [timed(plain) for _ in range(args.runs)]
        orch_warm = [timed(orch) for _ in range(args.runs)]

        cold = timed([*orch, "--no-cache"])
        embed = example / "app" / "embed.py"
        embed.write_text(embed.read_text() + "\n# a code-only change\n")
        code_change = timed(orch)

        d, o = statistics.median(docker_warm), statistics.median(orch_warm)
        print(f"warm rebuild, nothing changed ({args.runs} runs, median):")
        print(f"  docker build (same rendered context)   {d:6.2f} s")
        print(f"  orch build (end to end)                {o:6.2f} s   ratio {o / d:4.2f}x  (target <= 1.2x)")
        print("code-only change vs cold build (orch build):")
        print(f"  cold (--no-cache)                      {cold:6.2f} s")
        print(f"  after editing app/embed.py             {code_change:6.2f} s   ratio {code_change / cold:4.2f}x")
    finally:
        subprocess.run(
            ["docker", "rmi", "-f", "orch-bench/plain:latest", "orch-bench/orch:latest"],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
