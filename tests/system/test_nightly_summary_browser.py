"""The nightly summary page in a real headless browser (Debian's chromium): the matrix in its colours.

A night of four cells is run with the fake target (one failing in its sample stage, one whose endpoint
was down), its summary.html opened in chromium; the screenshot is kept as a test artifact
(test-artifacts/nightly-browser/summary.png). Same chromium rules as the report's browser test.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from orchestrator.nightly.plan import load_plan
from orchestrator.nightly.runner import run_night
from orchestrator.nightly.summary_render import COLOURS
from tests.compare_sample import Run
from tests.nightly_sample import FakeTarget, Script, two_target_plan
from tests.paths import REPO
from tests.report_sample import HOSTILE
from tests.system.test_report_browser import HEIGHT, WIDTH, _chromium, _decode_png, _headless

ARTIFACTS = REPO / "test-artifacts" / "nightly-browser"


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def test_summary_matrix_shows_each_cell_in_its_colour(tmp_path: Path) -> None:
    binary = _chromium()
    plan = load_plan(two_target_plan(tmp_path))
    a = FakeTarget(
        "gpu-a",
        2,
        scripts={
            "tiny-embeddings@gpu-a": Script(status="failed", run=Run(cosine=0.5), first_error=f"sample: {HOSTILE}")
        },
    )
    b = FakeTarget(
        "gpu-b", scripts={"tiny-embeddings@gpu-b": Script(status="environment", run=None, first_error="down")}
    )
    night = run_night(plan, {"gpu-a": a, "gpu-b": b}, clock=lambda: datetime(2026, 12, 2, tzinfo=UTC)).night_dir
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = night / "summary.html"
    screenshot = ARTIFACTS / "summary.png"
    screenshot.unlink(missing_ok=True)
    result = _headless(binary, tmp_path / "profile", f"--screenshot={screenshot}", page.as_uri())
    assert screenshot.is_file(), result.stderr[-2000:]

    dom = _headless(binary, tmp_path / "profile2", "--dump-dom", page.as_uri()).stdout
    assert dom.count('class="matrix-cell"') == 4, "dossier by target: four cells in the matrix"
    assert "<script>alert" not in dom, "untrusted text stays escaped in the browser's DOM"
    assert dom.count('<svg class="trend"') >= 4, "trend plots are drawn inline"

    width, height, channels, pixels = _decode_png(screenshot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    seen = dict.fromkeys(("passed", "sample", "environment"), 0)
    for y in range(0, min(height, 400), 3):
        for x in range(0, width, 3):
            i = (y * width + x) * channels
            rgb = tuple(pixels[i : i + 3])
            for name in seen:
                if all(abs(p - q) <= 2 for p, q in zip(rgb, _rgb(COLOURS[name]), strict=True)):
                    seen[name] += 1
    # Each colour fills a matrix cell on the first screen (the legend alone is far smaller).
    assert all(count > 150 for count in seen.values()), seen
