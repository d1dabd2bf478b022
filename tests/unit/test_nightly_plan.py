"""The nightly plan file: validation (one line, exit 2), paths, the matrix, the committed schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import EXIT_BAD_INPUT, PlanInvalid
from orchestrator.nightly.plan import expand_cells, load_plan, nightly_plan_json_schema
from tests.nightly_sample import TINY, two_target_plan, write_plan
from tests.paths import REPO


def test_a_plan_expands_to_dossiers_by_targets(tmp_path: Path) -> None:
    plan = load_plan(two_target_plan(tmp_path))
    cells = expand_cells(plan, tmp_path / "night")
    assert [cell.request.cell_id for cell in cells] == [
        "tiny-embeddings@gpu-a",
        "tiny-embeddings@gpu-b",
        "tiny-embeddings-cuda.cpu@gpu-a",
        "tiny-embeddings-cuda.cpu@gpu-b",
    ]
    first = cells[0].request
    assert first.cache == "cold" and first.timeout_s == 3600 and first.variant is None
    assert first.out == tmp_path / "night" / "tiny-embeddings@gpu-a"
    assert cells[2].request.variant == "cpu"
    # Relative paths resolve against the plan's folder, not the working directory.
    assert plan.history == tmp_path / "history"


def test_the_publish_sign_key_resolves_against_the_plan(tmp_path: Path) -> None:
    extra = "publish: {registry: 'reg.example.org:5000', repository: team/nightly, sign_key: keys/nightly_ed25519}\n"
    plan = load_plan(two_target_plan(tmp_path, extra=extra))
    assert plan.model.publish is not None and plan.model.publish.sign_key == tmp_path / "keys" / "nightly_ed25519"


def test_include_and_exclude_select_cells(tmp_path: Path) -> None:
    extra = """cells:
  include: [{target: gpu-a}, {dossier: tiny-embeddings-cuda.cpu}]
  exclude: [{dossier: tiny-embeddings-cuda, target: gpu-b}]
