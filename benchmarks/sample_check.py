"""Checking a sample's output on the host: numpy (after) against the pure-Python reader (before).

    .venv/bin/python benchmarks/sample_check.py [--rows 100000] [--dim 384] [--pairs 1000]
        [--before-rows 5000] [--before-pairs 50] [--before-timeout 300]

Writes a (rows x dim) float32 `embeddings.npy` and its reference (the output minus noise of 1e-4), with
`pairs` pairs of near-duplicate rows, then times reading the output through `read_output` (the untrusted
reader), the cosine and max_abs comparisons, and the nearest-neighbour agreement on the pairs. Each
measurement runs in a fresh interpreter: wall time of the checks (imports excluded) and peak RSS of that
process (`ru_maxrss`, imports included). "Before" is the code of commit 272adde
(`orchestrator/checks/arrays.py` and `sample.py`, taken with `git show` into a temporary package). Its
nearest neighbour is O(rows² · dim) in Python, hours at full size, so it is measured at full size for
cosine and max_abs only (if it ends within --before-timeout) and in full at --before-rows/--before-pairs,
next to "after" at that same size. Targets (issue 10): after, full size, ≤ 2 s and ≤ 2x the file's size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BEFORE_COMMIT = "272adde"

CHILD = """
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
package, folder, checks = sys.argv[2], Path(sys.argv[3]), sys.argv[4].split(",")
sample = __import__(package + ".sample", fromlist=["x"])
arrays = __import__(package + ".arrays", fromlist=["x"])
from orchestrator.dossier.models import (
    CosineComparison, LimitsSpec, MaxAbsComparison, NearestNeighbourCheck, OutputSpec)
why = "benchmark: stated before comparing"
output = OutputSpec(name="embeddings", file="embeddings.npy", format="npy")
cosine = CosineComparison(metric="cosine", min=0.999, reference="reference.npy", justification=why)
max_abs = MaxAbsComparison(metric="max_abs", max=1e-3, reference="reference.npy", justification=why)
ids = json.loads((folder / "ids.json").read_text())
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
array, _ = sample.read_output(folder, output, LimitsSpec(output_mib=4096))
reference = arrays.read_reference(folder / "reference.npy")
results = []
if "cosine" in checks:
    results.append(sample.compare("embeddings", array, reference, cosine, ids))
if "max_abs" in checks:
    results.append(sample.compare("embeddings", array, reference, max_abs, ids))
if "nn" in checks:
    rule = NearestNeighbourCheck(kind="nearest_neighbour", output="embeddings", pairs="pairs.json")
    results.append(sample.nearest_neighbour_check(rule, array, ids, folder / "pairs.json"))
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_kib": peak, "baseline_kib": baseline,
                  "checks": [[c.observed, c.passed] for c in results]}))
"""


WRITE = """
import json, sys
from pathlib import Path
import numpy as np
folder, rows, dim, pairs = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
folder.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(10)
reference = rng.standard_normal((rows, dim), dtype=np.float32)
# Pairs of near-duplicates (rows 2k and 2k+1): each the other's nearest row.
noise = 0.05 * rng.standard_normal((pairs, dim), dtype=np.float32)
reference[1 : 2 * pairs : 2] = reference[0 : 2 * pairs : 2] + noise
output = reference + np.float32(1e-4) * rng.standard_normal((rows, dim), dtype=np.float32)
np.save(folder / "reference.npy", reference)
np.save(folder / "embeddings.npy", output)
ids = [f"r{i}" for i in range(rows)]
(folder / "ids.json").write_text(json.dumps(ids))
(folder / "pairs.json").write_text(json.dumps([[ids[2 * k], ids[2 * k + 1]] for k in range(pairs)]))
"""


FLOOR = """
import sys, time
import numpy as np
output, pairs = np.load(sys.argv[1]), int(sys.argv[2])
queries = output[: 2 * pairs]
start = time.perf_counter()
for first in range(0, len(output), 2048):
    queries @ output[first : first + 2048].T
