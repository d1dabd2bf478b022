"""Writing and reading a report folder: `report.json` (the contract) and its three renderings.

Each file is written atomically (a reader never sees half a file), the renderings before
`report.json`: a folder holding `report.json` holds the renderings of that same report, so a
watcher may take `report.json` appearing as "done". Everything is rendered before anything is
written, so a rendering bug leaves the previous report untouched rather than half-replaced.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.documents import read_document
from orchestrator.fsutil import atomic_write_text
from orchestrator.model.report import REPORT_FORMAT, Report
from orchestrator.report.html import render_html
from orchestrator.report.junit import render_junit
from orchestrator.report.markdown import render_markdown

#: Format → file name inside the report folder. Names are part of the contract (CI picks up junit.xml).
FILES = {"json": "report.json", "markdown": "report.md", "html": "report.html", "junit": "junit.xml"}


def write_report(report: Report, out: Path) -> dict[str, Path]:
    """Write the four files into the folder `out` (created if needed); return their paths by format."""
    texts = {
        "json": report.model_dump_json(indent=2) + "\n",
        "markdown": render_markdown(report),
        "html": render_html(report),
        "junit": render_junit(report),
    }
    paths = {kind: out / name for kind, name in FILES.items()}
    for kind in ("markdown", "html", "junit", "json"):  # report.json last: see the module docstring
        atomic_write_text(paths[kind], texts[kind])
    return paths


def read_report(path: Path) -> Report:
    """Read `report.json` (or the folder holding it). A missing, unreadable or foreign file is `BadInput`."""
    if path.is_dir():
        path = path / FILES["json"]
    return read_document(path, Report, REPORT_FORMAT, "report")