timeout_s: 60
"""
    cells = expand_cells(load_plan(two_target_plan(tmp_path, extra=extra)), tmp_path)
    assert [cell.request.cell_id for cell in cells] == ["tiny-embeddings@gpu-a", "tiny-embeddings-cuda.cpu@gpu-a"]
    assert {cell.request.timeout_s for cell in cells} == {60}


def test_relative_dossier_paths_resolve_against_the_plan(tmp_path: Path) -> None:
    folder = tmp_path / "plans"
    relative = Path("..") / Path(*([".."] * len(folder.parts[1:]))) / TINY.relative_to("/") / "dossier.yaml"
    plan = load_plan(
        write_plan(
            folder,
            f"nightly: 1\ndossiers: [{{path: {relative}, timeout_s: 99}}]\n"
            "targets: [{name: here, kind: docker}]\nhistory: ../h\n",
        )
    )
    (cell,) = expand_cells(plan, tmp_path)
    assert cell.request.dossier.resolve() == (TINY / "dossier.yaml").resolve()
    assert cell.request.timeout_s == 99
    assert plan.history == folder / ".." / "h"


BASE = "nightly: 1\ndossiers: [{{path: {dossier}}}]\ntargets: [{{name: a, kind: docker}}]\nhistory: h\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (BASE + "retention: 3\n", ":5 [retention]: unknown key 'retention'"),
        (
            "nightly: 1\ndossiers: [{{path: {dossier}}}]\ntargets: [{{name: a, kind: docker}}]\n",
            "required key 'history'",
        ),
        ("nightly: 2\n", ":1 [nightly]: the plan must start with `nightly: 1`"),
        (BASE.replace("kind: docker", "kind: k8s"), "[targets[0]]: `kind` must be `docker`, `podman` or `slurm`"),
        (BASE + "cache: lukewarm\n", "[cache]"),
        (
            BASE.replace(
                "targets: [{{name: a, kind: docker}}]",
                "targets: [{{name: a, kind: docker}}, {{name: a, kind: docker}}]",
            ),
            "target name 'a' is used twice",
        ),
        (BASE.replace("{{path: {dossier}}}", "{{path: {dossier}, variants: [nope]}}"), "declares no variant 'nope'"),
        (
            BASE.replace("{{path: {dossier}}}", "{{path: missing.yaml}}"),
            "[dossiers[0].path]: the dossier does not load",
        ),
        (BASE.replace("{{path: {dossier}}}", "{{path: {dossier}, reference: false}}"), "leaves nothing to rebuild"),
        (BASE + "cells: {{include: [{{target: zzz}}]}}\n", "[cells]: include/exclude leave no cell"),
        ("nightly: 1\na: &x 1\nb: *x\n", "anchors and aliases"),
    ],
)
def test_a_bad_plan_is_one_line_naming_file_and_field(tmp_path: Path, body: str, expected: str) -> None:
    file = write_plan(tmp_path, body.format(dossier=TINY / "dossier.yaml"))
    with pytest.raises(PlanInvalid) as caught:
        expand_cells(load_plan(file), tmp_path)
    message = caught.value.message
    assert message.startswith(str(file)), message
    assert expected in message, message
    assert "\n" not in message
    assert caught.value.exit_code == EXIT_BAD_INPUT


def test_bad_plan_exits_2_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = write_plan(tmp_path, "nightly: 1\ndossiers: []\ntargets: []\nhistory: h\n")
    with pytest.raises(SystemExit) as exited:
        main(["nightly", "run", str(file), "--dry-run"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "plan.yaml" in err and "[dossiers]" in err and "Traceback" not in err


def test_dry_run_prints_each_cell_and_where_it_goes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["nightly", "run", str(two_target_plan(tmp_path)), "--dry-run"])
    assert exited.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert lines[1].startswith("tiny-embeddings@gpu-b: ") and "docker tcp://127.0.0.1:23760" in lines[1]
    assert "--variant cpu" in lines[2] and "cache cold" in lines[2]
    assert not (tmp_path / "history").exists(), "a dry run writes nothing"


def test_plan_schema_is_committed_and_current() -> None:
    committed = REPO / "docs" / "nightly-plan-schema.json"
    assert json.loads(committed.read_text()) == nightly_plan_json_schema(), (
        "run `orch nightly schema --out docs/nightly-plan-schema.json`"
    )
    schema = nightly_plan_json_schema()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"nightly", "dossiers", "targets", "history"}


HOSTILE_TARGET = "nightly: 1\ndossiers: [{{path: {dossier}}}]\ntargets: [{target}]\nhistory: h\n"


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ("{name: a, kind: docker, docker_host: 'tcp://127.0.0.1:1;touch x'}", "docker_host"),
        ("{name: a, kind: docker, docker_host: 'ssh://-oProxyCommand=touch%20x@host'}", "docker_host"),
        ("{name: a, kind: docker, docker_host: 'ssh://user@-oProxyCommand=x'}", "docker_host"),
        ("{name: a, kind: docker, docker_host: 'tcp://host:99999'}", "docker_host"),
        ("{name: a, kind: docker, docker_host: 'http://host:2375'}", "docker_host"),
        ("{name: a, kind: docker, docker_host: 'unix:///run/docker.sock $(id)'}", "docker_host"),
        ("{name: a, kind: docker, context: '-oProxyCommand=x'}", "context"),
        ("{name: a, kind: slurm, partition: 'gpu$(touch x)', shared_dir: s}", "partition"),
        ("{name: a, kind: podman, podman_host: 'ssh://-oProxyCommand=x/run/p.sock'}", "podman_host"),
        ("{name: a, kind: podman, podman_host: 'ssh://ops@gpu-a'}", "podman_host"),
        ("{name: a, kind: podman, podman_host: 'tcp://gpu-a:8080'}", "podman_host"),
        ("{name: a, kind: podman, podman_host: 'ssh://ops@gpu-a/run/p.sock;id'}", "podman_host"),
        ('{name: a, kind: slurm, partition: "gpu\\n#SBATCH --wrap=x", shared_dir: s}', "partition"),
        ("{name: a, kind: slurm, partition: gpu, shared_dir: s, sbatch_args: ['--wrap=touch x']}", "sbatch_args"),
        (
            '{name: a, kind: slurm, partition: gpu, shared_dir: s, sbatch_args: ["--qos=a\\n#SBATCH --x"]}',
            "sbatch_args",
        ),
        ("{name: a, kind: slurm, partition: gpu, shared_dir: s, sbatch_args: ['-A x']}", "sbatch_args"),
    ],
)
def test_an_endpoint_or_slurm_value_that_could_inject_is_refused(tmp_path: Path, target: str, field: str) -> None:
    """Issue 25, point 10: values that reach an ssh command line or a job script are checked by their syntax."""
    file = write_plan(tmp_path, HOSTILE_TARGET.format(dossier=TINY / "dossier.yaml", target=target))
    with pytest.raises(PlanInvalid) as caught:
        load_plan(file)
    assert f"[targets[0].{field}" in caught.value.message, caught.value.message
    assert "\n" not in caught.value.message and caught.value.exit_code == EXIT_BAD_INPUT


@pytest.mark.parametrize(
    "target",
    [
        "{name: a, kind: docker, docker_host: 'tcp://gpu-01.lab.example:2376'}",
        "{name: a, kind: docker, docker_host: 'ssh://ops@10.0.0.7:2222'}",
        "{name: a, kind: docker, docker_host: 'tcp://[fd00::1]:2376'}",
        "{name: a, kind: docker, docker_host: 'unix:///var/run/docker.sock'}",
        "{name: a, kind: slurm, partition: gpu-a100.q, shared_dir: s, sbatch_args: ['--account=ml', '--qos=night']}",
        "{name: a, kind: podman}",
        "{name: a, kind: podman, podman_host: 'unix:///run/user/1000/podman/podman.sock'}",
        "{name: a, kind: podman, podman_host: 'ssh://ops@gpu-01.lab.example:2222/run/user/1000/podman/podman.sock'}",
    ],
)
def test_real_endpoints_and_slurm_values_still_load(tmp_path: Path, target: str) -> None:
    file = write_plan(tmp_path, HOSTILE_TARGET.format(dossier=TINY / "dossier.yaml", target=target))
    assert load_plan(file).model.targets[0].name == "a"


@pytest.mark.parametrize("history", ["/", "/etc", "/usr", "/var/lib", "/tmp"])
def test_a_system_folder_as_history_is_refused(tmp_path: Path, history: str) -> None:
    file = write_plan(tmp_path, BASE.format(dossier=TINY / "dossier.yaml").replace("history: h", f"history: {history}"))
    with pytest.raises(PlanInvalid, match=r"\[history\]: .* is a system folder"):
        load_plan(file)


def test_a_history_folder_holding_other_things_is_refused(tmp_path: Path) -> None:
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "thesis.tex").write_text("not a night")
    file = write_plan(tmp_path, BASE.format(dossier=TINY / "dossier.yaml"))
    with pytest.raises(PlanInvalid, match=r"\[history\]: .*holds 'thesis.tex', which is not part of an orch history"):
        load_plan(file)
    (tmp_path / "h" / "thesis.tex").unlink()
    (tmp_path / "h" / "nights").mkdir()
    assert load_plan(file).history == (tmp_path / "h").resolve() or load_plan(file).history.name == "h"


def test_publishing_from_a_podman_target_over_ssh_is_refused_when_the_plan_loads(tmp_path: Path) -> None:
    target = "{name: pod, kind: podman, podman_host: 'ssh://ops@gpu-a/run/user/1000/podman/podman.sock'}"
    body = HOSTILE_TARGET.format(dossier=TINY / "dossier.yaml", target=target)
    file = write_plan(tmp_path, body + "publish: {registry: 'reg.example.org:5000', repository: team/nightly}\n")
    with pytest.raises(PlanInvalid, match="publishes from a Podman target on this machine"):
        load_plan(file)
    assert load_plan(write_plan(tmp_path, body)).model.targets[0].kind == "podman", "without publish it loads"
