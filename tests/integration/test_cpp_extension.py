"""examples/cpp-extension for real: a C++ torch operator built in the builder stage, only its artefact
shipped, its toolchain read back from the object, its absence or change caught, and a toolchain change
rebuilding from the toolchain step on."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from orchestrator.engine import BuildRequest, Engine, RunSpec
from orchestrator.errors import EXIT_BAD_INPUT, BadInput
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.environment import ENVIRONMENT_FILE
from orchestrator.report.write import read_report
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build_context import context_tar
from orchestrator.stages.debhouse import STEP, collect_debs
from tests.integration.helpers import SESSION_TAG_NAMESPACE, orch
from tests.paths import EXAMPLES

EXAMPLE = EXAMPLES / "cpp-extension"
CHECK = "extension gate_ext in the image"
LINE = "extension gate_ext: gate matches gate_reference:gate"
RECORD = "/opt/orch/ext/orch-extensions.json"


def _read_build(out: Path) -> BuildRecord:
    return BuildRecord.model_validate_json((out / "build.json").read_text())


@pytest.fixture(scope="module")
def rebuilt(engine: Engine, base_image: BaseOutcome, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cpp-extension") / "out"
    # Warm: the venv layers are the session's tiny-embeddings ones (the same lock and steps); the toolchain
    # and the compile run here. test_a_second_compile_gives_one_environment compiles once more.
    result = orch("rebuild", str(EXAMPLE / "dossier.yaml"), "--out", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def test_a_second_compile_gives_one_environment(rebuilt: Path, tmp_path: Path) -> None:
    """Issue 15 for this CPU example: the venv, the app and the compiled object (/opt/orch/ext, one of the
    digest's roots) come out byte for byte the same from two builds, gcc's output included.

    Issue 22: no second cold build. The venv is tiny-embeddings' (same lock, same steps: its cold pair in
    test_environment_equivalence.py); what is this example's own is the compile, so only the compile runs
    again: MAX_JOBS changed (a build setting that does not reach the object) invalidates the compile step
    and nothing above it."""
    example = tmp_path / "cpp-extension"
    shutil.copytree(EXAMPLE, example)
    dossier = example / "dossier.yaml"
    text = dossier.read_text()
    assert 'MAX_JOBS: "2"' in text
    dossier.write_text(text.replace('MAX_JOBS: "2"', 'MAX_JOBS: "1"'))
    again = orch("build", str(dossier), "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    log = (tmp_path / "again" / "build.log").read_text()
    steps = re.split(r"(?m)^Step (\d+)/\d+ : ", log)[1:]
    bodies = dict(zip((int(n) for n in steps[::2]), steps[1::2], strict=True))
    compile_step = next(n for n, body in bodies.items() if "build_extensions.py /tmp/orch/extensions.json" in body)
    assert "---> Using cache" not in bodies[compile_step], "the compile ran again"
    assert all("---> Using cache" in bodies[n] for n in bodies if 2 < n < compile_step and bodies[n].startswith("RUN"))
    first, second = _read_build(rebuilt), _read_build(tmp_path / "again")
    assert not second.reused
    assert first.inventory is not None and second.inventory is not None
    assert first.inventory.extensions is not None and second.inventory.extensions is not None
    assert [a.sha256 for a in first.inventory.extensions.artefacts] == [
        a.sha256 for a in second.inventory.extensions.artefacts
    ], "two compiles of one source gave two objects"
    # Every installed file the same (venv, app, the object), but the extensions' record: it lists the build
    # settings the dossier asked (`requested.env`), MAX_JOBS among them, so it names the change made here.
    one, two = _listed_files(rebuilt), _listed_files(tmp_path / "again")
    assert len(one) > 1000 and one.keys() == two.keys()
    assert [path for path in one if one[path] != two[path]] == [RECORD], "two builds installed different files"


def test_the_classic_builder_compiles_the_same_object_into_the_same_environment(rebuilt: Path, tmp_path: Path) -> None:
    """Issue 23: BuildKit (the module's build) and the classic builder (its wheel feed and its own builder
    stage) install one environment for this example, the compiled object included: the two templates' compile
    steps must not differ in anything that reaches the object (paths, flags, the toolchain)."""
    classic = tmp_path / "classic"
    result = orch(
        "build",
        str(EXAMPLE / "dossier.yaml"),
        "--out",
        str(classic),
        "--builder",
        "classic",
        "--tag",
        f"{SESSION_TAG_NAMESPACE}/cpp-extension:classic",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    first, second = _read_build(rebuilt), _read_build(classic)
    assert (first.context.builder, second.context.builder) == ("buildkit", "classic")
    assert first.inventory is not None and second.inventory is not None
    assert first.inventory.environment is not None and second.inventory.environment is not None
    one, two = _listed_files(rebuilt), _listed_files(classic)
    assert len(one) > 1000 and one.keys() == two.keys()
    assert [path for path in one if one[path] != two[path]] == [], "the two builders installed different files"
    assert second.inventory.environment.digest == first.inventory.environment.digest


def _listed_files(out: Path) -> dict[str, str]:
    listed: dict[str, str] = json.loads((out / ENVIRONMENT_FILE).read_text())["files"]
    return listed


def test_the_example_passes_four_stages_and_records_its_toolchain(rebuilt: Path) -> None:
    report = read_report(rebuilt / "report.json")
    assert [stage.status for stage in report.stages.values()] == ["passed"] * 4
    (line,) = [check for check in report.stage("image").checks if check.name == CHECK]
    assert line.passed and line.detail is not None and "GCC: (Debian 12." in line.detail
    inventory = _read_build(rebuilt).inventory
    assert inventory is not None and inventory.extensions is not None
    assert (inventory.extensions.toolchain["gcc"] or "").startswith("gcc-12 (Debian 12.")
    (artefact,) = inventory.extensions.artefacts
    assert artefact.sha256 == artefact.recorded_sha256 and artefact.file.startswith("gate_ext.")
    device = report.stage("device").checks
    names = [check.name for check in device]
    # its own line, after the minimal compute (matmul, conv2d) and passed
    assert names[-1] == LINE and any(name.startswith("conv2d") for name in names[:-1])
    assert device[-1].passed and device[-1].observed.endswith("on cpu")
    markdown = (rebuilt / "report.md").read_text()
    # Markdown escapes the underscore: the report names the extension in both stages' lines
    assert "extension gate\\_ext in the image" in markdown and "extension gate\\_ext: gate matches" in markdown


def test_the_toolchain_came_from_the_context_and_the_build_ran_offline(rebuilt: Path) -> None:
    context = _read_build(rebuilt).context
    assert context.install_mode == "wheelhouse" and context.network == "none"
    packages = {deb.package: deb for deb in context.debs}
    assert {"g++-12", "gcc-12", "python3.11-dev"} <= set(packages), sorted(packages)
    assert packages["g++-12"].version.startswith("12.") and packages["g++-12"].file.startswith("g++-12_")
    assert all(len(deb.sha256) == 64 for deb in context.debs)
    files = sorted(path.name for path in (rebuilt / "context" / "toolchain-debs").iterdir())
    assert files == sorted(deb.file for deb in context.debs)


def test_a_package_the_base_archive_lacks_is_one_clear_error(
    engine: Engine, base_image: BaseOutcome, tmp_path: Path, no_leftover_containers: None
) -> None:
    with pytest.raises(BadInput) as raised:
        collect_debs(engine, base_image.image_id, ("orch-no-such-package",), tmp_path / "debs", cache=tmp_path / "c")
    message = str(raised.value)
    assert message.startswith(STEP) and "no package orch-no-such-package" in message, message
    assert raised.value.exit_code == EXIT_BAD_INPUT
    assert not (tmp_path / "c" / "debs").exists() or not any((tmp_path / "c" / "debs").iterdir())


def test_the_runtime_image_contains_no_compiler(engine: Engine, rebuilt: Path) -> None:
    record = _read_build(rebuilt)
    assert record.image is not None
    probe = (
        "for c in gcc g++ cc c++ gcc-12 g++-12 cpp-12 nvcc; do command -v $c; done; ls /usr/lib/gcc 2>/dev/null; true"
    )
    result = engine.run(RunSpec(image=record.image.id, command=["sh", "-c", probe], timeout_s=60))
    assert result.exit_code == 0 and result.stdout.strip() == "", result.stdout
    listing = engine.run(RunSpec(image=record.image.id, command=["ls", "/opt/orch/ext", "/tmp/orch"], timeout_s=60))
    assert "gate_ext." in listing.stdout and "orch-extensions.json" in listing.stdout
    assert "No such file" in listing.stderr  # no sources, no build script, no wheels


def test_removing_the_built_object_fails_exactly_the_extension_line(
    engine: Engine, rebuilt: Path, tmp_path: Path
) -> None:
    record = _read_build(rebuilt)
    assert record.image is not None
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {record.image.id}\nUSER root\nRUN rm /opt/orch/ext/gate_ext.*.so\nUSER 10001:10001\n"
    )
    tag = f"{SESSION_TAG_NAMESPACE}/cpp-extension:no-so"
    tar = context_tar(context)
    with tar.file:
        outcome = engine.build(BuildRequest(tar.file, tag, network="none"))
    assert outcome.image_id is not None, outcome.log[-2000:]
    result = orch("probe", str(EXAMPLE / "dossier.yaml"), "--image", tag, "--out", str(tmp_path / "out"))
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    report = read_report(tmp_path / "out" / "report.json")
    failed = [check for check in report.stage("image").checks if not check.passed]
    assert [check.name for check in failed] == [CHECK]
    assert failed[0].observed == "missing"
    failed = [check for check in report.stage("device").checks if not check.passed]
    assert [check.name for check in failed] == [LINE]
    assert failed[0].observed.startswith("gate_ext: import: ModuleNotFoundError")


@pytest.mark.slow
def test_a_toolchain_change_rebuilds_from_the_toolchain_step_and_is_read_from_the_object(
    engine: Engine, rebuilt: Path, tmp_path: Path
) -> None:
    example = tmp_path / "cpp-extension"
    shutil.copytree(EXAMPLE, example)
    dossier = example / "dossier.yaml"
    dossier.write_text(dossier.read_text().replace('gcc: "12"', 'gcc: "11"'))
    result = orch("build", str(dossier), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = (tmp_path / "out" / "build.log").read_text()
    # Each step by its instruction (BuildKit numbers each stage's steps on their own and may run the two
    # stages side by side, so a step's number is not its place): was it taken from the cache?
    cached: dict[str, bool] = {}
    for block in re.split(r"(?m)^Step \d+/\d+ : ", log)[1:]:
        instruction, _, body = block.partition("\n")
        cached[instruction] = cached.get(instruction, False) or body.lstrip().startswith("---> Using cache")
    # The toolchain step copies the collected .deb files (g++-11's now): a changed context from here on; the
    # venv installed above it in the builder stage comes from the cache.
    toolchain = [step for step in cached if "toolchain-debs" in step]
    venv = [step for step in cached if step.startswith("RUN") and "requirements.lock" in step]
    assert toolchain and not any(cached[step] for step in toolchain), cached
    assert venv and all(cached[step] for step in venv), cached
    inventory = _read_build(tmp_path / "out").inventory
    assert inventory is not None and inventory.extensions is not None
    (artefact,) = inventory.extensions.artefacts
    assert any(comment.startswith("GCC: (Debian 11.") for comment in artefact.compilers), artefact.compilers


@pytest.mark.slow
def test_a_changed_kernel_line_fails_exactly_the_extension_check(engine: Engine, rebuilt: Path, tmp_path: Path) -> None:
    example = tmp_path / "cpp-extension"
    shutil.copytree(EXAMPLE, example)
    kernel = example / "app" / "csrc" / "gate.cpp"
    kernel.write_text(kernel.read_text().replace("std::exp(-gs[i])", "std::exp(gs[i])"))
    result = orch("rebuild", str(example / "dossier.yaml"), "--out", str(tmp_path / "out"))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    report = read_report(tmp_path / "out" / "report.json")
    assert report.stage("image").status == "passed"
    failed = [check for check in report.stage("device").checks if not check.passed]
    assert [check.name for check in failed] == [LINE]
    assert "gate_ext" in (tmp_path / "out" / "report.md").read_text()
