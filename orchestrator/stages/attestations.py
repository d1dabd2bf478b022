"""A hand-over's signed attestations: written by `orch handover --sign`, checked by `orch verify --trust`.

The folder gains `attestations/` (outside SHA256SUMS, which they attest):

    provenance.dsse.json     SLSA provenance v1 of the image (orchestrator.attest.statements), in a DSSE envelope
    provenance.sshsig        the same key's SSH signature over that envelope's PAE bytes (for `ssh-keygen -Y verify`)
    verification.dsse.json   the report's verdict (in-toto test-result), in a DSSE envelope
    verification.sshsig      likewise

With `--trust FILE`, `orch verify` refuses — before anything is loaded or run, exit 1, `error[attestation-refused]`:
a folder without both envelopes, an envelope no key of the trust file signed (or one that key's validity
window excludes), a statement that is not valid in-toto (by the bindings' parsers), a statement whose
subject is not the manifest's image (and, for a pushed hand-over, not its repository digest), and an
attested file that is missing or changed (SHA256SUMS and manifest.json must be among them: they cover the
rest). Without `--trust` it says plainly that the folder is unattributed, or whose key it claims, unchecked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.signer import Signer

from orchestrator import __version__
from orchestrator.attest.envelope import parse_envelope, sign_statement, signer_ids, verify_envelope
from orchestrator.attest.keys import TrustedKey
from orchestrator.attest.statements import (
    PROVENANCE,
    PROVENANCE_FILE,
    TEST_RESULT,
    VERIFICATION_FILE,
    BuildFacts,
    attested_files,
    checked_statement,
    provenance_statement,
    subject_digests,
    verification_statement,
)
from orchestrator.dossier.paths import file_sha256
from orchestrator.errors import AttestationRefused
from orchestrator.fsutil import atomic_write_text
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.report import Report

ATTESTATIONS = "attestations"
_ENVELOPES = {PROVENANCE_FILE: PROVENANCE, VERIFICATION_FILE: TEST_RESULT}
#: Every name `attestations/` may hold; anything else there is an added file.
ATTESTATION_NAMES = frozenset(
    f"{ATTESTATIONS}/{name}"
    for envelope in _ENVELOPES
    for name in (envelope, envelope.replace(".dsse.json", ".sshsig"))
)
#: Files the verification statement must attest: together they cover every other file.
REQUIRED = ("SHA256SUMS", "manifest.json")


def build_facts(
    record: BuildRecord,
    report: Report,
    *,
    files: dict[str, str],
    dossier_file: str,
    pinned: str | None,
) -> BuildFacts:
    """The statements' facts from a build record and its report (`files`: the folder's, path → sha256)."""
    assert record.image is not None  # only a built image is attested
    environment = record.inventory.environment if record.inventory is not None else None
    return BuildFacts(
        image_id=record.image.id,
        image_tag=record.image.tag,
        dossier_name=record.dossier.name,
        identity=record.dossier.identity,
        variant=record.dossier.variant,
        platform=report.dossier.platform,
        orch_version=__version__,
        builder=record.context.builder,
        base_ref=record.base_image.ref,
        base_id=record.base_image.id,
        base_digest=record.base_image.digest,
        code_source=record.code.source,
        code_revision=record.code.revision,
        code_dirty=record.code.dirty,
        install_mode=record.context.install_mode,
        context_digest=record.context.digest,
        files=files,
        dossier_file=dossier_file,
        pinned=pinned,
        stages={name: stage.status for name, stage in report.stages.items()},
        verdict=report.verdict,
        environment_digest=environment.digest if environment is not None else None,
    )


def statements_of(facts: BuildFacts) -> dict[str, dict[str, Any]]:
    return {PROVENANCE_FILE: provenance_statement(facts), VERIFICATION_FILE: verification_statement(facts)}


def write_attestations(folder: Path, facts: BuildFacts, signer: Signer) -> list[Path]:
    """Sign both statements and write them (and their SSH signatures) under `folder/attestations/`."""
    target = folder / ATTESTATIONS
    target.mkdir(exist_ok=True)
    written = []
    for name, statement in statements_of(facts).items():
        signed = sign_statement(statement, signer)
        atomic_write_text(target / name, signed.envelope)
        atomic_write_text(target / name.replace(".dsse.json", ".sshsig"), signed.sshsig)
        written += [target / name, target / name.replace(".dsse.json", ".sshsig")]
    return written


def sign_folder(
    folder: Path, record: BuildRecord, report: Report, *, dossier_file: str, pinned: str | None, signer: Signer
) -> None:
    """Attest a finished hand-over folder: every file SHA256SUMS lists, and SHA256SUMS itself."""
    files = {}
    for line in (folder / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        files[name] = digest
    files["SHA256SUMS"] = file_sha256(folder / "SHA256SUMS")
    facts = build_facts(record, report, files=files, dossier_file=dossier_file, pinned=pinned)
    write_attestations(folder, facts, signer)


@dataclass(frozen=True)
class Attribution:
    """Who signed a hand-over's attestations, once checked against the trust file."""

    principals: str
    keyid: str
    where: str  # the trust file's line

    def line(self) -> str:
        return f"signed by {self.principals} ({self.keyid}, {self.where}); provenance and verification attested"


