"""What a real container writes is untrusted (issue 9, items 2 and 6), on the real engine.

Each test rebuilds a copy of tiny-embeddings whose sample command does what a compromised package
could: replace its outputs or orch's meta file with links to host files, print far too much, or eat
memory. The host must fail the check naming the file, never follow the link (the canary's content
appears in no file orch wrote), keep the logs capped, and name the memory limit that killed it.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import yaml

from orchestrator.report.write import read_report
from orchestrator.stages.base_image import BaseOutcome
from tests.integration.helpers import orch

CANARY = "host-canary-5b21e0-never-in-a-report"
EMBED = "python embed.py --input /orch/input/sample/sample.jsonl --output /orch/output --dim 16 --buckets 2048 --seed 0"


def _with_expect(dossier_dir: Path, command: list[str], **limits: int) -> Path:
    path = dossier_dir / "dossier.yaml"
    document = yaml.safe_load(path.read_text())
    document["expect"]["command"] = command
    if limits:
        document["expect"]["limits"] = limits
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _written_text(out: Path) -> str:
    """Every regular file orch wrote under OUT (links are not followed: that is the point)."""
    texts = []
    for folder, _, files in os.walk(out, followlinks=False):
        for name in files:
            path = Path(folder) / name
            if stat.S_ISREG(path.lstat().st_mode):
                texts.append(path.read_bytes().decode("utf-8", errors="replace"))
    return "\n".join(texts)


def _rebuild(dossier: Path, out: Path) -> tuple[int, str]:
    result = orch("rebuild", str(dossier), "--out", str(out))
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout + result.stderr


def test_links_to_host_files_fail_by_name_and_leak_nothing(
    base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "settings.json").write_text(json.dumps({"secret": CANARY}))
    (host / "shadow").write_text(f"root:{CANARY}:19000:0:99999:7:::\n")  # stands for /etc/shadow
    plant = (
        f"{EMBED} && rm -f /orch/meta/determinism.json /orch/output/ids.json"
        f" && ln -s {shlex.quote(str(host / 'settings.json'))} /orch/meta/determinism.json"
        f" && ln -s {shlex.quote(str(host / 'shadow'))} /orch/output/ids.json"
    )
    dossier = _with_expect(tiny_example, ["sh", "-c", plant])
    out = tmp_path / "out"
    code, output = _rebuild(dossier, out)
    assert code == 1, output
    sample = read_report(out / "report.json").stage("sample")
    checks = {check.name: check for check in sample.checks}
    assert sample.status == "failed"
    assert "sample-meta/determinism.json is a symbolic link" in checks["determinism record"].observed
    assert "sample-output/ids.json is a symbolic link" in checks["embeddings: identifiers"].observed
    for name in ("report.json", "report.md", "report.html", "junit.xml"):
        assert (out / name).is_file() and "determinism.json is a symbolic link" in (out / name).read_text()
    assert CANARY not in _written_text(out), "a host file's content reached orch's outputs"


def test_an_output_linked_to_the_reference_fails(base_image: BaseOutcome, tiny_example: Path, tmp_path: Path) -> None:
    reference = tiny_example / "reference" / "embeddings.npy"
    plant = (
        f"{EMBED} && rm /orch/output/embeddings.npy && ln -s {shlex.quote(str(reference))} /orch/output/embeddings.npy"
    )
    dossier = _with_expect(tiny_example, ["sh", "-c", plant])
    out = tmp_path / "out"
    code, output = _rebuild(dossier, out)
    assert code == 1, output
    report = read_report(out / "report.json")
    sample = report.stage("sample")
    assert sample.status == "failed" and sample.first_error is not None
    assert sample.first_error.step == "embeddings: readable"
    assert "sample-output/embeddings.npy is a symbolic link" in sample.first_error.message
    assert not any(check.passed for check in sample.checks if "cosine" in check.name)


# Prints 40 MiB, says how much swap it may use, then allocates until the kernel kills it.
LOUD_AND_HUNGRY = """
import os, sys
v2, v1 = "/sys/fs/cgroup/memory.swap.max", "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"
if os.path.exists(v2):
    print("swap:", open(v2).read().strip(), flush=True)
elif os.path.exists(v1):
    limit = open("/sys/fs/cgroup/memory/memory.limit_in_bytes").read().strip()
    print("swap:", int(open(v1).read()) - int(limit), flush=True)
line = "y" * 1023 + "\\n"
for _ in range(40 * 1024):
    sys.stdout.write(line)
print("LAST-WORDS-BEFORE-ALLOCATING", flush=True)
hoard = []
while True:
    hoard.append(b"x" * (32 << 20))
"""


def test_a_loud_hungry_sample_is_capped_and_killed_at_its_named_limit(
    base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    dossier = _with_expect(tiny_example, ["python", "-c", LOUD_AND_HUNGRY], memory_mib=256)
    out = tmp_path / "out"
    code, output = _rebuild(dossier, out)
    assert code == 1, output
    sample = read_report(out / "report.json").stage("sample")
    assert sample.first_error is not None and sample.first_error.step == "sample command"
    assert sample.first_error.message == (
        "the container was killed at its memory limit of 256 MiB (exit 137, out of memory); "
        "if the sample needs more, raise expect.limits.memory_mib in the dossier (now 256)"
    )
    log = (out / "sample.log").read_text()
    assert log.startswith("swap: 0\n"), "memory + swap = the memory limit: no swap at all"
    assert "LAST-WORDS-BEFORE-ALLOCATING" in log, "the tail is kept"
    assert "bytes cut here; the container printed" in log
    assert len(log) < 17 << 20, "stdout kept within 16 MiB"
    assert sample.facts.recorded()["log_cut_bytes"]["stdout"] > 20 << 20
