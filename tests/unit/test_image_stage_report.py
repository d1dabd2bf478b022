"""The image stage tells the truth: its duration includes a build made in the same run, and a missing
reference inventory is said loudly in every rendering instead of passing silently."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.engine import ImageInfo
from orchestrator.model.inventory import parse_inventory
from orchestrator.model.report import Report, ReportDossier, StageResult
from orchestrator.report.html import render_html
from orchestrator.report.markdown import render_markdown
from orchestrator.stages.build import write_record
from orchestrator.stages.image_stage import image_stage
from tests.compare_sample import CPU_FREEZE, Run, make_record
from tests.probe_outputs import inventory_output

FREEZE = list(CPU_FREEZE)


class _NoEngine:
    """image_stage reads build.json of the same image: it must not need the engine at all."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the engine was called: {name}")


def _setup(loaded: LoadedDossier, out: Path, build_total: float) -> ImageInfo:
    run = Run(name=loaded.model.name, identity=loaded.identity, image_id="sha256:" + "d" * 64, freeze=tuple(FREEZE))
    record = make_record(run)
    inventory = parse_inventory(
        {
            "python": {"version": "3.11.2", "executable": "/opt/venv/bin/python", "libc": "glibc-2.36"},
            "pip": {"freeze": FREEZE, "check_ok": True, "check_lines": []},
            "os": {"release": {"ID": "debian"}, "package_manager": "dpkg", "packages": {}},
            "backend": {"torch": {"version": "2.13.0+cpu", "cuda": None, "hip": None}, "env": {}},
        }
    )
    record = record.model_copy(
        update={"inventory": inventory, "durations_s": {"build": build_total - 1, "total": build_total}}
    )
    out.mkdir(parents=True, exist_ok=True)
    write_record(out / "build.json", record)
    return ImageInfo(
        id=run.image_id,
        tags=(f"orch/{run.name}:{loaded.short_identity}",),
        labels={"io.orch.dossier.identity": loaded.identity},
        env={},
        repo_digests=(),
        size=1,
    )


def test_the_image_stage_of_a_rebuild_includes_the_build_time(tiny_example: Path, tmp_path: Path) -> None:
    loaded = load_dossier(tiny_example / "dossier.yaml")
    image = _setup(loaded, tmp_path, 112.0)
    result, _ = image_stage(_NoEngine(), loaded, image, tmp_path, built_in_this_run=True)  # type: ignore[arg-type]
    assert result.duration_s >= 112.0, "the build is the image stage's work when it ran in this run"
    assert result.facts.recorded()["build_seconds"] == 112.0
    assert "this run" in result.facts.recorded()["built"]


def test_a_probe_of_an_earlier_build_says_where_the_build_time_went(tiny_example: Path, tmp_path: Path) -> None:
    loaded = load_dossier(tiny_example / "dossier.yaml")
    image = _setup(loaded, tmp_path, 112.0)
    result, _ = image_stage(_NoEngine(), loaded, image, tmp_path)  # type: ignore[arg-type]
    assert result.duration_s < 112.0
    assert result.facts.recorded()["build_seconds"] == 112.0
    assert "earlier" in result.facts.recorded()["built"] and "build.json" in result.facts.recorded()["built"]


class _Progress:
    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def line(self, text: str) -> None:
        pass

    def stage(self, text: str) -> None:
        pass


# -- the reference inventory ---------------------------------------------------------------------------


def _without_reference_inventory(tiny_example: Path) -> Path:
    dossier = tiny_example / "dossier.yaml"
    dossier.write_text(dossier.read_text().replace("  reference_inventory: reference/pip-freeze.txt\n", ""))
    return dossier


