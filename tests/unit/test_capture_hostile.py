"""`orch doctor --from DIR` on hostile captures (issue 25, points 1-5): a capture is as untrusted as a hand-over.

Each case starts from a real capture (`write_capture` of the fake host in test_host_capture.py) and breaks it
the way an attacker or a damaged copy would: links at every component the reader touches, traversal in every
path field and in the captured `docker info` text, FIFOs, links to devices, huge and sparse files, too many
files, too deep a tree, non-UTF-8, deep nesting and wrong types in manifest.json. Every case must end as one
line on stderr, exit 2 (bad input), no traceback, no byte of this host's canary files in the output, and no
hang (the whole run is watched by faulthandler). The host memory bound is capture_intake.py's: 1 MiB of
manifest, 8 MiB per file, 64 MiB copied in all.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import EXIT_BAD_INPUT
from orchestrator.host import capture_intake
from orchestrator.host.capture import write_capture
from tests.unit.test_host_capture import fake_run, host_root

CANARY = "TOPSECRET-CANARY-7f3a"
Mutation = Callable[[Path, Path], object]


def _secrets(tmp_path: Path) -> Path:
    """Files of 'this host' that a hostile capture tries to make orch print."""
    secrets = tmp_path / "host-secrets"
    (secrets / "proc/sys/kernel").mkdir(parents=True)
    (secrets / "shadow").write_text(f"root:{CANARY}:19000:0:99999:7:::\n")
    (secrets / "proc/sys/kernel/osrelease").write_text(f"{CANARY}\n")
    (secrets / "cdi").mkdir()
    (secrets / "cdi" / "spec.yaml").write_text(
        f"cdiVersion: 0.5.0\nkind: canary.example/SECRET\ndevices:\n- name: {CANARY}\n"
    )
    manifest = {"format": "orch-host-capture/1", "commands": [], "env": {"CUDA_VISIBLE_DEVICES": CANARY}}
    (secrets / "manifest.json").write_text(json.dumps(manifest))
    return secrets


def _link(path: Path, target: Path | str) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def _sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(size)


def _manifest(capture: Path) -> dict:  # type: ignore[type-arg]
    loaded: dict = json.loads((capture / "manifest.json").read_text())  # type: ignore[type-arg]
    return loaded


def _edit(change: Callable[[dict], object]) -> Mutation:  # type: ignore[type-arg]
    def mutate(capture: Path, _secrets: Path) -> None:
        manifest = _manifest(capture)
        change(manifest)
        (capture / "manifest.json").write_text(json.dumps(manifest))

    return mutate


def _first_stdout(capture: Path) -> Path:
    return capture / str(next(entry["stdout"] for entry in _manifest(capture)["commands"] if "stdout" in entry))


def _docker_info(capture: Path) -> Path:
    entry = next(entry for entry in _manifest(capture)["commands"] if entry["argv"] == ["docker", "info"])
    return capture / str(entry["stdout"])


def _set(key: str, value: object, where: str = "commands") -> Mutation:
    def change(manifest: dict) -> None:  # type: ignore[type-arg]
        entry = next(entry for entry in manifest[where] if where != "commands" or "stdout" in entry)
        entry[key] = value

    return _edit(change)


def _many_files(capture: Path, _secrets: Path) -> None:
    folder = capture / "root" / "many"
    folder.mkdir(parents=True)
    for number in range(capture_intake.MAX_FILES + 1):
        (folder / str(number)).touch()


def _deep(capture: Path, _secrets: Path) -> None:
    folder = capture / "root"
    for _ in range(capture_intake.MAX_DEPTH + 3):
        folder = folder / "d"
    folder.mkdir(parents=True)
    (folder / "f").write_text("x")


def _over_total(capture: Path, _secrets: Path) -> None:
    for number in range(capture_intake.TOTAL_MAX_BYTES // capture_intake.FILE_MAX_BYTES + 1):
        _sparse(capture / "root" / "big" / str(number), capture_intake.FILE_MAX_BYTES)


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


CASES: dict[str, Mutation | None] = {
    # links at every component the reader touches
    "osrelease -> host secret": lambda c, s: _link(c / "root/proc/sys/kernel/osrelease", s / "shadow"),
    "cpuinfo -> host secret": lambda c, s: _link(c / "root/proc/cpuinfo", s / "shadow"),
    "driver version -> host secret": lambda c, s: _link(c / "root/proc/driver/nvidia/version", s / "shadow"),
    "etc/group -> host secret": lambda c, s: _link(c / "root/etc/group", s / "shadow"),
    "root -> a host folder": lambda c, s: _link(c / "root", s),
    "root -> /": lambda c, s: _link(c / "root", "/"),
    "root/proc -> a host folder": lambda c, s: _link(c / "root/proc", s / "proc"),
    "root/etc/cdi -> a host folder": lambda c, s: _link(c / "root/etc/cdi", s / "cdi"),
    "a CDI spec -> host spec": lambda c, s: _link(c / "root/etc/cdi/nvidia.yaml", s / "cdi/spec.yaml"),
    "manifest.json -> a manifest outside": lambda c, s: _link(c / "manifest.json", s / "manifest.json"),
    "a command's stdout -> host secret": lambda c, s: _link(_first_stdout(c), s / "shadow"),
    "docker info stdout -> host secret": lambda c, s: _link(_docker_info(c), s / "shadow"),
    "a log -> host secret": lambda c, s: _link(c / "logs/probe.txt", s / "shadow"),
    "commands/ -> a host folder": lambda c, s: _link(c / "commands", s),
    "logs/ -> a host folder": lambda c, s: _link(c / "logs", s),
    "KFD properties -> /dev/zero": lambda c, s: _link(
        c / "root/sys/class/kfd/kfd/topology/nodes/1/properties", "/dev/zero"
    ),
    "cpuinfo -> /dev/zero": lambda c, s: _link(c / "root/proc/cpuinfo", "/dev/zero"),
    "a render node -> /dev/zero": lambda c, s: _link(c / "root/dev/dri/renderD128", "/dev/zero"),
    "a dangling link in root": lambda c, s: _link(c / "root/proc/version", s / "nothing-here"),
    # traversal in every path field and in the captured text
    "stdout ../ to a host secret": lambda c, s: _set("stdout", os.path.relpath(s / "shadow", c))(c, s),
    "stdout absolute": _set("stdout", "/etc/passwd"),
    "stdout commands/../../x": _set("stdout", "commands/../../host-secrets/shadow"),
    "stdout with a NUL": _set("stdout", "commands/a\u0000b"),
    "stdout with a newline": _set("stdout", "commands/a\nb"),
    "log file ../": _set("file", "../host-secrets/shadow", "logs"),
    "log file absolute": _set("file", "/etc/shadow", "logs"),
    "CDI dir /../.. to a host folder": lambda c, s: _docker_info(c).write_text(
        f" Runtimes: runc\n CDI spec directories:\n  /../../../../../../..{s / 'cdi'}\n"
    ),
    "CDI dir with .. inside": lambda c, s: _docker_info(c).write_text(
        " Runtimes: runc\n CDI spec directories:\n  /etc/cdi/../../../../../../tmp\n"
    ),
    # not regular files
    "manifest.json is a FIFO": lambda c, s: _fifo(c / "manifest.json"),
    "cpuinfo is a FIFO": lambda c, s: _fifo(c / "root/proc/cpuinfo"),
    "osrelease is a FIFO": lambda c, s: _fifo(c / "root/proc/sys/kernel/osrelease"),
    "a command's stdout is a FIFO": lambda c, s: _fifo(_first_stdout(c)),
    "a log is a FIFO": lambda c, s: _fifo(c / "logs/probe.txt"),
    "a command's stdout is a folder": lambda c, s: _folder(_first_stdout(c)),
    "the capture is a link to a capture": None,  # see _prepare: the folder given is itself a link
    # sizes
    "manifest.json of 2 MB": lambda c, s: (c / "manifest.json").write_text(json.dumps(_manifest(c)) + " " * (2 << 20)),
    "cpuinfo sparse 2 GB": lambda c, s: _sparse(c / "root/proc/cpuinfo", 2 << 30),
    "a log sparse 2 GB": lambda c, s: _sparse(c / "logs/probe.txt", 2 << 30),
    "docker info 1.5 GB": lambda c, s: _sparse(_docker_info(c), 3 << 29),
    "over 64 MiB in all": _over_total,
    "over 10,000 files": _many_files,
    "folders too deep": _deep,
    "an odd file name in root": lambda c, s: (c / "root/proc/a\nb").write_text("x"),
    # manifest.json damaged or of the wrong shape
    "100,000 nested [": lambda c, s: (c / "manifest.json").write_text("[" * 100_000),
    "not UTF-8": lambda c, s: (c / "manifest.json").write_bytes(b'{"format": "\xff\xfe"}'),
    "empty manifest": lambda c, s: (c / "manifest.json").write_text(""),
    "a JSON list": lambda c, s: (c / "manifest.json").write_text("[]"),
    "no format": _edit(lambda m: m.pop("format")),
    "commands hold non-objects": _edit(lambda m: m.update(commands=[1, "x"])),
    "logs hold non-objects": _edit(lambda m: m.update(logs=["x"])),
    "env is a list": _edit(lambda m: m.update(env=["CUDA_VISIBLE_DEVICES"])),
    "returncode is text": _set("returncode", "abc"),
    "returncode of 5,000 digits": lambda c, s: (c / "manifest.json").write_text(
        json.dumps(_manifest(c)).replace('"returncode": 0', '"returncode": ' + "1" * 5000, 1)
    ),
    "argv is a number": _set("argv", 5),
    "stdout is a number": _set("stdout", 12),
    "a named stdout is missing": lambda c, s: _first_stdout(c).unlink(),
}


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    """A reader that blocks on a FIFO fails the test (and prints where) instead of hanging the suite."""
    faulthandler.dump_traceback_later(60, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def _prepare(tmp_path: Path, name: str) -> tuple[Path, Path]:
    secrets = _secrets(tmp_path)
    capture = tmp_path / "capture"
    write_capture(capture, host_root(tmp_path), fake_run(), {"CUDA_VISIBLE_DEVICES": "0"}, {"probe": "boom"})
    mutation = CASES[name]
    if mutation is None:
        link = tmp_path / "capture-link"
        link.symlink_to(capture)
        return link, secrets
    mutation(capture, secrets)
    return capture, secrets


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 40


def test_an_intact_capture_still_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "capture"
    write_capture(capture, host_root(tmp_path), fake_run(), {"CUDA_VISIBLE_DEVICES": "0"}, {"probe": "boom"})
    with pytest.raises(SystemExit) as exited:
        main(["doctor", "--from", str(capture), "--json"])
    assert exited.value.code == 0
    diagnosis = json.loads(capsys.readouterr().out)
    assert diagnosis["host"]["kernel"] == "6.8.0-45-generic"


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_hostile_capture_is_one_line_exit_2_and_leaks_nothing(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = _prepare(tmp_path, name)
    with pytest.raises(SystemExit) as exited:
        main(["doctor", "--from", str(folder), "--json"])
    out, err = capsys.readouterr()
    assert CANARY not in out + err, f"{name}: host bytes reached the output"
    assert exited.value.code == EXIT_BAD_INPUT, (name, out[-500:], err[-500:])
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("  hint:")]
    assert lines and lines[0].startswith("error"), err
    assert out == ""
