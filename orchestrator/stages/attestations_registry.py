"""A pushed image's attestations, stored beside it in the registry, and found again by `orch verify REF --trust`.

Debian's distribution registry (2.8) has no OCI referrers API, so orch uses a tag convention, as cosign
does with its `.att` tags (orch's suffix differs, so cosign never misreads orch's layout as its own):

    REGISTRY/REPOSITORY:sha256-<hex of the image's manifest digest>.orch-att

names a one-layer image (`docker import` of a root filesystem holding `provenance.dsse.json`,
`verification.dsse.json` and their `.sshsig` files, nothing else) pushed through the same engine and
credentials as the image. The tag can move: nothing about it is trusted. What is found there is read as
untrusted input (bounded `docker save`, only those four names, regular files) and is accepted only when a
key of the trust file signed it and its subject names both the image id and the digest being verified,
before the image itself is pulled.
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
import tempfile
from pathlib import Path

from securesystemslib.signer import Signer

from orchestrator.attest.statements import REPORT_NAME
from orchestrator.dossier.paths import file_sha256
from orchestrator.engine import Engine, PullRequest, RegistryAuth, RemoveImage, RootfsImport
from orchestrator.errors import AttestationRefused, OrchError, RegistryError
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.report import Report
from orchestrator.stages.attestations import ATTESTATIONS, build_facts, write_attestations

#: The attestation image is a few KiB; a saved archive above this is not orch's.
MAX_SAVED_BYTES = 16 << 20
_NAMES = ("provenance.dsse.json", "provenance.sshsig", "verification.dsse.json", "verification.sshsig")


def attestation_tag(pinned: str) -> tuple[str, str]:
    """(repository, tag) of the attestations of `registry/repository@sha256:<hex>`."""
    repository, _, digest = pinned.partition("@")
    return repository, digest.replace(":", "-") + ".orch-att"


def push_attestations(engine: Engine, folder: Path, pinned: str, auth: RegistryAuth | None) -> str:
    """Push `folder/attestations/` as the attestation image of `pinned`; its `repository:tag`."""
    repository, tag = attestation_tag(pinned)
    with tempfile.TemporaryDirectory(prefix="orch-att-") as scratch:
        tar_path = Path(scratch) / "attestations.tar"
        with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as archive:
            for name in _NAMES:
                data = (folder / ATTESTATIONS / name).read_bytes()
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                archive.addfile(info, io.BytesIO(data))
        changes = [f'LABEL org.opencontainers.image.description="orch attestations of {pinned}"']
        engine.load(RootfsImport(tar_path, repository, tag, changes))
    try:
        engine.push(repository, tag, auth)
    finally:
        engine.remove(RemoveImage(f"{repository}:{tag}"))
    return f"{repository}:{tag}"


def attest_published(
    engine: Engine,
    *,
    cell: Path,
    record: BuildRecord,
    report: Report,
    pinned: str,
    signer: Signer,
    auth: RegistryAuth | None,
) -> str:
    """Sign and push the attestations of a night's published image, from its cell folder; the att reference.

    The statements name the cell's files as a hand-over would (`report/report.json` is the report `orch
    verify REF --report` is given, `build/build.json`, `build/Dockerfile`, `build/requirements.lock`).
    """
    candidates = {
        REPORT_NAME: cell / "report.json",
        "build/build.json": cell / "build.json",
        "build/Dockerfile": cell / "context" / "Dockerfile",
        "build/requirements.lock": cell / "context" / "requirements.lock",
    }
    files = {name: file_sha256(path) for name, path in candidates.items() if path.is_file()}
    facts = build_facts(record, report, files=files, dossier_file=Path(record.dossier.path).name, pinned=pinned)
    with tempfile.TemporaryDirectory(prefix="orch-att-") as scratch:
        write_attestations(Path(scratch), facts, signer)
        return push_attestations(engine, Path(scratch), pinned, auth)


def _layer_files(saved: bytes) -> dict[str, bytes]:
    """The four attestation files of a `docker save` archive of the attestation image (untrusted)."""
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        manifest_member = outer.getmember("manifest.json")
        manifest_file = outer.extractfile(manifest_member)
        if manifest_file is None:
            raise ValueError("manifest.json is not a file")
        manifest = json.loads(manifest_file.read(1 << 20))
        layers = manifest[0]["Layers"]
        for layer in layers:
            member = outer.getmember(str(layer))
            layer_file = outer.extractfile(member)
            if layer_file is None:
                raise ValueError(f"{layer} is not a file")
            with tarfile.open(fileobj=io.BytesIO(layer_file.read())) as inner:
                for item in inner.getmembers():
                    name = item.name.removeprefix("./")
                    if name in _NAMES and item.isreg():
                        content = inner.extractfile(item)
                        if content is not None:
                            found[name] = content.read(4 << 20)
    return found


def fetch_attestations(engine: Engine, pinned: str, auth: RegistryAuth | None) -> dict[str, bytes]:
    """The attestation files stored for `pinned` (pulled by their tag, read, and removed again here)."""
    repository, tag = attestation_tag(pinned)
    reference = f"{repository}:{tag}"
    was_here = engine.image(reference) is not None
    try:
        engine.pull(PullRequest(reference, auth, "registry"))
    except RegistryError as exc:
        raise AttestationRefused(
            f"{pinned} has no attestations in the registry ({reference}: {exc.message[:200]})",
            hint="The image was pushed unsigned; ask for `orch handover --push … --sign KEY` (or a signed night).",
        ) from None
    try:
        pulled = engine.image(reference)
        if pulled is None or pulled.size > MAX_SAVED_BYTES:
            raise AttestationRefused(f"{reference} is not an orch attestation image (missing, or over 16 MiB)")
        buffer = io.BytesIO()
        engine.save(reference, buffer)
        if buffer.tell() > MAX_SAVED_BYTES:
            raise AttestationRefused(f"{reference} is larger than {MAX_SAVED_BYTES >> 20} MiB; it is not orch's")
        try:
            return _layer_files(buffer.getvalue())
        except (tarfile.TarError, ValueError, KeyError, IndexError, TypeError, OSError) as exc:
            raise AttestationRefused(
                f"{reference} is not an orch attestation image ({ascii(str(exc))[:120]})"
            ) from None
    finally:
        if not was_here:
            # A leftover tag of a few KiB if this fails; the check's verdict matters more than the tidy-up.
            with contextlib.suppress(OrchError):
                engine.remove(RemoveImage(reference))