def test_an_image_stage_without_a_reference_inventory_warns(tiny_example: Path, tmp_path: Path) -> None:
    loaded = load_dossier(_without_reference_inventory(tiny_example))
    assert loaded.model.python.reference_inventory is None
    result, _ = image_stage(_NoEngine(), loaded, _setup(loaded, tmp_path, 5.0), tmp_path)  # type: ignore[arg-type]
    assert result.status == "passed", "a warning, not a failure: existing dossiers keep passing"
    assert len(result.warnings) == 1
    assert "python.reference_inventory" in result.warnings[0] and "not compared" in result.warnings[0]


def test_with_a_reference_inventory_it_is_compared_and_nothing_is_warned(tiny_example: Path, tmp_path: Path) -> None:
    (tiny_example / "reference" / "pip-freeze.txt").write_text(
        "\n".join(FREEZE).replace("numpy==2.4.6", "numpy==2.4.5")
    )
    loaded = load_dossier(tiny_example / "dossier.yaml")  # the example names reference/pip-freeze.txt
    result, _ = image_stage(_NoEngine(), loaded, _setup(loaded, tmp_path, 5.0), tmp_path)  # type: ignore[arg-type]
    assert result.warnings == []
    check = next(c for c in result.checks if c.name == "inventory matches the reference")
    assert not check.passed and "numpy 2.4.5 → 2.4.6" in (check.detail or "")


def _warned_report() -> Report:
    image = StageResult(name="image", status="passed", warnings=["no reference inventory: <b>not compared</b>"])
    others = {name: StageResult(name=name, status="passed") for name in ("host", "device", "sample")}
    return Report(
        orch_version="0.1.0",
        created="2026-12-01T00:00:00Z",
        dossier=ReportDossier(
            name="x", path="/d", identity="e" * 64, variant=None, platform="cpu", backend_version=None
        ),
        image=None,
        verdict="passed",
        stages={"image": image, **others},  # type: ignore[dict-item]
    )


def test_the_warning_shows_in_every_rendering() -> None:
    report = _warned_report()
    markdown = render_markdown(report)
    image_section = markdown.split("## image", 1)[1].split("## host", 1)[0]
    assert "⚠️ **Warning:** no reference inventory: \\<b\\>not compared\\</b\\>" in image_section
    summary_row = next(line for line in markdown.splitlines() if line.startswith("| [image]"))
    assert "⚠️" in summary_row, "the summary table says it too, not only the section"
    html = render_html(report)
    assert '<p class="warning">' in html and "&lt;b&gt;not compared&lt;/b&gt;" in html
    assert json.loads(report.model_dump_json())["stages"]["image"]["warnings"] == [
        "no reference inventory: <b>not compared</b>"
    ]


def test_the_console_summary_prints_the_warning() -> None:
    from orchestrator.cli.summary import print_report_summary

    buffer = io.StringIO()
    print_report_summary(Console(file=buffer, width=200), _warned_report(), {})
    assert "warning (image): no reference inventory" in buffer.getvalue()


def test_a_probe_without_the_build_record_says_the_build_time_is_not_known(tiny_example: Path, tmp_path: Path) -> None:
    loaded = load_dossier(tiny_example / "dossier.yaml")
    image = _setup(loaded, tmp_path / "elsewhere", 112.0)
    probe_out = tmp_path / "probe-out"  # holds the build record of another image only
    probe_out.mkdir()
    record = (tmp_path / "elsewhere" / "build.json").read_text()
    (probe_out / "build.json").write_text(record.replace(image.id, "sha256:" + "e" * 64))

    class _InventoryEngine:
        def run(self, spec: Any) -> Any:
            from orchestrator.engine import RunOutcome

            document = inventory_output()
            document["pip"].update(freeze=FREEZE, check_ok=True, check_lines=[])
            return RunOutcome(exit_code=0, stdout=json.dumps(document), stderr="", timed_out=False, duration_s=0.1)

    result, _ = image_stage(_InventoryEngine(), loaded, image, probe_out)  # type: ignore[arg-type]
    assert "build_seconds" not in result.facts.recorded()
    assert "not known" in result.facts.recorded()["built"]