def check_statements(
    envelopes: dict[str, bytes],
    trusted: list[TrustedKey],
    *,
    image_id: str,
    pinned: str | None,
    display: str,
) -> tuple[Attribution, dict[str, str]]:
    """Both envelopes signed by a trusted key, of the right kinds, about this image: (who, attested files)."""
    files: dict[str, str] = {}
    attribution: Attribution | None = None
    for name, predicate_type in _ENVELOPES.items():
        where = f"{display}{name}"
        if name not in envelopes:
            raise AttestationRefused(
                f"{where} is missing: the hand-over is unattributed (not signed), and --trust requires a signature",
                hint="Ask the team that made it to hand over with `orch handover --sign KEY`.",
            )
        verified = verify_envelope(parse_envelope(envelopes[name], where), trusted, where)
        statement = checked_statement(verified.statement, where)
        if statement["predicateType"] != predicate_type:
            raise AttestationRefused(f"{where} is a {statement['predicateType'][:80]} statement, not {predicate_type}")
        digests = subject_digests(statement)
        wanted = [image_id] + ([pinned.partition("@")[2]] if pinned else [])
        for digest in wanted:
            if digest.removeprefix("sha256:") not in digests:
                raise AttestationRefused(
                    f"{where} is about another image: its subject does not name {digest[:19]}",
                    hint="A valid signature on a statement about another image proves nothing about this one.",
                )
        for attested, digest in attested_files(statement).items():
            if files.get(attested, digest) != digest:
                raise AttestationRefused(f"the two attestations name different sha256 for {attested[:120]!r}")
            files[attested] = digest
        attribution = attribution or Attribution(
            verified.signer.principals, verified.signer.keyid, verified.signer.where
        )
    assert attribution is not None
    return attribution, files


def read_attestations(folder: Path, present: dict[str, int]) -> dict[str, bytes]:
    """The envelopes in `folder/attestations/` (names already checked by the folder scan, no symlink)."""
    from orchestrator.stages.handover_folder import MAX_SUMS_BYTES, open_inside

    found = {}
    for name in _ENVELOPES:
        relative = f"{ATTESTATIONS}/{name}"
        if relative in present:
            if present[relative] > MAX_SUMS_BYTES:
                raise AttestationRefused(f"{relative} is larger than {MAX_SUMS_BYTES >> 20} MiB; orch writes a few KiB")
            with os.fdopen(open_inside(folder, relative), "rb") as handle:
                found[name] = handle.read(MAX_SUMS_BYTES + 1)
    return found


def check_folder_attestations(
    folder: Path,
    present: dict[str, int],
    listed: dict[str, str],
    trusted: list[TrustedKey],
    *,
    image_id: str,
    pinned: str | None,
) -> Attribution:
    """`orch verify --trust` on a folder `check_folder_files` checked: signatures, subjects, every attested file.

    `listed` is SHA256SUMS, each digest already checked against its file, so an attested file listed there is
    compared with that digest (no second hash of a large image archive); SHA256SUMS itself is hashed here.
    """
    from orchestrator.stages.handover import SUMS_FILE
    from orchestrator.stages.handover_folder import sha256_inside

    attribution, files = check_statements(
        read_attestations(folder, present), trusted, image_id=image_id, pinned=pinned, display=f"{ATTESTATIONS}/"
    )
    for name in REQUIRED:
        if name not in files:
            raise AttestationRefused(f"the attestations do not attest {name}; orch attests it in every hand-over")
    # The named files first, so a changed file is named itself; SHA256SUMS and manifest.json, which cover
    # the rest, last.
    for name, digest in sorted(files.items(), key=lambda item: (item[0] in REQUIRED, item[0])):
        if name == SUMS_FILE and name in present:
            actual = sha256_inside(folder, name)
        elif name in listed:
            actual = listed[name]
        else:
            raise AttestationRefused(f"{name[:120]!r} is attested but missing from the folder")
        if actual != digest:
            raise AttestationRefused(
                f"{name} is not the file that was attested (its sha256 differs): it was changed after signing",
            )
    return attribution


def unattributed_line(folder: Path, present: dict[str, int]) -> str:
    """What `orch verify` without `--trust` says about who made the folder (nothing checked)."""
    envelopes = read_attestations(folder, present)
    if not envelopes:
        return (
            "unattributed: the folder carries no signature, so anyone could have made it "
            "(its makers can sign it with `orch handover --sign KEY`)"
        )
    claimed: set[str] = set()
    for name, data in envelopes.items():
        try:
            claimed.update(signer_ids(parse_envelope(data, name)))
        except AttestationRefused:
            continue
    keys = ", ".join(ascii(keyid)[1:-1][:60] for keyid in sorted(claimed)) or "an unreadable signature"
    return f"unattributed: signed by {keys}, not checked (give --trust FILE with the team's public key)"
