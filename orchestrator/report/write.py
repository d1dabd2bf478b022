"""Writing and reading a report folder: `report.json` (the contract) and its three renderings.

Each file is written atomically (a reader never sees half a file), the renderings before
`report.json`: a folder holding `report.json` holds the renderings of that same report, so a
watcher may take `report.json` appearing as "done". Everything is rendered before anything is
written, so a rendering bug leaves the previous report untouched rather than half-replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from orchestrator.errors import BadInput
from orchestrator.fsutil import atomic_write_text
from orchestrator.report.html import render_html
from orchestrator.report.junit import render_junit
from orchestrator.report.markdown import render_markdown
from orchestrator.report.model import REPORT_FORMAT, Report

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
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{path}: no such report") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the report: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: not a JSON report: {exc}") from None
    # Name a format mismatch in words instead of as a validation error on a Literal field.
    found = data.get("format") if isinstance(data, dict) else None
    if found != REPORT_FORMAT:
        raise BadInput(
            f"{path}: not an orch report in format {REPORT_FORMAT} (format: {found!r})",
            hint="a report written by another orch version may need that version to read it",
        )
    try:
        return Report.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise BadInput(f"{path}: invalid report at {where}: {first['msg']}") from None
