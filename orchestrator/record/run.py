"""`orch record`: the reference, captured where it ran, as a draft dossier folder.

Everything is written into a hidden sibling folder and renamed at the end: a half-written draft never
looks complete. Observed documents go under `record/`, the copies the dossier references under `app/`,
`sample/`, `weights/` and `reference/`, the loose requirements `orch lock` reads in `requirements.in`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator import vendor
from orchestrator.dossier.paths import Where, path_sha256
from orchestrator.errors import BadInput
from orchestrator.model.platform import Platform
from orchestrator.record.draft import Mapped, container_command, draft_document, identifier
from orchestrator.record.image import ImageObservation, base_for, observe_image
from orchestrator.record.observe import (
    code_revision,
    host_facts,
    numerics_environment,
    observe_interpreter,
    withheld_numerics,
)
from orchestrator.record.outputs import ObservedOutput, measure_spread, merge_spread, observed_outputs
from orchestrator.record.paths import distribution_owning, hub_origin, refuse_host_paths
from orchestrator.record.redaction import Redaction, Redactor
from orchestrator.record.requirements import top_level_requirements

_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache", "node_modules"}


@dataclass(frozen=True)
class RecordRequest:
    #: The reference's interpreter: a host path, or with `image` the interpreter inside the image (None: `python`).
    python: Path | None
    code: Path
    command: str
    outputs: Path
    out: Path
    data: tuple[Path, ...] = ()
    weights: tuple[Path, ...] = ()
    platform: Platform | None = None
    backend_version: str | None = None
    base_image: str | None = None
    repeat: int = 0
    #: `--vary NAME=v1,v2`: one rerun per value with NAME set in the command's environment (parse_vary).
    vary: tuple[tuple[str, tuple[str, ...]], ...] = ()
    name: str | None = None
    entrypoint: str | None = None
    #: A reference that ran in a container: the environment is read inside this image (record/image.py).
    image: str | None = None


@dataclass
class RecordResult:
    out: Path
    redactions: list[Redaction]
    outputs: list[ObservedOutput]
    notes: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)


def _copy_tree(source: Path, dest: Path, skip: set[Path]) -> list[str]:
    """Copy the regular files under `source`; the symbolic links it holds (files or folders) are not followed
    nor copied, and are returned (relative paths) so that the record can say which."""
    links: list[str] = []
    for root, dirs, files in os.walk(source):
        here = Path(root)
        links += sorted((here / d).relative_to(source).as_posix() for d in dirs if (here / d).is_symlink())
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and (here / d).resolve() not in skip)
        for name in sorted(files):
            path = here / name
            if path.is_symlink():
                links.append(path.relative_to(source).as_posix())
                continue
            if not path.is_file() or name.endswith(".pyc"):
                continue
            target = dest / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return sorted(links)


def _both(path: Path, container: str) -> list[Mapped]:
    """A host path as the command may name it (as given, and resolved) and where the container sees it."""
    return [Mapped(str(path), container), Mapped(str(path.resolve()), container)]


def _copy_item(path: Path, target: Path) -> None:
    if path.is_dir():
        _copy_tree(path, target, set())
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def links_note(folder: str, links: list[str]) -> str | None:
    """The record's note on the links `_copy_tree` left out of `folder` (their targets are not shown: a
    target is often a path on this machine)."""
    if not links:
        return None
    shown = ", ".join(f"{folder}/{link}" for link in links[:5]) + (
        f" and {len(links) - 5} more" if len(links) > 5 else ""
    )
    return (
        f"{shown}: symbolic link(s) in the code folder, not copied (orch copies regular files only: a link may point "
        "outside the code, to a file the rebuilding team does not have); copy what the app needs into the folder"
    )


def _platform(request: RecordRequest, torch: dict[str, Any]) -> tuple[Platform, str | None]:
    if request.platform is not None:
        return request.platform, request.backend_version
    if torch.get("importable") and torch.get("hip"):
        return "rocm", request.backend_version or ".".join(str(torch["hip"]).split(".")[:2])
    if torch.get("importable") and torch.get("cuda"):
        return "cuda", request.backend_version or str(torch["cuda"])
    return "cpu", None


def parse_vary(text: str) -> tuple[str, tuple[str, ...]]:
    """`NAME=v1,v2` as (NAME, (v1, v2)); a user error names the option and the form."""
    name, equals, values = text.partition("=")
    chosen = tuple(v.strip() for v in values.split(",") if v.strip())
    if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or not chosen:
        raise BadInput(
            f"--vary {text!r}: give NAME=VALUE[,VALUE…], an environment variable and its values, e.g. OMP_NUM_THREADS=1,2"
        )
    return name, chosen


def _run_command(argv: list[str], cwd: Path, timeout: int, env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise BadInput(f"the reference command ran for more than {timeout} s on a rerun") from None
    except FileNotFoundError:
        raise BadInput(f"the reference command's program {argv[0]!r} was not found") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise BadInput(f"the reference command failed on a rerun (exit {done.returncode}): {last}")
    return time.monotonic() - started


def record_reference(request: RecordRequest) -> RecordResult:
    for label, path in (("--code", request.code), ("--outputs", request.outputs)):
        if not path.is_dir():
            raise BadInput(f"{label} {path}: no such folder")
    for label, paths in (("--data", request.data), ("--weights", request.weights)):
        for path in paths:
            if not path.exists():
                raise BadInput(f"{label} {path}: no such file or folder")
    if request.out.exists() and any(request.out.iterdir()):
        raise BadInput(f"--out {request.out}: exists and is not empty; give a new folder for the draft")
    argv = shlex.split(request.command)
    if not argv:
        raise BadInput("--command is empty: give the command the reference ran, e.g. 'python embed.py …'")
    entrypoint = request.entrypoint or next((token for token in argv[1:] if token.endswith(".py")), None)
    if entrypoint is None:
        raise BadInput("cannot tell the entry point from --command: give --entrypoint FILE")

    if request.image is None and request.python is None:
        raise BadInput("give --python (the reference venv's bin/python) or --image REF (the image it ran in)")
    if request.image is not None and (request.repeat or request.vary):
        raise BadInput(
            "--repeat or --vary with --image: reruns inside the image are not implemented yet; record from inside the "
            "container with --python to measure the spread, or leave --repeat out"
        )
    home = os.environ.get("HOME", "")
    local_paths = [home, str(request.code.resolve()), str(Path.cwd())]
    if request.image is None and request.python is not None:
        local_paths.append(str(request.python.parent.parent))
    redactor = Redactor(local_paths)
    notes: list[str] = []
    image: ImageObservation | None = None
    if request.image is not None:
        image = observe_image(request.image, str(request.python or "python"))
        observed = image.interpreter
    else:
        assert request.python is not None
        observed = observe_interpreter(request.python)
    torch = observed.get("torch") or {}
    platform, backend = _platform(request, torch)
    python_version = ".".join(str((observed.get("python") or {}).get("version", "3")).split(".")[:2])
    requirements = top_level_requirements(observed, notes)
    base_note: str | None = None
    base = request.base_image
    if image is not None and base is None:
        base, base_note = base_for(image.facts["os"], python_version, platform, backend)
        if base_note:
            notes.append(base_note.removeprefix("TO CONFIRM: "))

    request.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{request.out.name}.", dir=request.out.parent))
    try:
        (staging / "record").mkdir()
        skip = {request.outputs.resolve(), *(p.resolve() for p in (*request.data, *request.weights))}
        note = links_note("app", _copy_tree(request.code, staging / "app", skip))
        if note:
            notes.append(note)
        mapped = [*_both(request.outputs, "/orch/output"), *_both(request.code, "/opt/app")]
        inputs: list[dict[str, str]] = []
        # A --data file or folder is one sample input (a folder: one item, its tree hash), at /orch/input/<path>.
        for path in request.data:
            target = staging / "sample" / path.name
            _copy_item(path, target)
            relative = target.relative_to(staging).as_posix()
            inputs.append({"path": relative, "sha256": path_sha256(staging, relative, Where("record"))})
            mapped += _both(path, f"/orch/input/{relative}")
        weights: list[dict[str, str]] = []
        for path in request.weights:
            owner = (
                None
                if request.python is None or request.image is not None
                else distribution_owning(path, request.python)
            )
            if owner is not None:
                # Files of an installed distribution: the lock pins its wheel's hash, so they are not copied
                # again; the command reads them where the rebuilt image's venv holds them.
                notes.append(owner.note(path.name))
                mapped += _both(path, f"/opt/venv/lib/python{python_version}/site-packages/{owner.relative}")
                continue
            name = identifier(path.name.rsplit(".", 1)[0] if path.is_file() else path.name)
            target = staging / "weights" / path.name
            _copy_item(path, target)
            relative = target.relative_to(staging).as_posix()
            hub = hub_origin(path)
            if hub is not None:
                # From a Hugging Face hub cache: where they came from is in the path, pinned to its commit.
                provenance = f"Hugging Face hub {hub}, read from a local hub cache"
                notes.append(
                    f"--weights {path.name}: from the Hugging Face hub cache; copied into weights/ — to fetch them "
                    f"from the hub instead, replace 'path' with uri: {hub} (docs/remote-sources.md)"
                )
            else:
                provenance = "TO CONFIRM: who made these weights, from what, when (a URI, a run id)"
            weights.append(
                {
                    "name": name,
                    "path": relative,
                    "sha256": path_sha256(staging, relative, Where("record")),
                    "provenance": provenance,
                }
            )
            mapped += _both(path, f"/orch/weights/{name}")
        _copy_tree(request.outputs, staging / "reference", set())
        outputs = observed_outputs(staging / "reference")

        run_argv = [str(request.python or "python") if argv[0] in ("python", "python3") else argv[0], *argv[1:]]
        durations: list[float] = []
        varied_seconds: dict[str, float] = {}
        # The --repeat reruns first (spread under the reference's own settings), then one per --vary value.
        settings: list[tuple[str, str] | None] = [None] * request.repeat
        settings += [(name, value) for name, values in request.vary for value in values]
        for setting in settings:
            with tempfile.TemporaryDirectory(prefix="orch-record-rerun-") as rerun:
                rerun_map = [Mapped(str(request.outputs), rerun), Mapped(str(request.outputs.resolve()), rerun)]
                command = [run_argv[0], *container_command(run_argv, rerun_map)[1:]]
                env = None if setting is None else {**os.environ, setting[0]: setting[1]}
                seconds = _run_command(command, request.code, timeout=3600, env=env)
                if setting is None:
                    durations.append(seconds)
                else:
                    varied_seconds[f"{setting[0]}={setting[1]}"] = seconds
                for output in outputs:
                    spread = measure_spread(staging / "reference" / output.file, Path(rerun) / output.file, output)
                    into = (
                        output.spread if setting is None else output.varied.setdefault(f"{setting[0]}={setting[1]}", {})
                    )
                    merge_spread(into, spread)

        code = redactor.value(code_revision(request.code), "code")
        environ = image.environment if image is not None else os.environ
        withheld = withheld_numerics(environ)
        if withheld:
            notes.append(
                f"{', '.join(withheld)}: numerics variable(s) whose name or value looks like a credential, left out of "
                "the record or recorded as withheld; if one changes results, write its value into the dossier by hand"
            )
        environment = {
            "interpreter": redactor.value(observed, "environment"),
            "numerics_environment": redactor.value(numerics_environment(environ), "environment variables"),
            "host": redactor.value(host_facts(), "host"),
        }
        if image is not None:
            # The image's own facts; the host's (GPU, driver, CPU) are the machine the container ran on.
            environment["image"] = redactor.value(image.facts, "image")
        freeze = [
            redactor.text(line, f"pip freeze > line {number}")
            for number, line in enumerate((observed.get("pip") or {}).get("freeze") or [], start=1)
        ]
        command_shown = container_command(argv, mapped)
        refuse_host_paths(command_shown, request)
        for position, token in enumerate(command_shown):
            if redactor.text(token, "command") != token:
                # The draft's command must run as written: a placeholder in it would not. A credential belongs in
                # an environment variable the dossier names, never on the command line.
                raise BadInput(
                    f"--command argument {position} holds a credential or a local path orch would have to hide; pass "
                    "a secret through an environment variable, and a path with --data, --weights or inside --code"
                )
        _write_json(staging / "record" / "environment.json", environment)
        _write_json(staging / "record" / "code.json", code)
        _write_json(staging / "record" / "outputs.json", [vars(o) for o in outputs])
        _write_json(
            staging / "record" / "runs.json",
            {"reruns": request.repeat, "seconds": durations, "varied_seconds": varied_seconds},
        )
        (staging / "record" / "pip-freeze.txt").write_text("".join(f"{line}\n" for line in freeze), encoding="utf-8")
        header = (
            "# The reference environment's top-level distributions (asked for, or required by nothing else installed),\n"
            "# at the versions it ran. Their dependencies are not pinned here: the first `orch lock dossier.yaml`\n"
            "# prefers the versions of record/pip-freeze.txt (the reference's full inventory), so the lock reproduces\n"
            "# the reference on the same target; change a line here (another torch) and lock again to move on purpose.\n"
        )
        (staging / "requirements.in").write_text(header + "".join(f"{r}\n" for r in requirements), encoding="utf-8")
        default = vendor.default_base_image(platform, backend)
        if base is None and base_note is None and default is None:
            notes.append(f"orch's table has no default base image for {platform} {backend}: set system.base_image")
        torch_index = None
        local = str(torch.get("version") or "").partition("+")[2]
        if torch.get("importable") and local:
            torch_index = vendor.torch_index_url(local)
        timeout = max(60, int(10 * max([*durations, *varied_seconds.values()], default=6.0)))
        document = draft_document(
            name=request.name or identifier(request.code.resolve().name),
            entrypoint=entrypoint,
            options_note=" ".join(command_shown),
            python_version=python_version,
            platform=platform,
            backend_version=backend,
            base_image=base,
            torch_index=torch_index,
            command=command_shown,
            inputs=inputs,
            weights=weights,
            outputs=outputs,
            timeout_s=timeout,
            base_image_note=base_note,
        )
        _write_json(staging / "record" / "redactions.json", [vars(r) for r in redactor.found])
        text = _HEADER.format(
            commit=code.get("commit", "not a git tree"), dirty=code.get("dirty"), diff=code.get("diff_sha256")
        )
        (staging / "dossier.yaml").write_text(
            text + yaml.safe_dump(document, sort_keys=False, width=110, allow_unicode=True), encoding="utf-8"
        )
        if request.out.exists():
            request.out.rmdir()
        staging.rename(request.out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return RecordResult(request.out, redactor.found, outputs, notes, requirements)


_HEADER = """\
# Draft dossier written by `orch record` from the reference run, on the host where it ran.
# Every value here was observed, except the strings that start with "TO CONFIRM": those need a person's
# decision (`orch validate` lists the ones left). What was observed is in record/: environment.json
# (interpreter, pip inspect with install sources, torch's CUDA/ROCm versions, host, numerics settings),
# pip-freeze.txt, code.json, outputs.json and runs.json (the reruns' spread); redactions.json lists
# every local path and credential that was replaced. Next: `orch lock dossier.yaml`, then `orch rebuild`.
# Code: git commit {commit}, dirty: {dirty}, diff sha256: {diff}
"""


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
