"""The dossier's folder is untrusted: a path it names never reaches a host file outside it.

Each case builds a hostile folder around a private copy of tiny-embeddings and a "host secret" (a file
made outside the folder holding a canary string), runs `orch validate`, and asserts: exit 2, one clear
line naming the field and what was found, no traceback, and the canary nowhere in what orch printed.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.dossier.load import load_dossier
from tests.paths import EXAMPLES

CANARY = "ORCH-CANARY-5f1d0c9e-host-secret"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file outside the dossier's folder, like /etc/shadow."""
    outside = tmp_path / "host"
    outside.mkdir()
    path = outside / "shadow"
    path.write_text(f"root:{CANARY}:19000:0:99999:7:::\n")
    return path


def _edit(root: Path, old: str, new: str) -> Path:
    path = root / "dossier.yaml"
    text = path.read_text()
    assert old in text, f"fixture drift: {old!r}"
    path.write_text(text.replace(old, new, 1))
    return path


def _link(root: Path, relative: str, target: Path | str) -> Path:
    link = root / relative
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif link.exists() or link.is_symlink():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return root / "dossier.yaml"


@dataclass(frozen=True)
class Hostile:
    id: str
    make: Callable[[Path, Path], Path]  # (dossier folder, host secret) → dossier file
    message: str  # fragment the one error line must contain
    field: str | None = None


HOSTILE = [
    # --- symlinks leaving the folder, through every field that names a file or folder
    Hostile("code-file-link", lambda r, s: _link(r, "app/leak.txt", s), "app/leak.txt", "code.source"),
    Hostile("code-folder-link", lambda r, s: _link(r, "app/etc", s.parent), "app/etc", "code.source"),
    Hostile("code-source-link", lambda r, s: _link(r, "app", s.parent), "symlink", "code.source"),
    Hostile("nested-code-link", lambda r, s: _link(r, "app/deep/er/x.py", s), "app/deep/er/x.py", "code.source"),
    Hostile("input-link", lambda r, s: _link(r, "sample/sample.jsonl", s), "outside", "expect.inputs[0].path"),
    Hostile("ids-link", lambda r, s: _link(r, "sample/ids.json", s), "outside", "expect.outputs[0].ids.expected"),
    Hostile(
        "reference-link",
        lambda r, s: _link(r, "reference/embeddings.npy", s),
        "outside",
        "expect.outputs[0].compare.reference",
    ),
    Hostile("lock-link", lambda r, s: _link(r, "requirements-cpu.lock", s), "outside", "python.requirements"),
    Hostile("folder-on-the-way", lambda r, s: _link(r, "sample", s.parent), "'sample'", "expect.inputs[0].path"),
    Hostile(
        "relative-link-out",
        lambda r, s: _link(r, "sample/sample.jsonl", os.path.relpath(s, r / "sample")),
        "outside",
        "expect.inputs[0].path",
    ),
    # --- paths that leave the folder without a link
    Hostile("code-source-etc", lambda r, s: _edit(r, "source: app", "source: /etc"), "absolute", "code.source"),
    Hostile("code-source-root", lambda r, s: _edit(r, "source: app", "source: /"), "absolute", "code.source"),
    Hostile("code-source-parent", lambda r, s: _edit(r, "source: app", "source: ../host"), "'..'", "code.source"),
    Hostile(
        "input-absolute",
        lambda r, s: _edit(r, "- path: sample/sample.jsonl", f"- path: {s}"),
        "absolute",
        "expect.inputs[0].path",
    ),
    Hostile(
        "input-dev-zero",
        lambda r, s: _edit(r, "- path: sample/sample.jsonl", "- path: /dev/zero"),
        "absolute",
        "expect.inputs[0].path",
    ),
    # --- bad paths: one clear line each, never "does not exist" when it does
    Hostile(
        "nul-byte-input",
        lambda r, s: _edit(r, "- path: sample/sample.jsonl", '- path: "sample/sample\\0.jsonl"'),
        "NUL byte",
        "expect.inputs[0].path",
    ),
    Hostile("nul-byte-code", lambda r, s: _edit(r, "source: app", 'source: "app\\0"'), "NUL byte", "code.source"),
    Hostile(
        "nul-byte-lock",
        lambda r, s: _edit(r, "requirements: requirements-cpu.lock", 'requirements: "x\\0.lock"'),
        "NUL byte",
        "python.requirements",
    ),
    Hostile(
        "nul-byte-entrypoint",
        lambda r, s: _edit(r, "entrypoint: embed.py", 'entrypoint: "embed\\0.py"'),
        "NUL byte",
        "code.entrypoint",
    ),
    Hostile(
        "entrypoint-absolute",
        lambda r, s: _edit(r, "entrypoint: embed.py", f"entrypoint: {s}"),
        "absolute",
        "code.entrypoint",
    ),
    Hostile(
        "symlink-loop-input",
        lambda r, s: (
            (_link(r, "sample/a", "b"), _link(r, "sample/b", "a"))[0]
            and _edit(r, "- path: sample/sample.jsonl", "- path: sample/a")
        ),
        "symlink loop",
        "expect.inputs[0].path",
    ),
    Hostile("dangling-link", lambda r, s: _link(r, "sample/sample.jsonl", "gone.jsonl"), "gone.jsonl", None),
    Hostile(
        # A sample input may be a folder (one item, a tree hash); a compared reference output may not.
        "reference-is-a-folder",
        lambda r, s: _edit(r, "reference: reference/embeddings.npy", "reference: reference"),
        "is a folder; a regular file is expected",
        "expect.outputs[0].compare.reference",
    ),
    Hostile(
        "code-is-a-file",
        lambda r, s: _edit(r, "source: app", "source: dossier.yaml"),
        "is a file; a folder is expected",
        "code.source",
    ),
    Hostile("code-folder-loop", lambda r, s: _link(r, "app/again", "."), "loops back", "code.source"),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[case.id for case in HOSTILE])