print(time.perf_counter() - start)
"""


def write_data(folder: Path, rows: int, dim: int, pairs: int) -> int:
    """The output, its reference, ids and pairs (written by a child: a forked measurement would inherit
    this process's peak RSS); returns the output's size in bytes."""
    subprocess.run([sys.executable, "-c", WRITE, str(folder), str(rows), str(dim), str(pairs)], check=True)
    return (folder / "embeddings.npy").stat().st_size


def before_package(work: Path) -> Path:
    """The pure-Python reader and checks of commit 272adde, as the importable package `orch_before`."""
    package = work / "before" / "orch_before"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in ("arrays", "sample"):
        source = subprocess.run(
            ["git", "show", f"{BEFORE_COMMIT}:orchestrator/checks/{name}.py"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (package / f"{name}.py").write_text(source.replace("orchestrator.checks.arrays", "orch_before.arrays"))
    return package.parent


def measure(path: Path, package: str, folder: Path, checks: str, timeout: float) -> dict[str, object] | None:
    command = [sys.executable, "-c", CHILD, str(path), package, str(folder), checks]
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        raise SystemExit(f"failed ({package}, {checks}):\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def row(label: str, size: int, result: dict[str, object] | None, timeout: float) -> str:
    if result is None:
        return f"| {label} | > {timeout:.0f} s (stopped) | - | - | - |"
    seconds, peak = float(str(result["seconds"])), int(str(result["peak_kib"])) * 1024
    growth = peak - int(str(result["baseline_kib"])) * 1024
    return f"| {label} | {seconds:.2f} s | {peak / 2**20:.0f} MiB | {growth / 2**20:.0f} MiB | {peak / size:.2f}x |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--before-rows", type=int, default=5000)
    parser.add_argument("--before-pairs", type=int, default=50)
    parser.add_argument("--before-timeout", type=float, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orch-bench-sample-") as temporary:
        work = Path(temporary)
        before = before_package(work)
        full, small = work / "full", work / "small"
        full_size = write_data(full, args.rows, args.dim, args.pairs)
        small_size = write_data(small, args.before_rows, args.dim, args.before_pairs)
        after_path = REPO
        runs = [
            (
                f"after, {args.rows}x{args.dim}, cosine + max_abs + NN ({args.pairs} pairs)",
                full_size,
                measure(after_path, "orchestrator.checks", full, "cosine,max_abs,nn", 600),
                600.0,
            ),
            (
                f"after, {args.rows}x{args.dim}, cosine + max_abs",
                full_size,
                measure(after_path, "orchestrator.checks", full, "cosine,max_abs", 600),
                600.0,
            ),
            (
                f"before, {args.rows}x{args.dim}, cosine + max_abs",
                full_size,
                measure(before, "orch_before", full, "cosine,max_abs", args.before_timeout),
                args.before_timeout,
            ),
            (
                f"after, {args.before_rows}x{args.dim}, cosine + max_abs + NN ({args.before_pairs} pairs)",
                small_size,
                measure(after_path, "orchestrator.checks", small, "cosine,max_abs,nn", 600),
                600.0,
            ),
            (
                f"before, {args.before_rows}x{args.dim}, cosine + max_abs + NN ({args.before_pairs} pairs)",
                small_size,
                measure(before, "orch_before", small, "cosine,max_abs,nn", args.before_timeout),
                args.before_timeout,
            ),
        ]
        floor = subprocess.run(
            [sys.executable, "-c", FLOOR, str(full / "embeddings.npy"), str(args.pairs)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    print(f"output: {full_size / 2**20:.1f} MiB at full size, {small_size / 2**20:.1f} MiB small")
    print("| run | wall time of the checks | peak RSS | of which the checks | peak RSS / file size |")
    print("| --- | --- | --- | --- | --- |")
    for label, size, result, timeout in runs:
        print(row(label, size, result, timeout))
    for (label_a, _, a, _), (label_b, _, b, _) in ((runs[1], runs[2]), (runs[3], runs[4])):
        if a is not None and b is not None:
            ratio = float(str(b["seconds"])) / float(str(a["seconds"]))
            memory = int(str(b["peak_kib"])) / int(str(a["peak_kib"]))
            print(f"before / after: {ratio:.0f}x the time, {memory:.2f}x the memory ({label_a} vs {label_b})")
    for label, _, result, _ in runs:
        if result is not None:
            print(f"{label}: {result['checks']}")
    after_full = runs[0][2]
    if after_full is not None:
        seconds, peak = float(str(after_full["seconds"])), int(str(after_full["peak_kib"])) * 1024
        print(
            f"targets: {seconds:.2f} s (≤ 2 s: {'met' if seconds <= 2 else 'not met'}), "
            f"{peak / full_size:.2f}x the file (≤ 2x: {'met' if peak <= 2 * full_size else 'not met'})"
        )
    print(
        f"floor: the bare float32 product of the {2 * args.pairs} queried rows with every row took {float(floor):.2f} s"
    )


if __name__ == "__main__":
    main()
