"""`orch handover`: a folder another team can replay with `orch verify` on a clean machine.

Contents (every file listed with its sha256 in `SHA256SUMS`, written last):

    image.tar.gz        docker save of the built image (by tag), gzip-compressed; left out with
                        `--push … --no-image-file`, when the manifest's repository digest is the image's source
    dossier/            the dossier file and everything it references, at the same relative paths
    build/              the rendered Dockerfile, the lock, the wheel hashes, build.json, build.log,
                        pip-freeze.txt (the observed inventory), environment.json (every installed
                        file's sha256: the environment digest's list), sbom.cdx.json (CycloneDX SBOM
                        of the image)
    report/             report.json, report.md, report.html, junit.xml
    PROCEDURE.md        the exact sequence: load or rebuild, diagnose, run the sample, re-read the output;
                        its ```sh blocks run as they are, in order, and write only under $WORK
    ACCESS.md           which credentials are needed and how to provide them — by name only
    attestations/       with `--sign KEY`: the signed provenance and verification statements (stages/attestations.py),
                        outside SHA256SUMS, which they attest
    manifest.json       format orch.handover/1: dossier identity, image id and tag, files and sizes, and
                        with `--push` the repository digest (`registry/repository@sha256:…`)
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
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from securesystemslib.signer import Signer

from orchestrator import __version__
from orchestrator.attest.keys import load_signer
from orchestrator.compare.read import read_environment_file
from orchestrator.documents import read_document
from orchestrator.dossier.load import LoadedDossier
from orchestrator.dossier.paths import Where, copy_regular_file, copy_tree, file_sha256, locate, walk_tree
from orchestrator.engine import Engine, RegistryAuth
from orchestrator.errors import BadInput, DiskFull, RegistryError
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.environment import ENVIRONMENT_FILE
from orchestrator.model.image_ref import ImageReference
from orchestrator.model.manifest import HANDOVER_FORMAT, Manifest, ManifestFile
from orchestrator.model.report import Report
from orchestrator.plan.program import HandOver
from orchestrator.report.sbom import SBOM_FILE
from orchestrator.report.write import read_report
from orchestrator.resources import handover_templates_root, render_template
from orchestrator.stages.attestations import sign_folder
from orchestrator.stages.attestations_registry import push_attestations
from orchestrator.stages.build import read_record
from orchestrator.stages.handover_access import access_md
from orchestrator.stages.handover_remote import CACHE_IN_SHELL, remote_manifest
from orchestrator.stages.publish import publish_image
from orchestrator.stages.state import DONE, Run, StepOutcome
from orchestrator.timestamps import rfc3339_now

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
        source = locate(root, relative, "folder" if relative == loaded.model.code.source else "any", where)
        if source.is_dir():
            copy_tree(list(walk_tree(source, root, where)), target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_regular_file(source, target)
    return loaded.path.name


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
        # A remote item from orch's cache, where `orch fetch` (or `orch verify`) put it by its sha256.
        mounts += [
            f'-v "{CACHE_IN_SHELL}/objects/{item.sha256}:/orch/{kind}/{item.name}:ro"'
            for item in group
            if item.path is None
        ]
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


@dataclass(frozen=True)
class OutputCheck:
    """What `orch probe` checks of one declared output, as PROCEDURE.md lists it."""

    file: str
    shape: str | None
    dtype: str | None
    finite: bool
    ids_expected: str | None
    metric: str | None
    reference: str | None


def _procedure_md(
    loaded: LoadedDossier,
    dossier_file: str,
    image_id: str,
    tag: str,
    *,
    image_file: bool = True,
    pinned: str | None = None,
    signer: str | None = None,
) -> str:
    model = loaded.model
    outputs = [
        OutputCheck(
            file=output.file,
            shape=str(["*" if d is None else d for d in output.shape]) if output.shape is not None else None,
            dtype=output.dtype or None,
            finite=bool(output.finite),
            ids_expected=output.ids.expected if output.ids else None,
            metric=output.compare.metric if output.compare else None,
            reference=output.compare.reference if output.compare else None,
        )
        for output in model.expect.outputs
    ]
    return render_template(
        handover_templates_root(),
        "PROCEDURE.md.j2",
        autoescape=False,
        name=model.name,
        identity=loaded.identity,
        variant=loaded.variant,
        variant_option=f" --variant {shlex.quote(loaded.variant)}" if loaded.variant else "",
        dossier=shlex.quote(f"dossier/{dossier_file}"),
        tag=tag,
        image_id=image_id,
        image_file=IMAGE_FILE if image_file else None,
        pinned=pinned,
        sample_run=_sample_run_by_hand(loaded, image_id),
        outputs=outputs,
        signer=signer,
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
    push_to: ImageReference | None = None,
    auth: RegistryAuth | None = None,
    image_file: bool = True,
    built: tuple[BuildRecord, Report] | None = None,
    signer: Signer | None = None,
    include_remote: bool = False,
) -> Manifest:
    """Write the hand-over folder `out` from an `orch rebuild` folder.

    Remote data and weights (a `uri`) are handed over by reference (manifest.json's `remote`), or copied into
    `remote/` with `include_remote` (stages/handover_remote.py).

    With `push_to` (`registry/repository:tag`) the image is pushed first and the manifest records its
    repository digest; a push that fails stops the hand-over (RegistryError, nothing written). Without
    `image_file` the tarball is left out and the digest is the image's only source.

    `built`: the build's record and the report of the program that just wrote them (`orch rebuild
    --handover`), taken in memory; otherwise build.json and report.json are read from `rebuild_dir`.

    `signer`: sign the provenance and verification statements (`attestations/`), after SHA256SUMS, which
    they attest; the key is used in memory (or through the agent) and never written.
    """
    stage = on_stage or (lambda _: None)
    if not image_file and push_to is None:
        raise BadInput("a hand-over without image.tar.gz needs --push: the registry is then the image's only source")
    out = out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {out} exists and is not empty; a hand-over goes into a new folder")
    record: BuildRecord | None
    report: Report | None
    if built is not None:
        record, report = built
    else:
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

    environment = record.inventory.environment if record.inventory is not None else None
    pinned: str | None = None
    if push_to is not None:
        stage("push")
        pushed = publish_image(engine, record.image.id, push_to, auth)
        if pushed.pinned is None:
            raise RegistryError(
                f"the hand-over's push failed: {pushed.reason}",
                hint="Start the registry or fix its credentials (the variables --registry-user-env/"
                "--registry-password-env name), then hand over again; nothing was written.",
            )
        pinned = pushed.pinned

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.orch-partial-", dir=out.parent))
    try:
        staging.chmod(0o755)
        if image_file:
            stage("image")
            _write_image(engine, record.image.tag, staging / IMAGE_FILE)
        stage("dossier")
        dossier_file = _copy_dossier(loaded, staging / "dossier")
        remote = remote_manifest(loaded, staging, include=include_remote)
        build = staging / "build"
        build.mkdir()
        for name in ("build.json", "build.log", "pip-freeze.txt", SBOM_FILE):
            if (rebuild_dir / name).is_file():
                shutil.copy2(rebuild_dir / name, build / name)
        # The environment's file list, only when it is the one build.json's digest names (never a stale one).
        if environment is not None and read_environment_file(rebuild_dir / ENVIRONMENT_FILE, environment)[0]:
            shutil.copy2(rebuild_dir / ENVIRONMENT_FILE, build / ENVIRONMENT_FILE)
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
            _procedure_md(
                loaded,
                dossier_file,
                record.image.id,
                record.image.tag,
                image_file=image_file,
                pinned=pinned,
                signer=signer.public_key.keyid if signer is not None else None,
            ),
            encoding="utf-8",
        )
        (staging / "ACCESS.md").write_text(access_md(loaded), encoding="utf-8")
        stage("checksums")
        entries = _sums(staging)
        manifest = Manifest(
            orch_version=__version__,
            created=rfc3339_now(),
            dossier_name=loaded.model.name,
            dossier_file=dossier_file,
            identity=loaded.identity,
            variant=loaded.variant,
            platform=loaded.model.system.platform,
            image_id=record.image.id,
            image_tag=record.image.tag,
            report_verdict=report.verdict,
            files=[ManifestFile(path=p, sha256=h, size=s) for p, h, s in entries],
            repository_digest=pinned,
            environment_digest=environment.digest if environment is not None else None,
            remote=remote or None,
        )
        # Without a push (or a digest) the manifest stays exactly the older format's, so an older orch still reads it.
        left_out = {
            name
            for name, value in (
                ("repository_digest", pinned),
                ("environment_digest", manifest.environment_digest),
                ("remote", manifest.remote),
            )
            if value is None
        } or None
        (staging / MANIFEST_FILE).write_text(
            manifest.model_dump_json(indent=2, exclude=left_out) + "\n", encoding="utf-8"
        )
        sums = [(p, h) for p, h, _ in entries] + [(MANIFEST_FILE, file_sha256(staging / MANIFEST_FILE))]
        # SHA256SUMS last: its presence is what marks the folder complete.
        (staging / SUMS_FILE).write_text("".join(f"{h}  {p}\n" for p, h in sorted(sums)), encoding="utf-8")
        if signer is not None:
            stage("sign")
            sign_folder(staging, record, report, dossier_file=dossier_file, pinned=pinned, signer=signer)
            if pinned is not None:
                stage("push attestations")
                push_attestations(engine, staging, pinned, auth)
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


def do_handover(step: HandOver, run: Run) -> StepOutcome:
    """The program's step `handover`: only after a passed report, on the engine the program used."""
    if run.report is None or run.report.verdict != "passed" or run.record is None:
        return StepOutcome("skipped", "the report did not pass: nothing is handed over")
    signer = load_signer(step.sign_key, run.environ.get("SSH_AUTH_SOCK")) if step.sign_key is not None else None
    run.manifest = write_handover(
        run.loaded,
        run.engine,
        run.out,
        step.folder,
        on_stage=lambda part: run.hooks.on_probe_stage(f"hand-over: {part}"),
        built=(run.record, run.report),
        signer=signer,
    )
    return DONE


def read_manifest(folder: Path) -> Manifest:
    return read_document(folder / MANIFEST_FILE, Manifest, HANDOVER_FORMAT, "hand-over manifest")
