"""An OSError that no narrower handler caught still reaches the user as one message, exit 3."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.paths import EXAMPLES


def test_an_os_error_is_one_message_with_its_path_and_exit_3(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way\n")
    dossier = EXAMPLES / "tiny-embeddings" / "dossier.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "render", str(dossier), "--out", str(blocker / "sub")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 3, result.stderr
    assert str(blocker) in result.stderr and "error[environment]" in result.stderr
    assert "Traceback" not in result.stderr
    assert blocker.read_text() == "in the way\n", "nothing was lost"
