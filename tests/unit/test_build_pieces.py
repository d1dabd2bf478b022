from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

from orchestrator.checks.image import image_checks
from orchestrator.dossier.load import load_dossier
from orchestrator.engine.build_log import cache_stats
from orchestrator.model.checks import first_failure
from orchestrator.model.inventory import diff_inventories, parse_freeze, parse_inventory
from orchestrator.stages.build_context import FIXED_MTIME, context_tar
from tests.paths import EXAMPLES

LOG = """Step 1/6 : FROM base AS builder
 ---> 5fddc3663543
Step 2/6 : RUN python3.11 -m venv /opt/venv
 ---> Using cache
 ---> 1b2c
Step 3/6 : FROM base
 ---> 5fddc3663543
Step 4/6 : COPY --from=builder /opt/venv /opt/venv
 ---> Using cache
 ---> 3d4e
Step 5/6 : COPY app /opt/app
 ---> 9f8e
Step 6/6 : LABEL a=b
 ---> Running in 77aa
"""


def test_cache_stats_ignore_from_and_list_rebuilt_steps() -> None:
    stats = cache_stats(LOG)
    assert stats.steps == 4 and stats.cached == 2
    assert stats.rebuilt == ["COPY app /opt/app", "LABEL a=b"]


def test_a_header_buildkit_repeats_for_interleaved_stages_is_one_step() -> None:
    """Two stages' steps running side by side: BuildKit's log names a step again when its output resumes."""
    log = (
        "Step 1/2 : FROM base\n"
        "Step 2/3 : RUN build-ext\ncompiling\n"
        "Step 2/2 : RUN useradd orch\n---> Using cache\n"
        "Step 2/3 : RUN build-ext\nlinking\n"
        "Step 3/3 : COPY --from=builder /opt/ext /opt/ext\n"
    )
    stats = cache_stats(log)
    assert stats.steps == 3 and stats.cached == 1
    assert stats.rebuilt == ["RUN build-ext", "COPY --from=builder /opt/ext /opt/ext"]


def _tree(root: Path, mode: int, mtime: int) -> Path:
    (root / "app" / "pkg").mkdir(parents=True)
    (root / "Dockerfile").write_text("FROM scratch\n")
    (root / "app" / "pkg" / "run.sh").write_text("echo hi\n")
    (root / "app" / "pkg" / "run.sh").chmod(0o775)
    (root / "app" / "data.txt").write_text("x\n")
    (root / "app" / "data.txt").chmod(mode)
    (root / "app" / "link").symlink_to("data.txt")
    (root / ".orch-render.json").write_text("{}")
    for path in root.rglob("*"):
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return root


def test_context_tar_is_normalised_and_reproducible(tmp_path: Path) -> None:
    one = _tree(tmp_path / "one", 0o600, 1_700_000_000)
    two = _tree(tmp_path / "two", 0o664, 1_600_000_000)
    a, b = context_tar(one), context_tar(two)
    with a.file, b.file:
        assert a.file.read() == b.file.read(), "the same files give the same tar, whatever their modes or mtimes"
    assert a.sha256 == b.sha256
    again = context_tar(one)
    with again.file:
        assert hashlib.sha256(again.file.read()).hexdigest() == again.sha256, "the digest is of the bytes sent"
        again.file.seek(0)
        with tarfile.open(fileobj=again.file) as tar:
            members = {m.name: m for m in tar.getmembers()}
    assert ".orch-render.json" not in members
    assert list(members) == ["app", "Dockerfile", "app/pkg", "app/data.txt", "app/link", "app/pkg/run.sh"]
    assert members["app/pkg/run.sh"].mode == 0o755 and members["app/data.txt"].mode == 0o644
    assert members["app/link"].issym() and members["app/link"].linkname == "data.txt"
    assert all(m.uid == 0 and m.gid == 0 and m.mtime == FIXED_MTIME and m.uname == "" for m in members.values())


