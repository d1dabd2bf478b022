"""orch build against plain `docker build` of the same rendered context, in the same run.

    .venv/bin/python benchmarks/build_overhead.py [--runs 5] [--example NAME ...] [--cold]

For each example (default: tiny-embeddings and minilm-embeddings):
1. `orch build` once (warm-up: layers, orch's rendered context in OUT/context, build.json), then plain
   `docker build --network none` of that same rendered context once.
2. Warm rebuild, nothing changed: N `docker build` and N `orch build` (end to end: load, render with the
   wheel cache, context digest, reuse of the image or build, inventory, build.json), alternately; medians
   and the ratio. Target <= 1.1x (issue 15).
3. `orch build` after a code-only change; with --cold, one `orch build --no-cache` too.
With --code-only N instead: N code-only rebuilds (one line appended to app/embed.py before each round) by
each builder, `--builder classic` and `--builder buildkit` alternately, each in its own --out and tag;
medians, the ratio BuildKit / classic, and each side's build and inventory seconds from build.json.
Prints the ratios; record them in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import labelled_images, timed  # noqa: E402 - the benchmarks folder is not a package

ORCH = [sys.executable, "-m", "orchestrator"]
#: Every layer of this run carries the label (ORCH_LABELS), so the run removes exactly what it made.
SESSION = f"bench-warm-{os.getpid()}"
ENV = {**os.environ, "ORCH_LABELS": f"io.orch.session={SESSION}"}


def bench(example_name: str, work: Path, runs: int, cold: bool) -> None:
    example = work / example_name
    shutil.copytree(REPO / "examples" / example_name, example)
    dossier = str(example / "dossier.yaml")
    out = work / f"out-{example_name}"
    orch = [*ORCH, "build", dossier, "--out", str(out), "--tag", f"orch-bench/{SESSION}:{example_name}"]
    timed(orch, env=ENV)  # first build: layers and orch's own context (out/context), inventory in build.json
    context = out / "context"
    plain = ["docker", "build", "--quiet", "--network", "none", "--tag", f"orch-bench/{SESSION}:plain", str(context)]
    timed(plain, env=ENV)

    # Alternate the two so that a burst of load from elsewhere hits both sides alike.
    docker_warm: list[float] = []
    orch_warm: list[float] = []
    for _ in range(runs):
        docker_warm.append(timed(plain, env=ENV))
        orch_warm.append(timed(orch, env=ENV))
    reused = json.loads((out / "build.json").read_text()).get("reused")
    d, o = statistics.median(docker_warm), statistics.median(orch_warm)
    print(f"{example_name}: warm rebuild, nothing changed ({runs} runs, median; orch reused the image: {reused}):")
    print(f"  docker build (orch's rendered context)  {d:6.2f} s   runs {' '.join(f'{t:.2f}' for t in docker_warm)}")
    print(
        f"  orch build (end to end)                 {o:6.2f} s   runs {' '.join(f'{t:.2f}' for t in orch_warm)}"
        f"   ratio {o / d:4.2f}x  (target <= 1.1x)",
        flush=True,
    )
    embed = example / "app" / "embed.py"
    embed.write_text(embed.read_text() + "\n# a code-only change\n")
    code_change = timed(orch, env=ENV)
    print(f"  orch build after editing app/embed.py   {code_change:6.2f} s")
    if cold:
        print(f"  orch build --no-cache                   {timed([*orch, '--no-cache'], env=ENV):6.2f} s", flush=True)


def code_only(example_name: str, work: Path, runs: int) -> None:
    example = work / f"code-only-{example_name}"
    shutil.copytree(REPO / "examples" / example_name, example)
    dossier = str(example / "dossier.yaml")

    def command(builder: str) -> list[str]:
        out = work / f"code-only-{example_name}-{builder}"
        tag = f"orch-bench/{SESSION}:{example_name}-{builder}"
        return [*ORCH, "build", dossier, "--out", str(out), "--tag", tag, "--builder", builder]

    builders = ("classic", "buildkit")
    for builder in builders:
        timed(command(builder), env=ENV)  # warm: the layers, the wheels image, orch's context
    times: dict[str, list[float]] = {builder: [] for builder in builders}
    parts: dict[str, list[str]] = {builder: [] for builder in builders}
    embed = example / "app" / "embed.py"
    for round_ in range(runs):
        embed.write_text(embed.read_text() + f"\n# a code-only change, round {round_}\n")
        for builder in builders:
            times[builder].append(timed(command(builder), env=ENV))
            durations = json.loads((work / f"code-only-{example_name}-{builder}" / "build.json").read_text())
            seconds = durations["durations_s"]
            parts[builder].append(f"build {seconds.get('build', 0):.1f} + inventory {seconds.get('inventory', 0):.1f}")
    print(f"{example_name}: code-only rebuild ({runs} rounds, median):")
    for builder in builders:
        print(
            f"  orch build --builder {builder:9} {statistics.median(times[builder]):6.2f} s   runs "
            f"{' '.join(f'{t:.2f}' for t in times[builder])}   ({'; '.join(parts[builder])})"
        )
    ratio = statistics.median(times["buildkit"]) / statistics.median(times["classic"])
    print(f"  ratio buildkit / classic {ratio:4.2f}x  (target <= 1.0x: no slower than the classic builder)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--example", action="append", help="Example folder name (repeatable).")
    parser.add_argument("--cold", action="store_true", help="Also time one orch build --no-cache.")
    parser.add_argument("--code-only", type=int, default=0, metavar="N", help="Only N code-only rounds per builder.")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="orch-bench-"))
    try:
        for name in args.example or ["tiny-embeddings", "minilm-embeddings"]:
            if args.code_only:
                code_only(name, work, args.code_only)
            else:
                bench(name, work, args.runs, args.cold)
    finally:
        ids = labelled_images(SESSION)
        tags = [
            f"orch-bench/{SESSION}:{name}"
            for name in [*(args.example or []), "tiny-embeddings", "minilm-embeddings", "plain"]
        ]
        tags += [f"orch-bench/{SESSION}:{name}-{b}" for name in args.example or [] for b in ("classic", "buildkit")]
        subprocess.run(["docker", "rmi", "-f", *tags, *sorted(set(ids))], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
