"""Host memory to check a sample is bounded whatever the container wrote (issue 9, item 6).

Measured in a fresh interpreter (peak RSS from getrusage), on a sparse .npy of 256 MiB: read whole, as
before, that took about 3.5 GiB of host memory (898 MiB for 64 MiB, measured); streamed, a few MiB.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.paths import EXAMPLES, REPO

SIZE_MIB = 256

SCRIPT = """
import resource, shutil, struct, sys
from pathlib import Path
from orchestrator.dossier.load import load_dossier
from orchestrator.checks.sample import sample_checks

tiny, out, size_mib = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
loaded = load_dossier(tiny / "dossier.yaml")
shutil.copyfile(tiny / "sample" / "ids.json", out / "ids.json")
rows = size_mib * (1 << 20) // 64
header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, 16), }}"
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\\n"
with (out / "embeddings.npy").open("wb") as handle:
    handle.write(b"\\x93NUMPY\\x01\\x00" + struct.pack("<H", len(header)) + header.encode())
    handle.truncate(handle.tell() + rows * 64)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
checks = {c.name: c for c in sample_checks(loaded, out)}
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert checks["embeddings: finite"].passed and not checks["embeddings: shape"].passed
print((after - before) // 1024)
"""


def test_checking_a_large_npy_output_keeps_host_memory_bounded(tmp_path: Path) -> None:
    out = tmp_path / "sample-output"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(EXAMPLES / "tiny-embeddings"), str(out), str(SIZE_MIB)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    growth_mib = int(done.stdout.strip().splitlines()[-1])
    assert growth_mib < 48, f"checking a {SIZE_MIB} MiB output grew the host process by {growth_mib} MiB"
