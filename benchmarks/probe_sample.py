"""`orch probe` against the bare sample run a person would type (PROCEDURE.md's by-hand `docker run`), in one run.

    .venv/bin/python benchmarks/probe_sample.py [--example minilm-embeddings] [--runs 5]

1. Copies the example to a work folder (as `dossier/`, the name PROCEDURE.md's block mounts from) and builds
   it once with `orch build --out OUT` (the image and its build.json: the inventory orch already took).
2. Alternates, `--runs` times each:
   - bare: the hand-over's by-hand `docker run` of the sample (stages/handover.py `_sample_run_by_hand`: the
     same mounts, environment, limits and isolation `orch probe` gives the sample), run through `sh`;
   - `orch probe dossier.yaml --out OUT`: the image stage reads build.json of the same image id, then the host
     stage, the device probe's container, the fingerprints, the sample's container, the output checks and
     the report (end to end, the CLI's start-up included);
   - `orch probe` into an empty `--out` (an image not built by this `--out`: the inventory is taken again).
3. Prints each side's median and the ratios to the bare run (issue 23's target: <= 1.25x).
The image is removed at the end (this run's label).
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
sys.path.insert(0, str(REPO))

from timing import labelled_images, timed  # noqa: E402 - the benchmarks folder is not a package

from orchestrator.dossier.load import load_dossier  # noqa: E402
from orchestrator.stages.handover import _sample_run_by_hand  # noqa: E402

ORCH = [sys.executable, "-m", "orchestrator"]
SESSION = f"bench-probe-sample-{os.getpid()}"
ENV = {**os.environ, "ORCH_LABELS": f"io.orch.session={SESSION}"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--example", default="minilm-embeddings")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="orch-bench-probe-sample-"))
    try:
        shutil.copytree(REPO / "examples" / args.example, work / "dossier")
        dossier = str(work / "dossier" / "dossier.yaml")
        out = work / "out"
        timed([*ORCH, "build", dossier, "--out", str(out)], env=ENV)
        image = json.loads((out / "build.json").read_text())["image"]["id"]
        script = "\n".join(_sample_run_by_hand(load_dossier(Path(dossier)), image))
        bare = ["sh", "-c", f"set -e\n{script}"]
        probe = [*ORCH, "probe", dossier, "--out", str(out)]
        fresh = [*ORCH, "probe", dossier, "--out", str(work / "fresh")]
        bare_env = {**ENV, "WORK": str(work)}
        # The by-hand block's paths are relative to the hand-over folder: run it from the work folder.
        os.chdir(work)
        timed(bare, env=bare_env)  # warm: the image's files in the page cache for every side alike
        times: dict[str, list[float]] = {"bare": [], "probe": [], "fresh": []}
        stages: list[str] = []
        for _ in range(args.runs):
            times["bare"].append(timed(bare, env=bare_env))
            times["probe"].append(timed(probe, env=ENV))
            report = json.loads((out / "report.json").read_text())
            stages.append(
                " ".join(f"{name} {stage.get('duration_s') or 0:.1f}" for name, stage in report["stages"].items())
            )
            shutil.rmtree(work / "fresh", ignore_errors=True)
            times["fresh"].append(timed(fresh, env=ENV))
        b = statistics.median(times["bare"])
        print(f"{args.example}: orch probe against the bare sample run ({args.runs} runs, median)")
        print(f"  bare docker run of the sample (PROCEDURE.md)   {b:6.2f} s   runs {_runs(times['bare'])}")
        for key, title in (("probe", "orch probe, build.json in --out"), ("fresh", "orch probe, empty --out")):
            median = statistics.median(times[key])
            print(f"  {title:<46} {median:6.2f} s   runs {_runs(times[key])}   ratio {median / b:4.2f}x")
        print(f"  orch probe's stages (report.json, each run): {' | '.join(stages)}")
        print("  target: <= 1.25x (issue 23)", flush=True)
    finally:
        os.chdir(REPO)
        ids = labelled_images(SESSION)
        subprocess.run(["docker", "rmi", "-f", *sorted(set(ids))], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)


def _runs(values: list[float]) -> str:
    return " ".join(f"{value:.2f}" for value in values)


if __name__ == "__main__":
    main()
