"""`orch handover`: a folder another team can replay with `orch verify` on a clean machine.

Contents (every file listed with its sha256 in `SHA256SUMS`, written last):

    image.tar.gz        docker save of the built image (by tag), gzip-compressed
    dossier/            the dossier file and everything it references, at the same relative paths
    build/              the rendered Dockerfile, the lock, the wheel hashes, build.json, build.log,
                        pip-freeze.txt (the observed inventory)
    report/             report.json, report.md, report.html, junit.xml
    PROCEDURE.md        the exact sequence: load or rebuild, diagnose, run the sample, re-read the output;
                        its ```sh blocks run as they are, in order, and write only under $WORK
    ACCESS.md           which credentials are needed and how to provide them — by name only
    manifest.json       format orch.handover/1: dossier identity, image id and tag, files and sizes
    SHA256SUMS          `sha256sum -c` compatible

The folder is assembled under a hidden sibling name and renamed into place at the very end, so a
half-written folder never looks complete: an interrupted hand-over leaves no folder at the destination,
and the hidden one has no SHA256SUMS, which `orch verify` requires.
"""

from __future__ import annotations

import gzip
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from orchestrator import __version__
from orchestrator.documents import read_document
from orchestrator.dossier.load import LoadedDossier
from orchestrator.dossier.paths import Where, copy_regular_file, copy_tree, file_sha256, locate, walk_tree
from orchestrator.engine import Engine
from orchestrator.errors import BadInput, DiskFull
from orchestrator.model.manifest import HANDOVER_FORMAT, Manifest, ManifestFile
from orchestrator.report.write import read_report
from orchestrator.stages.build import read_record

IMAGE_FILE = "image.tar.gz"
SUMS_FILE = "SHA256SUMS"
MANIFEST_FILE = "manifest.json"


