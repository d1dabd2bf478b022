"""`orch compare`: packages, system facts, stages and numbers of two runs, and what a declared variant excuses."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.cli.compare_view import print_compare
from orchestrator.cli.main import main
from orchestrator.compare.read import Side, load_side, resolve_variant
from orchestrator.compare.verdict import compare_sides
from orchestrator.errors import BadInput
from orchestrator.model.comparison import Comparison
from orchestrator.model.inventory import PackageChange
from orchestrator.report.compare_markdown import render_compare_markdown
from tests.compare_sample import (
    CPU_FREEZE,
    Run,
    cpu_variant_of_cuda,
    cuda_reference,
    make_record,
    make_report,
    write_run,
)


def side(run: Run, *, report: bool = True, record: bool = True) -> Side:
    """A side as `load_side` would read it from an `orch rebuild` folder, variant looked up in the dossier."""
    made = Side(
        path=Path(f"/runs/{run.identity[:8]}"),
        report=make_report(run) if report else None,
        record=make_record(run) if record else None,
        environment_files=dict(run.environment),
    )
    if run.variant is None:
        return made
    return replace(made, variant=resolve_variant(run.variant, str(run.dossier)))


def with_numpy(version: str) -> Run:
    return replace(Run(), freeze=tuple(f"numpy=={version}" if p.startswith("numpy==") else p for p in CPU_FREEZE))


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
    captured = capsys.readouterr()
    code = exited.value.code
    assert isinstance(code, int)
    return code, captured.out, captured.err


def not_same(comparison: Comparison) -> list[str]:
    rows = [*comparison.dossier, *comparison.system]
    return [row.field for row in rows if row.verdict != "same"]


# --- one package changed ----------------------------------------------------------------------------------


def test_a_rebuild_with_one_package_changed_names_exactly_that_package() -> None:
    comparison = compare_sides(side(Run()), side(with_numpy("2.4.5")))

    assert comparison.packages is not None
    assert comparison.packages.changed == [PackageChange(name="numpy", reference="2.4.6", observed="2.4.5")]
    assert comparison.packages.added == [] and comparison.packages.removed == []
    assert comparison.packages_verdict == "changed"
    assert not_same(comparison) == []  # nothing else differs: no system fact, no identity
    assert all(stage.verdict == "same" for stage in comparison.stages)
    assert comparison.verdict == "regressed"
    assert comparison.unintended == ["package numpy changed: 2.4.6 → 2.4.5"]


def test_the_cli_names_the_package_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_run(Run(), tmp_path / "reference")
    b = write_run(with_numpy("2.4.5"), tmp_path / "rebuild")
    markdown = tmp_path / "out" / "compare.md"

    code, out, err = run_cli(["compare", str(a), str(b), "--markdown", str(markdown)], capsys)

    assert code == 1
    assert err.strip().splitlines() == [
        "error[verdict-failed]: B regressed against A: package numpy changed: 2.4.6 → 2.4.5"
    ]
    assert "numpy" in out and "2.4.6" in out and "2.4.5" in out
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith("# orch compare: regressed")
    assert "| `numpy` | `2.4.6` | `2.4.5` |" in text
    assert not list(markdown.parent.glob(".*.tmp"))  # written atomically, nothing left behind


def test_json_output_is_the_versioned_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_run(Run(), tmp_path / "reference")
    b = write_run(with_numpy("2.4.5"), tmp_path / "rebuild")

    code, out, _ = run_cli(["compare", "--json", str(a), str(b)], capsys)

    assert code == 1
    document = json.loads(out)
    assert document["format"] == "orch.compare/1"
    assert document["verdict"] == "regressed"
    assert document["packages"]["changed"] == [{"name": "numpy", "reference": "2.4.6", "observed": "2.4.5"}]
    assert document["packages"]["reference_file"] == str(a / "build.json")
    assert Comparison.model_validate_json(out).packages == compare_sides(load_side(a), load_side(b)).packages


# --- a declared variant -------------------------------------------------------------------------------------


def test_cpu_variant_against_the_cuda_reference_is_intended() -> None:
    comparison = compare_sides(side(cuda_reference()), side(cpu_variant_of_cuda()))

    assert comparison.verdict == "equivalent"
    assert comparison.unintended == []
    assert comparison.intent is not None
    assert comparison.intent.startswith("variant cpu: The same app on the CPU build of torch")
    assert comparison.b.variant is not None and comparison.b.variant.overrides == ["system", "python"]
    rows = {row.field: row for row in [*comparison.dossier, *comparison.system]}
    for field in (
        "platform",
        "torch",
        "torch.version.cuda",
        "CUDA toolkit (image)",
        "host NVIDIA driver",
        "devices",
        "identity",
    ):
        assert rows[field].verdict == "intended", field
        assert rows[field].note is not None and rows[field].note.startswith("variant cpu: The same app"), field
    assert (rows["platform"].a, rows["platform"].b) == ("cuda 12.4", "cpu")
    assert (rows["torch"].a, rows["torch"].b) == ("2.6.0+cu124", "2.13.0+cpu")
    assert (rows["torch.version.cuda"].a, rows["torch.version.cuda"].b) == ("12.4", "none")
    assert rows["dossier"].verdict == "same"
    assert rows["identity"].note is not None and "its own identity" in rows["identity"].note
    assert comparison.packages_verdict == "intended"
    # numbers are never excused: they hold against B's own tolerance, so they are the same within it
    cosine = next(n for n in comparison.numbers if "cosine" in n.name)
    assert cosine.verdict == "within_tolerance" and cosine.a_passed and cosine.b_passed
    assert cosine.expected == "cosine ≥ 0.9999 for every row"
    compute = [n for n in comparison.numbers if n.stage == "device"]
    assert [n.name for n in compute] == ["matmul vs float64", "conv2d vs float64"]
    assert all(n.verdict == "within_tolerance" for n in compute)
    assert "on cuda:0" in (compute[0].a_observed or "") and "on cpu" in (compute[0].b_observed or "")


def test_the_cli_shows_the_variant_as_intended_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_run(cuda_reference(), tmp_path / "cuda")
    b = write_run(cpu_variant_of_cuda(), tmp_path / "cpu")
    markdown = tmp_path / "compare.md"

    code, out, err = run_cli(["compare", str(a), str(b), "--markdown", str(markdown)], capsys)

    assert (code, err) == (0, "")
    assert "equivalent" in out and "intended (variant cpu: The same app" in out
    text = markdown.read_text(encoding="utf-8")
    assert "# orch compare: equivalent" in text
    assert "intended (variant cpu: The same app on the CPU build of torch" in text


def test_a_variant_whose_dossier_is_gone_still_counts_as_declared(tmp_path: Path) -> None:
    gone = tmp_path / "moved-away" / "dossier-cuda.yaml"
    a = side(replace(cuda_reference(), dossier=gone))
    b = side(replace(cpu_variant_of_cuda(), dossier=gone))

    comparison = compare_sides(a, b)

    assert comparison.verdict == "equivalent"
    assert comparison.b.variant is not None
    assert comparison.b.variant.declared and comparison.b.variant.description is None
    assert "not readable" in comparison.b.variant.source
    assert comparison.intent is not None and comparison.intent.startswith("variant cpu: (description unknown")
    assert {row.field: row.verdict for row in comparison.system}["platform"] == "intended"


def test_a_variant_the_dossier_does_not_declare_is_a_regression() -> None:
    undeclared = replace(cpu_variant_of_cuda(), variant="laptop")

    comparison = compare_sides(side(cuda_reference()), side(undeclared))

    assert comparison.verdict == "regressed"
    assert comparison.intent is None
    assert comparison.b.variant is not None and not comparison.b.variant.declared
    assert any("variant laptop is not declared" in note for note in comparison.notes)
    assert {row.field: row.verdict for row in comparison.system}["platform"] == "changed"


def test_the_reference_against_its_variant_works_both_ways() -> None:
    comparison = compare_sides(side(cpu_variant_of_cuda()), side(cuda_reference()))
    assert comparison.verdict == "equivalent"
    assert comparison.intent is not None and comparison.intent.startswith("variant cpu:")


# --- numbers and stages -------------------------------------------------------------------------------------


def test_a_sample_number_outside_tolerance_is_a_regression() -> None:
    worse = replace(Run(), cosine=0.93)

    comparison = compare_sides(side(Run()), side(worse))

    cosine = next(n for n in comparison.numbers if "cosine" in n.name)
    assert (cosine.a_passed, cosine.b_passed, cosine.verdict) == (True, False, "regression")
    assert cosine.b_observed == "min cosine = 0.93 (row 'q-07')"
    assert cosine.expected == "cosine ≥ 0.99999 for every row"
    sample = next(s for s in comparison.stages if s.stage == "sample")
    assert (sample.a, sample.b, sample.verdict) == ("passed", "failed", "regression")
    assert comparison.verdict == "regressed"
    assert comparison.unintended[0].startswith("sample stage passed in A, failed in B")
    assert comparison.unintended[1].startswith("sample check 'embeddings: cosine vs reference/embeddings.npy'")


def test_a_variant_does_not_excuse_a_number_outside_its_tolerance() -> None:
    comparison = compare_sides(side(cuda_reference()), side(replace(cpu_variant_of_cuda(), cosine=0.5)))
    assert comparison.verdict == "regressed"
    assert next(n for n in comparison.numbers if "cosine" in n.name).verdict == "regression"


def test_numbers_that_differ_within_tolerance_are_equivalent() -> None:
    comparison = compare_sides(side(Run()), side(replace(Run(), cosine=0.999995, matmul_diff=2.2e-05)))
    assert comparison.verdict == "equivalent"
    verdicts = {n.name: n.verdict for n in comparison.numbers}
    assert verdicts["embeddings: cosine vs reference/embeddings.npy"] == "within_tolerance"
    assert verdicts["matmul vs float64"] == "within_tolerance"
    assert verdicts["embeddings: shape"] == "same"


def test_a_stage_that_now_passes_is_an_improvement() -> None:
    broken = make_report(Run())
    device = broken.stages["device"].model_copy(update={"status": "failed", "checks": [], "facts": {}})
    sample = broken.stages["sample"].model_copy(update={"status": "not_run", "checks": [], "reason": "device failed"})
    a = Side(
        path=Path("a"),
        report=broken.model_copy(update={"stages": {**broken.stages, "device": device, "sample": sample}}),
    )

    comparison = compare_sides(a, side(Run(), record=False))

    assert {s.stage: s.verdict for s in comparison.stages} == {
        "image": "same",
        "host": "same",
        "device": "improved",
        "sample": "improved",
    }
    assert comparison.verdict == "equivalent"
    assert any(line.startswith("sample checks: A's sample stage has none (not_run") for line in comparison.not_compared)


def test_another_host_is_shown_and_does_not_count_against_b() -> None:
    """A rebuild on another machine: other driver, other GPU model, the same numbers."""
    a = cuda_reference()
    b = replace(cuda_reference(), nvidia_driver="535.183.01", devices=("NVIDIA H200",))
    comparison = compare_sides(side(a), side(b))
    rows = {row.field: row for row in comparison.system if row.verdict != "same"}
    assert set(rows) == {"host NVIDIA driver", "devices"}
    driver = rows["host NVIDIA driver"]
    assert (driver.a, driver.b, driver.verdict) == ("550.54.15 (CUDA ≤ 12.4)", "535.183.01 (CUDA ≤ 12.4)", "host")
    assert rows["devices"].verdict == "host" and "another host" in (rows["devices"].note or "")
    assert comparison.verdict == "equivalent" and comparison.unintended == []


def test_a_host_whose_gpu_the_rebuild_cannot_see_is_a_regression() -> None:
    """The host row alone does not judge; the device stage that fails on B does."""
    b = replace(cuda_reference(), devices=(), compute_device="cpu")
    rebuilt = make_report(b)
    failed = rebuilt.stages["device"].model_copy(update={"status": "failed"})
    b_side = Side(path=Path("b"), report=rebuilt.model_copy(update={"stages": {**rebuilt.stages, "device": failed}}))
    comparison = compare_sides(side(cuda_reference()), b_side)
    assert next(row for row in comparison.system if row.field == "device count").verdict == "host"
    assert next(row for row in comparison.stages if row.stage == "device").verdict == "regression"
    assert comparison.verdict == "regressed"
    assert comparison.unintended[0].startswith("device")


def test_identical_sides_are_identical(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    comparison = compare_sides(side(Run()), side(Run()))
    assert comparison.verdict == "identical"
    assert comparison.unintended == [] and comparison.not_compared == []
    assert comparison.packages is not None and comparison.packages.identical

    folder = write_run(Run(), tmp_path / "run")
    code, out, err = run_cli(["compare", str(folder), str(folder / "report.json")], capsys)
    assert (code, err) == (0, "")
    assert "identical" in out


def test_reports_alone_compare_everything_but_packages() -> None:
    comparison = compare_sides(side(Run(), record=False), side(with_numpy("2.4.5"), record=False))
    assert comparison.packages is None and comparison.packages_verdict is None
    assert comparison.not_compared == [
        "packages: A and B have no inventory (give the build.json, or the `orch rebuild` folder holding it)"
    ]
    assert comparison.verdict == "identical"


def test_build_records_alone_compare_packages_and_image_facts() -> None:
    comparison = compare_sides(side(Run(), report=False), side(with_numpy("2.4.5"), report=False))
    assert [s.stage for s in comparison.stages] == ["image"]
    assert comparison.numbers == []
    assert {row.field for row in comparison.system} >= {"platform", "python", "torch", "torch.version.cuda"}
    assert comparison.unintended == ["package numpy changed: 2.4.6 → 2.4.5"]


# --- reading the sides --------------------------------------------------------------------------------------


def test_load_side_reads_a_rebuild_folder_and_a_file_with_its_sibling(tmp_path: Path) -> None:
    folder = write_run(Run(), tmp_path / "run")

    from_folder = load_side(folder)
    assert from_folder.report is not None and from_folder.record is not None
    assert from_folder.files == [str(folder / "report.json"), str(folder / "build.json")]

    from_report = load_side(folder / "report.json")
    assert from_report.record is not None  # the build.json of the same image beside it
    from_record = load_side(folder / "build.json")
    assert from_record.report is not None

    only_report = write_run(Run(), tmp_path / "probe-only", record=False)
    assert load_side(only_report).record is None


def test_load_side_ignores_a_sibling_of_another_image(tmp_path: Path) -> None:
    folder = write_run(Run(), tmp_path / "run", record=False)
    (folder / "build.json").write_text(
        make_record(replace(Run(), image_id="sha256:" + "ff" * 32)).model_dump_json(), encoding="utf-8"
    )
    loaded = load_side(folder / "report.json")
    assert loaded.record is None
    assert loaded.notes and "another image" in loaded.notes[0]


def test_load_side_looks_the_variant_up_in_the_dossier(tmp_path: Path) -> None:
    loaded = load_side(write_run(cpu_variant_of_cuda(), tmp_path / "cpu"))
    assert loaded.variant is not None
    assert loaded.variant.declared and loaded.variant.overrides == ["system", "python"]
    assert loaded.variant.description is not None and loaded.variant.description.startswith("The same app")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing", None, "no such file or folder"),
        ("broken.json", "{not json", "not JSON"),
        (
            "dossier.json",
            json.dumps({"dossier": 1, "name": "x"}),
            "a JSON object with no 'format', expected an orch report",
        ),
        ("other.json", json.dumps({"format": "orch.compare/1"}), "format 'orch.compare/1', expected"),
        ("list.json", "[1, 2]", "a JSON list, expected"),
        ("bad-report.json", json.dumps({"format": "orch.report/1", "verdict": "maybe"}), "invalid report at"),
        ("empty-folder", "", "holds neither report.json nor build.json"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str | None, message: str
) -> None:
    good = write_run(Run(), tmp_path / "good")
    target = tmp_path / name
    if name == "empty-folder":
        target.mkdir()
    elif content is not None:
        target.write_text(content, encoding="utf-8")

    code, out, err = run_cli(["compare", str(good), str(target)], capsys)

    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error[bad-input]: ")
    assert str(target) in lines[0] and message in lines[0]
    assert out == ""
    with pytest.raises(BadInput):
        load_side(target)


# --- renderings ---------------------------------------------------------------------------------------------


def test_markdown_escapes_values_from_the_files() -> None:
    hostile = replace(Run(), name="evil|<b>", identity="d4" * 32)
    comparison = compare_sides(side(Run()), side(hostile))
    text = render_compare_markdown(comparison)
    prose = re.sub(r"`[^`]*`", "", text)
    assert "<b>" not in prose and "evil\\|\\<b\\>" in prose  # prose: every Markdown character escaped
    assert "`evil\\|<b> (d4d4d4d4d4d4)`" in text  # a code span in a table cell: `|` escaped, `<b>` literal
    assert render_compare_markdown(comparison) == text  # deterministic


def test_terminal_rendering_shows_every_layer() -> None:
    console = Console(record=True, width=200, highlight=False)
    print_compare(console, compare_sides(side(cuda_reference()), side(cpu_variant_of_cuda())))
    text = console.export_text()
    for expected in (
        "equivalent",
        "packages",
        "system",
        "stages",
        "numbers",
        "intended (variant cpu:",
        "nvidia-cublas-cu12",
    ):
        assert expected in text, expected


def test_at_80_columns_each_difference_is_one_line_not_a_wrapped_table() -> None:
    console = Console(record=True, width=80, highlight=False)
    print_compare(console, compare_sides(side(cuda_reference()), side(cpu_variant_of_cuda())))
    text = console.export_text()
    lines = text.splitlines()
    assert "  platform: cuda 12.4 → cpu  intended (variant cpu)" in lines, "field, A → B and verdict on one line"
    assert "  torch: 2.6.0+cu124 → 2.13.0+cpu  intended (variant cpu)" in lines
