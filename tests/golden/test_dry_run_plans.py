"""Golden files for the plan `orch rebuild --dry-run` prints for every example dossier.

The plan must not depend on the machine: the host's GPU facts are a fixed `HostFacts` (an NVIDIA runtime
and an AMD GPU both present, so each platform shows its mapping), the code's state is fixed (the
examples live in this repository, whose HEAD moves with every commit), no `ORCH_LABELS`, and the
dossier's folder and the output folder are shown as `<dossier>` and `<out>`.
`make golden` (pytest --update-golden) rewrites them after an intended change; review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.model.build_record import CodeRef
from orchestrator.model.host import AmdDriverFacts, AmdGpu, DockerGpuFacts, HostFacts, NvidiaDriverFacts, NvidiaGpu
from orchestrator.pipeline.dry_run import rebuild_text
from orchestrator.plan.build import default_tag
from orchestrator.plan.program import BuildOptionsPlan
from orchestrator.remote.cache import default_root
from tests.paths import EXAMPLES, GOLDEN

DOSSIERS = sorted(EXAMPLES.glob("*/dossier*.yaml"))
PLANS = GOLDEN / "plan"
OUT = Path("/nonexistent/orch-out")

HOST = HostFacts(
    kernel="6.1.0-fixed",
    nvidia=NvidiaDriverFacts(
        source="nvml",
        driver_version="580.65.06",
        cuda_driver_version="13.0",
        gpus=[NvidiaGpu(index=0, name="NVIDIA H100 80GB HBM3", compute_capability="9.0")],
    ),
    amd=AmdDriverFacts(source="sysfs", driver_version=None, gpus=[AmdGpu(node=1, gfx_target="gfx942")]),
    docker=DockerGpuFacts(runtimes=["nvidia", "runc"], nvidia_runtime=True),
    kfd_present=True,
    dri_render_nodes=["/dev/dri/renderD128"],
    video_gid=44,
    render_gid=993,
)


def _golden_name(path: Path) -> str:
    return f"{path.parent.name}--{path.stem}.plan.txt"


def dry_run_text(path: Path) -> str:
    loaded = load_dossier(path)
    code = CodeRef(
        kind="git-worktree",
        source=loaded.model.code.source,
        revision=None,
        dirty=False,
        dirty_diff_sha256=None,
        variant=None,
    )
    options = BuildOptionsPlan(out=OUT, tag=default_tag(loaded))
    aliases = {
        path.parent: "<dossier>",
        OUT: "<out>",
        OUT.with_name("orch-handover"): "<handover>",
        # The host's cache of remote items (the user's home, by default): the same plan for every user.
        default_root({}): "<sources cache>",
    }
    return rebuild_text(loaded, options, code, HOST, {}, handover=OUT.with_name("orch-handover"), aliases=aliases)


@pytest.mark.parametrize("path", DOSSIERS, ids=[_golden_name(p) for p in DOSSIERS])
def test_dry_run_plan_matches_golden(path: Path, request: pytest.FixtureRequest) -> None:
    text = dry_run_text(path)
    golden = PLANS / _golden_name(path)
    if request.config.getoption("--update-golden"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden.name}: run `make golden`"
    assert text == golden.read_text(), f"{golden.name} differs: run `make golden` and review the diff"


def test_the_plan_holds_no_host_path() -> None:
    """Every path is shown through an alias: the golden file is the same on every machine and checkout."""
    for path in DOSSIERS:
        text = dry_run_text(path)
        assert str(EXAMPLES.parent) not in text and str(OUT) not in text, path.name


def test_plan_golden_files_have_no_orphans() -> None:
    expected = {_golden_name(p) for p in DOSSIERS}
    present = {path.name for path in PLANS.glob("*.plan.txt")}
    assert present == expected, f"orphan or missing golden files: {present ^ expected}"