def _copy_dossier(loaded: LoadedDossier, dest: Path) -> str:
    """The dossier and every file it references, at the same paths relative to its folder.

    Each path is located again by the dossier-folder rule (`orchestrator.dossier.paths`): the folder may
    have changed since it was loaded, and a link out of it must never bring a host file in here. Links
    that stay inside are copied as the files they point to.
    """
    root = loaded.root
    dest.mkdir(parents=True)
    copy_regular_file(loaded.path, dest / loaded.path.name)
    for relative in sorted(loaded.files):
        where = Where(str(loaded.path))
        target = dest.joinpath(*PurePosixPath(relative).parts)
        source = locate(root, relative, "folder" if relative == loaded.model.code.source else "file", where)
        if source.is_dir():
            copy_tree(list(walk_tree(source, root, where)), target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_regular_file(source, target)
    return loaded.path.name


def _access_md(loaded: LoadedDossier) -> str:
    model = loaded.model
    rows: list[tuple[str, str, str]] = []
    for index in model.python.indexes:
        if index.access:
            rows.append((index.access, f"package index {index.url}", "`user:token`; host side only (wheelhouse mode)"))
    for kind, items in (("data", model.data), ("weights", model.weights)):
        for item in items:
            if item.access:
                where = item.uri or item.path or ""
                rows.append((item.access, f"{kind} `{item.name}` ({where})", "whatever the provider issues"))
    lines = [
        f"# Access: {model.name}",
        "",
        "Credentials are referenced by **name** only. Nothing in this folder — the image included — holds a",
        "secret value. Provide each one as an environment variable on the host that runs orch:",
        "",
    ]
    if not rows:
        lines += [
            "This dossier needs **no credentials**: every index, data set and weight file is public or local.",
            "",
        ]
    else:
        lines += ["| variable | grants access to | value |", "| --- | --- | --- |"]
        lines += [f"| `{name}` | {what} | {value} |" for name, what, value in rows]
        lines += ["", "Example: `export NAME='…'` before `orch rebuild`; never write the value into the dossier.", ""]
    return "\n".join(lines)


_FENCE = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def procedure_blocks(text: str) -> list[str]:
    """The shell commands of a PROCEDURE.md: its ```sh blocks, in order (what a reader would paste)."""
    return [block.strip("\n") for block in _FENCE.findall(text)]


def _sample_run_by_hand(loaded: LoadedDossier, image_id: str) -> list[str]:
    """`docker run` of the sample with the mounts, environment and isolation `orch probe` gives it."""
    model = loaded.model

    def mount(source: str, target: str) -> str:
        return f'-v "$PWD"/{shlex.quote(f"dossier/{source}:{target}:ro")}'

    mounts = [mount(item.path, f"/orch/input/{item.path}") for item in model.expect.inputs]
    for kind, group in (("data", model.data), ("weights", model.weights)):
        mounts += [mount(item.path, f"/orch/{kind}/{item.name}") for item in group if item.path is not None]
    mounts.append('-v "$WORK/out:/orch/output"')
    environment = [f"-e PYTHONHASHSEED={model.determinism.seed}", "-e HF_HUB_OFFLINE=1"]
    if model.determinism.cublas_workspace_config:
        environment.append(f"-e CUBLAS_WORKSPACE_CONFIG={shlex.quote(model.determinism.cublas_workspace_config)}")
    gpu = {"cuda": ["--gpus all"], "rocm": ["--device /dev/kfd", "--device /dev/dri", "--group-add video"], "cpu": []}
    options = [
        "--rm --network none --cap-drop ALL --security-opt no-new-privileges",
        "--memory 4g --memory-swap 4g --pids-limit 1024 --shm-size 1g",
        *gpu[model.system.platform],
        *environment,
        *mounts,
    ]
    command = " ".join(shlex.quote(part) for part in model.expect.command)
    return [
        'mkdir -p "$WORK/out" && chmod 0777 "$WORK/out"    # the sample runs as uid 10001',
        "docker run " + " \\\n  ".join(options) + " \\",
        f"  {image_id} {command}",
    ]


def _procedure_md(loaded: LoadedDossier, dossier_file: str, image_id: str, tag: str) -> str:
    model = loaded.model
    variant = f" --variant {shlex.quote(loaded.variant)}" if loaded.variant else ""
    dossier = shlex.quote(f"dossier/{dossier_file}")
    checks = []
    for output in model.expect.outputs:
        parts = [f"`{output.file}`"]
        if output.shape is not None:
            parts.append(f"shape {['*' if d is None else d for d in output.shape]}")
        if output.dtype:
            parts.append(output.dtype)
        if output.finite:
            parts.append("no NaN/Inf")
        if output.ids:
            parts.append(f"ids in the order of `{output.ids.expected}`")
        if output.compare:
            parts.append(f"{output.compare.metric} against `{output.compare.reference}`")
        checks.append("- " + ", ".join(parts))
    return "\n".join(
        [
            f"# Procedure: {model.name}",
            "",
            f"Dossier identity `{loaded.identity}`{f', variant `{loaded.variant}`' if loaded.variant else ''}; "
            f"image `{tag}` (`{image_id}`).",
            "",
            "Run every block below from this folder, in order (they are tested that way). Nothing is written",
            "into this folder — a file added to it makes `orch verify .` fail — so every output goes under the",
            "folder named by `WORK`: set it first, or let the first block make a fresh one.",
            "",
            "```sh",
            'WORK="${WORK:-$(mktemp -d)}"    # every output goes here, outside the hand-over folder',
            'echo "outputs go to $WORK"',
            "```",
            "",
            "## 0. Check the folder",
            "",
            "```sh",
            "sha256sum --check --quiet --strict SHA256SUMS",
            "```",
            "",
            "## 1. Load the image — or rebuild it from the dossier",
            "",
            "```sh",
            f"docker load -i {IMAGE_FILE}",
            f"test \"$(docker image inspect --format '{{{{.Id}}}}' {tag})\" = {image_id}",
            "```",
            "",
            f"`docker load` restores the tag `{tag}`, moving it if it names another image on this machine;",
            "`orch verify` (last step) instead checks the tarball's own manifest first and loads it with no tag.",
            "To rebuild instead (a fresh image from the same dossier, never a copied environment):",
            "",
            "```sh",
            f'orch rebuild {dossier}{variant} --out "$WORK/rebuilt"',
            "```",
            "",
            "## 2. Diagnose the host",
            "",
            "```sh",
            f"orch doctor {dossier}{variant}",
            "```",
            "",
            "## 3. Run the sample",
            "",
            "```sh",
            f'orch probe {dossier}{variant} --image {image_id} --out "$WORK/probe-out"',
            "```",
            "",
            "By hand, with the mounts, environment and isolation orch uses (inputs under `/orch/input/<path>`,",
            "data under `/orch/data/<name>`, weights under `/orch/weights/<name>`, all read-only; the output",
            "folder `/orch/output` writable). orch also mounts its determinism settings, which this omits:",
            "",
            "```sh",
            *_sample_run_by_hand(loaded, image_id),
            "```",
            "",
            "## 4. Re-read the output",
            "",
            "`orch probe` re-reads the output folder on the host and checks, per output:",
            "",
            *checks,
            "",
            'Its report (`"$WORK/probe-out/report.html"`) shows each layer — image, host, device, sample — on its own.',
            "",
            "## All of it, with a comparison against the shipped report",
            "",
            "```sh",
            'orch verify . --out "$WORK/verify-out"',
            "```",
            "",
        ]
    )


def _write_image(engine: Engine, tag: str, dest: Path) -> None:
    with dest.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as packed:
        engine.save(tag, packed)  # type: ignore[arg-type]  # GzipFile is a binary writer


def _sums(folder: Path) -> list[tuple[str, str, int]]:
    entries = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        if relative not in (SUMS_FILE, MANIFEST_FILE):
            entries.append((relative, file_sha256(path), path.stat().st_size))
    return entries


def write_handover(
    loaded: LoadedDossier,
    engine: Engine,
    rebuild_dir: Path,
    out: Path,
    *,
    on_stage: Callable[[str], None] | None = None,
) -> Manifest:
    stage = on_stage or (lambda _: None)
    out = out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {out} exists and is not empty; a hand-over goes into a new folder")
    record = read_record(rebuild_dir / "build.json") if (rebuild_dir / "build.json").is_file() else None
    report = read_report(rebuild_dir / "report.json") if (rebuild_dir / "report.json").is_file() else None
    if record is None or record.image is None or report is None or report.image is None:
        raise BadInput(
            f"{rebuild_dir} holds no successful build and report",
            hint="Run `orch rebuild DOSSIER --out DIR` first and hand over from DIR (--from DIR).",
        )
    if record.dossier.identity != loaded.identity or report.dossier.identity != loaded.identity:
        raise BadInput(f"the records in {rebuild_dir} are of another dossier identity than {loaded.path}")
    if report.image.id != record.image.id:
        raise BadInput(f"build.json and report.json in {rebuild_dir} name different images")

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.orch-partial-", dir=out.parent))
    try:
        staging.chmod(0o755)
        stage("image")
        _write_image(engine, record.image.tag, staging / IMAGE_FILE)
        stage("dossier")
        dossier_file = _copy_dossier(loaded, staging / "dossier")
        build = staging / "build"
        build.mkdir()
        for name in ("build.json", "build.log", "pip-freeze.txt"):
            if (rebuild_dir / name).is_file():
                shutil.copy2(rebuild_dir / name, build / name)
        for name in ("Dockerfile", "requirements.lock"):
            shutil.copy2(rebuild_dir / "context" / name, build / name)
        (build / "wheels.sha256").write_text(
            "".join(f"{w.sha256}  {w.file}\n" for w in record.context.wheels), encoding="utf-8"
        )
        reports = staging / "report"
        reports.mkdir()
        for name in ("report.json", "report.md", "report.html", "junit.xml"):
            shutil.copy2(rebuild_dir / name, reports / name)
        (staging / "PROCEDURE.md").write_text(
            _procedure_md(loaded, dossier_file, record.image.id, record.image.tag), encoding="utf-8"
        )
        (staging / "ACCESS.md").write_text(_access_md(loaded), encoding="utf-8")
        stage("checksums")
        entries = _sums(staging)
        manifest = Manifest(
            orch_version=__version__,
            created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            dossier_name=loaded.model.name,
            dossier_file=dossier_file,
            identity=loaded.identity,
            variant=loaded.variant,
            platform=loaded.model.system.platform,
            image_id=record.image.id,
            image_tag=record.image.tag,
            report_verdict=report.verdict,
            files=[ManifestFile(path=p, sha256=h, size=s) for p, h, s in entries],
        )
        (staging / MANIFEST_FILE).write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
        sums = [(p, h) for p, h, _ in entries] + [(MANIFEST_FILE, file_sha256(staging / MANIFEST_FILE))]
        # SHA256SUMS last: its presence is what marks the folder complete.
        (staging / SUMS_FILE).write_text("".join(f"{h}  {p}\n" for p, h in sorted(sums)), encoding="utf-8")
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(staging, out)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if exc.errno not in DiskFull.ERRNOS:
            raise
        free = shutil.disk_usage(out.parent).free
        raise DiskFull(
            f"no space left in {out.parent} while writing the hand-over (the image is "
            f"{record.image.size_bytes / 1e9:.1f} GB before compression; {free / 1e9:.1f} GB are free now)",
            hint="Nothing was left behind. Free some space or give --out a folder on a larger disk.",
        ) from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def read_manifest(folder: Path) -> Manifest:
    return read_document(folder / MANIFEST_FILE, Manifest, HANDOVER_FORMAT, "hand-over manifest")