def test_hostile_folder_is_refused_in_one_line(
    case: Hostile, tiny_example: Path, secret: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dossier = case.make(tiny_example, secret)
    started = time.monotonic()
    with pytest.raises(SystemExit) as exited:
        main(["validate", str(dossier)])
    assert time.monotonic() - started < 5, "refused quickly, never by walking the host's file system"
    captured = capsys.readouterr()
    assert exited.value.code == 2, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith("error[dossier-invalid]: "), lines[0]
    assert case.message in lines[0], lines[0]
    if case.field is not None:
        assert f"[{case.field}]" in lines[0], lines[0]
    assert CANARY not in captured.out + captured.err


def test_an_escaping_link_names_the_link_and_its_target(tiny_example: Path, secret: Path) -> None:
    dossier = _link(tiny_example, "app/leak.txt", secret)
    with pytest.raises(Exception) as raised:
        load_dossier(dossier)
    assert "app/leak.txt" in str(raised.value) and str(secret) in str(raised.value)


def _fifo(root: Path, relative: str) -> Path:
    target = root / relative
    target.unlink(missing_ok=True)
    os.mkfifo(target)
    return root / "dossier.yaml"


@pytest.mark.parametrize(
    ("relative", "field"), [("sample/sample.jsonl", "expect.inputs[0].path"), ("app/pipe", "code.source")]
)
def test_a_fifo_is_named_and_never_opened(
    relative: str, field: str, tiny_example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dossier = _fifo(tiny_example, relative)
    outcome: list[int] = []

    def run() -> None:
        try:
            main(["validate", str(dossier)])
        except SystemExit as exc:
            outcome.append(int(exc.code or 0))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=10)
    if worker.is_alive():  # unblock the reader so the test process can end, then fail
        with open(tiny_example / relative, "wb"):
            pass
        pytest.fail("orch opened the FIFO and blocked")
    assert outcome == [2]
    err = capsys.readouterr().err
    assert "FIFO" in err and f"[{field}]" in err and len(err.strip().splitlines()) == 1, err


def test_a_link_to_a_device_is_refused(tiny_example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dossier = _link(tiny_example, "sample/sample.jsonl", "/dev/zero")
    with pytest.raises(SystemExit) as exited:
        main(["validate", str(dossier)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "/dev/zero" in err and "outside" in err, err


# --- symlinks that stay inside the folder: followed, copied as content, recorded


def test_a_link_inside_the_folder_is_followed_and_recorded(tiny_example: Path) -> None:
    plain = load_dossier(tiny_example / "dossier.yaml")
    _link(tiny_example, "app/alias.py", "embed.py")
    _link(tiny_example, "app/shared", "../sample")
    loaded = load_dossier(tiny_example / "dossier.yaml")
    assert loaded.links == {"app/alias.py": "app/embed.py", "app/shared": "sample"}
    assert loaded.identity != plain.identity, "the linked content is part of the identity"


def test_an_input_through_an_inside_link_is_accepted(tiny_example: Path) -> None:
    moved = tiny_example / "data" / "sample.jsonl"
    moved.parent.mkdir()
    shutil.move(tiny_example / "sample" / "sample.jsonl", moved)
    _link(tiny_example, "sample/sample.jsonl", "../data/sample.jsonl")
    loaded = load_dossier(tiny_example / "dossier.yaml")
    assert loaded.resolve("sample/sample.jsonl") == moved.resolve()
    assert loaded.links["sample/sample.jsonl"] == "data/sample.jsonl"


def test_the_examples_have_no_links_and_keep_loading() -> None:
    for dossier in sorted(EXAMPLES.glob("*/dossier*.yaml")):
        assert load_dossier(dossier).links == {}, dossier


# --- the dossier file itself, as given on the command line


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link-out", "loop"])
def test_the_dossier_argument_is_checked_before_it_is_read(
    kind: str, tiny_example: Path, secret: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tiny_example / "given.yaml"
    expected = {"fifo": "FIFO", "dev-zero": "character device", "link-out": "outside", "loop": "symlink loop"}[kind]
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "dev-zero":
        target = Path("/dev/zero")
    elif kind == "link-out":
        outside = secret.parent / "dossier.yaml"
        shutil.copy(tiny_example / "dossier.yaml", outside)
        target.symlink_to(outside)
    else:
        target.symlink_to("given.yaml")
    outcome: list[int] = []

    def run() -> None:
        try:
            main(["validate", str(target)])
        except SystemExit as exc:
            outcome.append(int(exc.code or 0))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=10)
    if worker.is_alive():
        if kind == "fifo":
            with open(target, "wb"):
                pass
        pytest.fail("orch blocked on (or kept reading) the dossier argument")
    assert outcome == [2]
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert CANARY not in err


def test_a_dossier_linked_from_inside_its_folder_loads(tiny_example: Path) -> None:
    (tiny_example / "current.yaml").symlink_to("dossier.yaml")
    assert load_dossier(tiny_example / "current.yaml").model.name == "tiny-embeddings"


def test_probe_mounts_check_again_after_load(tiny_example: Path, secret: Path, tmp_path: Path) -> None:
    """A link swapped in after load is never mounted into the sample's container."""
    from orchestrator.errors import DossierError
    from orchestrator.plan.run import sample_mounts
    from orchestrator.stages.sample_stage import verify_fingerprints

    loaded = load_dossier(tiny_example / "dossier.yaml")
    _link(tiny_example, "sample/sample.jsonl", secret)
    with pytest.raises(DossierError, match="outside the dossier's folder"):
        sample_mounts(loaded, tmp_path / "o", tmp_path / "m", tmp_path / "s")
    with pytest.raises(DossierError, match="outside the dossier's folder"):
        verify_fingerprints(loaded)
