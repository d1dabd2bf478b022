"""`orch --help` must start fast: the CLI's start-up path imports no heavy library."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ["docker", "pydantic", "jinja2", "yaml", "rich", "requests", "orchestrator.dossier.models"]


def test_help_imports_no_heavy_module() -> None:
    code = (
        "import sys, json\n"
        "from orchestrator.cli.main import cli\n"
        "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == [], f"imported on the --help path: {loaded}"