def test_freeze_parsing_and_diff() -> None:
    reference = ["# comment", "numpy==2.4.6", "Torch==2.13.0+cpu", "pip==24.0", "mylib @ https://u:tok@h/x.whl"]
    observed = ["numpy==2.4.5", "torch==2.13.0+cpu", "setuptools==84.2.1", "mylib @ https://u:tok@h/x.whl"]
    assert parse_freeze(reference)["mylib"] == "@ https://****@h/x.whl"
    diff = diff_inventories(reference, observed, "reference/freeze.txt")
    assert diff.added == ["setuptools==84.2.1"]
    assert diff.removed == ["pip==24.0"]
    assert [(c.name, c.reference, c.observed) for c in diff.changed] == [("numpy", "2.4.6", "2.4.5")]
    assert not diff.identical
    assert diff_inventories(reference, reference, "x").identical


FREEZE = [
    "filelock==4.3.1",
    "fsspec==2026.9.0",
    "jinja2==3.1.6",
    "MarkupSafe==3.0.4",
    "mpmath==1.3.0",
    "networkx==3.6.1",
    "numpy==2.4.6",
    "pip==23.0.1",
    "setuptools==84.2.1",
    "sympy==1.14.0",
    "torch==2.13.0+cpu",
    "typing_extensions==4.16.0",
]


def _probe_document(**overrides: object) -> dict[str, object]:
    document: dict[str, object] = {
        "python": {"version": "3.11.2", "executable": "/opt/venv/bin/python", "libc": "glibc-2.36"},
        "pip": {"freeze": FREEZE, "check_ok": True, "check_lines": ["No broken requirements found."]},
        "os": {"release": {"ID": "debian"}, "package_manager": "dpkg", "packages": {"libc6": "2.36-9"}},
        "backend": {"torch": {"version": "2.13.0+cpu", "cuda": None, "hip": None}, "env": {}},
    }
    document.update(overrides)
    return document


def test_image_checks_pass_on_a_faithful_inventory() -> None:
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    checks = image_checks(loaded, parse_inventory(_probe_document()), None)
    assert [c.name for c in checks] == [
        "python version",
        "lock installed exactly",
        "pip check",
        "torch build matches platform",
    ]
    assert first_failure(checks) is None


def test_image_checks_name_what_differs() -> None:
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    freeze = [line for line in FREEZE if not line.startswith("sympy")] + ["sympy==1.13.1"]
    document = _probe_document(
        python={"version": "3.12.1", "executable": "x", "libc": ""},
        pip={"freeze": freeze, "check_ok": False, "check_lines": ["torch 2.13.0 has requirement sympy>=1.13.3"]},
        backend={"torch": {"version": "2.13.0", "cuda": "13.0", "hip": None}},
    )
    diff = diff_inventories(FREEZE, freeze, "ref.txt")
    checks = {c.name: c for c in image_checks(loaded, parse_inventory(document), diff)}
    assert not checks["python version"].passed
    lock_detail = checks["lock installed exactly"].detail or ""
    assert (
        lock_detail.startswith("sympy==1.14.0 (installed: 1.13.1). ") and "build it again (orch build)" in lock_detail
    )
    assert not checks["pip check"].passed and "sympy>=1.13.3" in (checks["pip check"].detail or "")
    assert not checks["torch build matches platform"].passed
    inventory_detail = checks["inventory matches the reference"].detail or ""
    assert inventory_detail.startswith("sympy 1.14.0 → 1.13.1; if the difference is intended")
    assert "record the reference again (orch record)" in inventory_detail


def test_probe_errors_become_a_failed_check() -> None:
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    document = _probe_document(os={"error": "PermissionError('/var/lib/dpkg/status')"})
    checks = image_checks(loaded, parse_inventory(document), None)
    failed = first_failure(checks)
    assert failed is not None and failed.name == "inventory probe complete"
    assert "PermissionError" in (failed.detail or "")
