"""An OSError that no narrower handler caught still reaches the user as one message, exit 3."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="mounting a small tmpfs needs root")
def test_a_full_out_folder_is_named_not_the_wheel_cache(tmp_path: Path) -> None:
    """Issue 25, point 7: `orch render --out` onto a full file system (a 16 MiB tmpfs; torch's wheel alone is
    larger) names the --out folder's file system as the full one, not orch's wheel cache it copied from."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(small)], check=True)
    try:
        dossier = EXAMPLES / "tiny-embeddings" / "dossier.yaml"
        result = subprocess.run(
            [sys.executable, "-m", "orchestrator", "render", str(dossier), "--out", str(small / "out")],
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )
        assert result.returncode == 3, result.stdout[-2000:] + result.stderr[-2000:]
        assert "error[disk-full]" in result.stderr and f"{small}" in result.stderr, result.stderr
        first = result.stderr.split("\n", 1)[0]
        assert "is full (writing" in first and ".cache" not in first.split("(writing")[0], first
        assert "Traceback" not in result.stderr
        assert not (small / "out").exists(), "a failed render leaves no half-written folder"
    finally:
        subprocess.run(["umount", str(small)], check=False)
