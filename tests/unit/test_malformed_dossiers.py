"""Bad dossiers: each one exits 2 with a single clear line that names the file (and field/line), no traceback."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.cli.main import main


def _replace(old: str, new: str, file: str = "dossier.yaml") -> Callable[[Path], Path]:
    def mutate(root: Path) -> Path:
        path = root / file
        text = path.read_text()
        assert old in text, f"fixture drift: {old!r} not in {file}"
        path.write_text(text.replace(old, new, 1))
        return root / "dossier.yaml"

    return mutate


def _sub(pattern: str, new: str) -> Callable[[Path], Path]:
    def mutate(root: Path) -> Path:
        path = root / "dossier.yaml"
        text, count = re.subn(pattern, new, path.read_text(), count=1)
        assert count == 1, f"fixture drift: {pattern!r} not found"
        path.write_text(text)
        return path

    return mutate


def _write(text: str | bytes) -> Callable[[Path], Path]:
    def mutate(root: Path) -> Path:
        path = root / "dossier.yaml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        return path

    return mutate


def _append(text: str) -> Callable[[Path], Path]:
    def mutate(root: Path) -> Path:
        path = root / "dossier.yaml"
        path.write_text(path.read_text() + text)
        return path

    return mutate


def _delete(relative: str) -> Callable[[Path], Path]:
    def mutate(root: Path) -> Path:
        target = root / relative
        if target.is_dir():
            import shutil

            shutil.rmtree(target)
        else:
            target.unlink()
        return root / "dossier.yaml"

    return mutate


def _path(relative: str) -> Callable[[Path], Path]:
    return lambda root: root / relative


ALIAS_BOMB = """dossier: 1
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: [*e, *e, *e, *e, *e, *e, *e, *e, *e]
"""


@dataclass(frozen=True)
class Case:
    id: str
    mutate: Callable[[Path], Path]
    message: str  # a fragment the single error line must contain
    # The line the message must cite, where YAML gives one: a number, or the text of that line in the
    # mutated file (so the cases survive edits to the example).
    line: int | str | None = None
    args: tuple[str, ...] = ()


CASES = [
    # --- YAML itself
    Case("syntax-unclosed-flow", _write("dossier: 1\nname: [unclosed\n"), "invalid YAML", line=3),
    Case("syntax-bad-indent", _write("dossier: 1\nname: x\n  code: y\n"), "invalid YAML", line=3),
    Case("tab-indentation", _write("dossier: 1\ncode:\n\tsource: app\n"), "invalid YAML", line=3),
    Case("top-level-list", _write("- dossier: 1\n"), "top level must be a mapping", line=1),
    Case("empty-file", _write(""), "empty"),
    Case("alias-bomb", _write(ALIAS_BOMB), "anchors and aliases", line=2),
    Case("huge-file", _write("dossier: 1\n" + "# padding\n" * 120_000), "a dossier is at most"),
    Case("duplicate-key", _append("name: again\n"), "appears twice", line="name: again"),
    Case("not-utf8", _write(b"dossier: 1\nname: \xff\xfe\n"), "not UTF-8"),
    Case("non-string-key", _append("1: one\n"), "plain strings", line="1: one"),
    Case("nesting-too-deep", _write("dossier: 1\nx: " + "[" * 40 + "]" * 40 + "\n"), "nesting deeper"),
    # --- schema version and keys
    Case("missing-schema-version", _replace("dossier: 1\n", ""), "schema version"),
    Case("future-schema-version", _replace("dossier: 1\n", "dossier: 2\n"), "dossier: 1", line="dossier: 2"),
    Case(
        "unknown-top-level-key",
        _replace("name: tiny-embeddings", "nmae: tiny-embeddings"),
        "unknown key 'nmae'",
        "nmae:",
    ),
    Case(
        "unknown-nested-key",
        _replace("  requirements: requirements-cpu.lock", "  requirement: requirements-cpu.lock"),
        "python.requirement",
    ),
    Case("missing-required-section", _replace("code:\n  source: app\n", "cod:\n  source: app\n"), "unknown key 'cod'"),
    # --- wrong types and values
    Case("timeout-not-a-number", _replace("timeout_s: 300", "timeout_s: soon"), "expect.timeout_s", line="timeout_s:"),
    Case("shape-not-a-list", _replace("shape: [12, 16]", 'shape: "12x16"'), "expect.outputs[0].shape", line="shape:"),
    Case("negative-dimension", _replace("shape: [12, 16]", "shape: [12, -16]"), "non-negative"),
    Case(
        "name-not-an-identifier", _replace("name: tiny-embeddings", "name: Tiny Embeddings!"), "name", line="name: Tiny"
    ),
    Case("platform-unknown", _replace("platform: cpu", "platform: tpu"), "system.platform", line="platform: tpu"),
    Case("cpu-with-version", _replace("platform: cpu", 'platform: cpu\n  version: "12.4"'), "takes no 'version'"),
    Case("dtype-unknown", _replace("dtype: float32", "dtype: float31"), "expect.outputs[0].dtype", line="dtype:"),
    Case(
        "install-mode-unknown",
        _replace("install: wheelhouse", "install: offline"),
        "python.install",
        line="install: offline",
    ),
    Case("output-outside-folder", _replace("file: embeddings.npy", "file: ../embeddings.npy"), "inside the output"),
    Case("metric-unknown", _replace("metric: cosine", "metric: euclid"), "metric"),
    Case("cosine-out-of-range", _replace("min: 0.99999", "min: 2"), "less than or equal to 1"),
    Case("justification-too-short", _sub(r"justification: >-\n(?: {10}.*\n)+", "justification: ok\n"), "at least 10"),
    # --- hashes and credentials
    Case(
        "sha256-too-short", _replace("sha256: 3fc49c", "sha256: 3fc49"), "expect.inputs[0].sha256", line="sha256: 3fc49"
    ),
    Case("sha256-uppercase", _replace("sha256: 3fc49c", "sha256: 3FC49C"), "expect.inputs[0].sha256"),
    Case(
        "credentials-in-index-url",
        _replace("https://download.pytorch.org", "https://bob:hunter2@download.pytorch.org"),
        "must not carry credentials",
    ),
    Case(
        "token-in-index-query",
        _replace("whl/cpu", "whl/cpu?token=abc123"),
        "token in its query string",
    ),
    Case(
        "access-holds-a-value",
        _replace(
            "    - url: https://download.pytorch.org/whl/cpu",
            "    - url: https://download.pytorch.org/whl/cpu\n      access: ghp_abc123",
        ),
        "access",
    ),
    Case(
        "private-index-online",
        _replace(
            "install: wheelhouse\n  indexes:\n    - url: https://download.pytorch.org/whl/cpu",
            "install: online\n  indexes:\n    - url: https://download.pytorch.org/whl/cpu\n"
            "      access: TORCH_INDEX_TOKEN",
        ),
        "set install: wheelhouse",
    ),
    Case(
        "local-find-links-online",
        _replace("install: wheelhouse", "install: online\n  find_links: [/opt/wheels]"),
        "host folder",
    ),
    # --- referenced files
    Case("missing-input-file", _delete("sample/sample.jsonl"), "does not exist", line="- path: sample/sample.jsonl"),
    Case(
        "missing-lock", _delete("requirements-cpu.lock"), "does not exist", line="requirements: requirements-cpu.lock"
    ),
    Case("missing-code-folder", _delete("app"), "folder 'app' does not exist", line="source: app"),
    Case("missing-reference-output", _delete("reference/embeddings.npy"), "does not exist"),
    Case("entry-dossier-missing", _path("nope.yaml"), "no such file"),
    Case("dossier-is-a-folder", _path("app"), "is a folder"),
    # --- the lock
    Case("lock-not-pinned", _replace("numpy==2.4.6", "numpy>=2", file="requirements-cpu.lock"), "not pinned", line=9),
    Case(
        "lock-with-index-option",
        _replace(
            "# Lock for", "--extra-index-url https://example.org/simple\n# Lock for", file="requirements-cpu.lock"
        ),
        "not allowed in the lock",
        line=1,
    ),
    Case(
        "wheelhouse-lock-without-hash",
        _replace(
            "mpmath==1.3.0 --hash=sha256:a0b2b9fe80bbcd81a6647ff13108738cfb482d481d826cc0e02f5b35e5c88d2c",
            "mpmath==1.3.0",
            file="requirements-cpu.lock",
        ),
        "has no --hash",
        line=7,
    ),
    # --- coherence with the vendor tables
    Case(
        "cpu-dossier-cuda-torch",
        _replace("torch==2.13.0+cpu", "torch==2.6.0+cu124", file="requirements-cpu.lock"),
        "not a CPU build",
    ),
    Case(
        "torch-unknown-release",
        _replace("torch==2.13.0+cpu", "torch==1.13.0+cpu", file="requirements-cpu.lock"),
        "known series: 2.4",
    ),
    Case(
        "cuda-platform-cpu-torch",
        _replace("platform: cpu", 'platform: cuda\n  version: "12.4"'),
        "is a cpu build but the dossier's platform is cuda 12.4",
    ),
    Case(
        "cuda-version-not-offered",
        lambda root: _replace("platform: cpu", 'platform: cuda\n  version: "11.8"')(
            _replace("torch==2.13.0+cpu", "torch==2.8.0+cu118", file="requirements-cpu.lock")(root).parent
        ),
        "cuda versions for torch 2.8: 12.6, 12.8, 12.9",
    ),
    Case(
        "python-does-not-fit-base",
        _replace('version: "3.11"', 'version: "3.12"'),
        "provides 3.11",
        line='version: "3.12"',
    ),
    Case(
        "unknown-base-without-python",
        _replace("ref: orch/debian-python:bookworm", "ref: example.org/custom/image:1"),
        "system.base_image.python",
    ),
    Case("unknown-variant", lambda root: root / "dossier.yaml", "not declared", args=("--variant", "gpu")),
    Case(
        "business-check-unknown-output",
        _replace(
            "  timeout_s: 300\n",
            "  timeout_s: 300\n  business:\n    - {kind: label_equality, output: labels, reference: sample/ids.json}\n",
        ),
        "refers to output 'labels'",
    ),
    Case(
        "git-url-without-revision",
        _replace("  source: app\n", "  source: https://github.com/example/app.git\n"),
        "needs 'revision'",
    ),
]


def test_there_are_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_dossier_exits_2_with_one_clear_line(
    case: Case, tiny_example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dossier = case.mutate(tiny_example)
    with pytest.raises(SystemExit) as exited:
        main(["validate", str(dossier), *case.args])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    # One error line; a lock's errors add one hint line (what to do whether the edit was intended or not).
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].strip().startswith("hint: The lock is computed")), (
        captured.err
    )
    line = lines[0]
    assert "Traceback" not in captured.err
    assert line.startswith("error[dossier-invalid]: "), line
    if case.id != "unknown-variant":
        assert Path(dossier).name in line or "requirements-cpu.lock" in line, line
    assert case.message in line, line
    if case.line is not None:
        expected = case.line
        if isinstance(expected, str):
            lock = tiny_example / "requirements-cpu.lock"
            source = lock if line.split(": ", 1)[1].startswith(str(lock)) else Path(dossier)
            numbers = [n for n, text in enumerate(source.read_text().splitlines(), start=1) if expected in text]
            assert numbers, f"marker {expected!r} not found in {source.name}"
            expected = numbers[0]
        assert re.search(rf":{expected}\b", line), f"expected line {expected} in: {line}"
