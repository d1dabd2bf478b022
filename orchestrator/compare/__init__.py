"""`orch compare A B`: what differs between two runs, layer by layer, and whether the difference was meant.

A is the reference, B the rebuild. Each side is a `report.json` (format `orch.report/1`), a `build.json`
(format `orch.build/1`), or a folder holding either or both (the output folder of `orch rebuild` holds
both). The comparison (format `orch.compare/1`, a frozen value; fields are only ever added within a
format version) has five parts, in the order of the chain:

- **dossier**: name, identity and variant of each side;
- **packages**: `pip freeze` of A against B (`inventory.diff_inventories`, A as the reference), from
  the build records' inventories, else from a report's image facts when they list the packages;
- **system**: platform, Python, torch and its CUDA/HIP build flags, the CUDA toolkit and ROCm the image
  carries, the host's NVIDIA and AMD drivers, the devices torch saw (count and names), the host's CPU
  (model and ISA flags) and torch's CPU capability;
- **stages**: the four stages' status on each side;
- **numbers**: every check of the sample stage found on both sides (matched by name; a comparison
  with the reference is matched by its output name, so a variant with another metric still lines up)
  and the device's compute checks (matmul, conv2d against float64): observed on each side, B's
  expectation (the tolerance it was judged by), and whether each side held.

Each row has a verdict:

- `same`: equal on both sides;
- `within_tolerance`: the check held on both sides with different observed values ("same within
  tolerance": B's own tolerance, which is the variant's when B is a variant);
- `intended`: a difference a declared variant explains (see below), shown with the variant's name and
  description, never as a regression;
- `improved`: failed (or did not pass) in A, holds in B;
- `host`: a fact of the machine that ran the probes differs (its NVIDIA or AMD driver, its ROCm, the
  devices torch saw, its CPU and torch's CPU capability): the dossier does not fix the host, and a rebuild is expected to run on another
  machine, so the row is shown and does not count against B. Whether it matters is what the stages and
  numbers say (a GPU that B cannot see fails B's device stage: a `regression`). Added in orch 0.1 within
  `orch.compare/1`; a reader that does not know it should treat it like `intended`;
- `changed`: an unintended difference in what was built, where it ran, or what was checked;
- `regression`: something that held in A does not in B (a stage, a check, a number out of tolerance).

**Variants.** A difference is intended only when the two sides are the same dossier (same name) and
their variants differ, and every variant involved is *declared*: `read.load_side` reads the dossier at the
recorded `dossier.path` (its own fields only, `dossier.load.read_declaration`) and looks the variant up in its `variants`. When that file is gone or cannot be
read, a recorded variant name still counts as declared (`orch` refuses an undeclared `--variant`, so a
report only ever records declared ones) and its description is unknown. A dossier that can be read and
no longer declares the variant makes its differences unintended. When the dossier could be read, only
the sections the variant replaces are excused: `system` excuses platform, CUDA/ROCm, drivers and
devices; `python` excuses packages and the torch version; either excuses Python and torch's CUDA/HIP
build; `compare` excuses a sample comparison check present on one side only. When it could not be read,
all of them are excused. Numbers are never excused: they must hold against B's own tolerance. The two
identities always differ between a reference and its variant (the variant is part of the identity):
that is expected and shown as intended.

**Verdict.** `regressed` when any row is `changed` or `regression`; `identical` when every row is `same`;
`equivalent` otherwise (only intended differences, improvements, host differences, numbers within
tolerance).
`unintended` lists every `regression` row first (stages, then numbers), then every `changed` row
(packages, system, stages, numbers, dossier), one line each: its first line is what `orch compare`
names when it exits 1. What could not be compared (no inventory on a side, a stage that did not run)
is listed in `not_compared` and does not change the verdict.

Pure apart from reading the given files and the dossier: no Docker, no network, no clock.

The modules, by job: `read` loads the two sides (report, build record, the variant's declaration) and
gives their typed facts; `diff` makes the dossier, package and system rows; `layers` the stage and
number rows (`compare_layers`, which `orch verify` uses too, so a replay and `orch compare` can never
judge a layer differently); `verdict` turns the rows into the overall verdict and the `unintended`
lines. The result's shape is `orchestrator.model.comparison`; its Markdown is
`orchestrator.report.compare_markdown`.
"""
