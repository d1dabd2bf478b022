"""Signing keys, trust files, DSSE envelopes and the in-toto statements (orchestrator/attest), in memory.

Keys are made here with pyca/cryptography in every form people keep them (OpenSSH and PEM private keys,
Ed25519, ECDSA P-256/P-384, RSA); the agent path and `ssh-keygen -Y verify` of the SSH signature are in
tests/system/test_attest_tools.py (they need real processes).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from orchestrator.attest.envelope import parse_envelope, sign_statement, verify_envelope
from orchestrator.attest.keys import fingerprint, load_signer, load_trust
from orchestrator.attest.statements import (
    PROVENANCE,
    TEST_RESULT,
    BuildFacts,
    attested_files,
    checked_statement,
    provenance_statement,
    subject_digests,
    verification_statement,
)
from orchestrator.errors import AttestationRefused, BadInput

IMAGE = "sha256:" + "a1" * 32
PINNED = "127.0.0.1:5000/team/app@sha256:" + "b2" * 32


def _facts(**changes: Any) -> BuildFacts:
    values: dict[str, Any] = {
        "image_id": IMAGE,
        "image_tag": "orch/app:abc",
        "dossier_name": "app",
        "identity": "c3" * 32,
        "variant": None,
        "platform": "cpu",
        "orch_version": "0.1.0",
        "builder": "buildkit",
        "base_ref": "orch/debian-python:bookworm",
        "base_id": "sha256:" + "d4" * 32,
        "base_digest": None,
        "code_source": "app",
        "code_revision": "0123456789abcdef0123456789abcdef01234567",
        "install_mode": "wheels",
        "context_digest": "sha256:" + "e5" * 32,
        "files": {
            "SHA256SUMS": "f6" * 32,
            "manifest.json": "07" * 32,
            "report/report.json": "18" * 32,
            "dossier/dossier.yaml": "29" * 32,
            "build/Dockerfile": "3a" * 32,
            "image.tar.gz": "4b" * 32,
        },
        "dossier_file": "dossier.yaml",
        "stages": {"image": "passed", "host": "passed", "device": "skipped", "sample": "passed"},
        "verdict": "passed",
        "environment_digest": "sha256:" + "5c" * 32,
    }
    values.update(changes)
    return BuildFacts(**values)


def _ssh_private(key: Any) -> bytes:
    return bytes(key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()))


def _pem_private(key: Any) -> bytes:
    return bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))


def _pub_line(key: Any, comment: str = "") -> str:
    line = key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    return f"{line} {comment}".strip()


KEYS = {
    "ed25519-openssh": (ed25519.Ed25519PrivateKey.generate, _ssh_private),
    "ed25519-pem": (ed25519.Ed25519PrivateKey.generate, _pem_private),
    "ecdsa-p256-openssh": (lambda: ec.generate_private_key(ec.SECP256R1()), _ssh_private),
    "ecdsa-p384-pem": (lambda: ec.generate_private_key(ec.SECP384R1()), _pem_private),
    "rsa-openssh": (lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048), _ssh_private),
}


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_every_kind_of_key_file_signs_and_its_allowed_signers_line_verifies(tmp_path: Path, kind: str) -> None:
    make, serialize = KEYS[kind]
    key = make()
    (tmp_path / "key").write_bytes(serialize(key))
    (tmp_path / "allowed_signers").write_text(f'team@example.org namespaces="git,orch-attestation" {_pub_line(key)}\n')
    signer = load_signer(tmp_path / "key", None)
    assert signer.public_key.keyid == fingerprint(key.public_key())
    signed = sign_statement(provenance_statement(_facts()), signer)
    verified = verify_envelope(
        parse_envelope(signed.envelope.encode(), "p"), load_trust(tmp_path / "allowed_signers"), "p"
    )
    assert verified.statement["predicateType"] == PROVENANCE
    assert verified.signer.principals == "team@example.org" and verified.signer.keyid.startswith("SHA256:")
    assert signed.sshsig.startswith("-----BEGIN SSH SIGNATURE-----\n")


def test_a_signature_by_another_key_or_on_a_changed_payload_is_refused(tmp_path: Path) -> None:
    ours, theirs = ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "theirs").write_bytes(_ssh_private(theirs))
    (tmp_path / "trust").write_text(_pub_line(ours, "ours") + "\n")
    signed = sign_statement(verification_statement(_facts()), load_signer(tmp_path / "theirs", None))
    with pytest.raises(AttestationRefused, match="not signed by a key of the trust file"):
        verify_envelope(parse_envelope(signed.envelope.encode(), "v"), load_trust(tmp_path / "trust"), "v")

    (tmp_path / "ours").write_bytes(_ssh_private(ours))
    document = json.loads(
        sign_statement(verification_statement(_facts()), load_signer(tmp_path / "ours", None)).envelope
    )
    statement = json.loads(base64.b64decode(document["payload"]))
    statement["predicate"]["result"] = "FAILED"
    document["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    with pytest.raises(AttestationRefused, match="not signed by a key of the trust file"):
        verify_envelope(parse_envelope(json.dumps(document).encode(), "v"), load_trust(tmp_path / "trust"), "v")


def test_a_key_outside_its_validity_window_does_not_count(tmp_path: Path) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "key").write_bytes(_ssh_private(key))
    (tmp_path / "trust").write_text(f"team valid-before=20250101 {_pub_line(key)}\n")
    signed = sign_statement(verification_statement(_facts()), load_signer(tmp_path / "key", None))
    envelope = parse_envelope(signed.envelope.encode(), "v")
    trusted = load_trust(tmp_path / "trust")
    assert verify_envelope(envelope, trusted, "v", now=datetime(2024, 6, 1, tzinfo=UTC)).signer.principals == "team"
    with pytest.raises(AttestationRefused, match="no key of the trust file is valid now"):
        verify_envelope(envelope, trusted, "v", now=datetime(2026, 12, 1, tzinfo=UTC))


COMMENT = "carol's laptop (don't lose it)"


def test_trust_file_forms_and_their_errors_name_the_line(tmp_path: Path) -> None:
    a, b, c = (ed25519.Ed25519PrivateKey.generate() for _ in range(3))
    pem = b.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
    trust = tmp_path / "trust"
    trust.write_text(
        "# the team's keys\n\n"
        f"alice@example.org,bob@example.org {_pub_line(a, 'alice')}\n"
        f"{pem}"
        f'git-only namespaces="git" {_pub_line(c)}\n'
        f"carol@example.org {_pub_line(a, COMMENT)}\n"
    )
    keys = load_trust(trust)
    # The git-only key is left out; an apostrophe in a key's comment is free text.
    assert [k.principals for k in keys] == ["alice@example.org,bob@example.org", "(any)", "carol@example.org"]
    assert keys[1].keyid == fingerprint(b.public_key())

    for line, message in (
        (f"ca cert-authority {_pub_line(a)}", "cert-authority keys are not supported"),
        ("team sk-ssh-ed25519@openssh.com AAAA", "security-key"),
        ("just words", "no public key on this line"),
        ("team ssh-ed25519 not-base64!", "not an OpenSSH public key"),
        (f"team frobnicate=1 {_pub_line(a)}", "unknown option 'frobnicate'"),
        (f"team valid-after=2024-01-01 {_pub_line(a)}", "is not a time"),
        (f'team namespaces="orch-attestation {_pub_line(a)}', "quotes do not close"),
    ):
        trust.write_text(f"# header\n{line}\n")
        with pytest.raises(BadInput, match=message) as caught:
            load_trust(trust)
        assert f"{trust} line 2" in caught.value.message
    trust.write_text("# nothing\n")
    with pytest.raises(BadInput, match="lists no key"):
        load_trust(trust)


def test_signing_key_errors_say_what_to_do(tmp_path: Path) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    locked = tmp_path / "locked"
    locked.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(b"pass")))
    with pytest.raises(BadInput, match="protected by a passphrase") as caught:
        load_signer(locked, None)
    assert caught.value.hint is not None and "ssh-add" in caught.value.hint
    (tmp_path / "key.pub").write_text(_pub_line(key) + "\n")
    with pytest.raises(BadInput, match="no ssh-agent is running"):
        load_signer(tmp_path / "key.pub", None)
    (tmp_path / "junk").write_text("not a key\n")
    with pytest.raises(BadInput, match="not a private key orch can read"):
        load_signer(tmp_path / "junk", None)
    with pytest.raises(BadInput, match="cannot be read"):
        load_signer(tmp_path / "missing", None)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\xff\xfe", "not a DSSE envelope"),
        (b"[]", "not a DSSE envelope"),
        (b'{"payload": 1, "payloadType": "x", "signatures": []}', "not a DSSE envelope"),
        (b'{"payload": "e30=", "payloadType": "text/plain", "signatures": []}', "not an in-toto statement"),
        (b'{"payload": "e30=", "payloadType": "application/vnd.in-toto+json", "signatures": [7]}', "not a DSSE"),
        (b"[" * 100_000, "not a DSSE envelope"),
        (b" " * (5 << 20), "larger than 4 MiB"),
    ],
)
def test_a_hostile_envelope_is_one_refusal(data: bytes, message: str) -> None:
    with pytest.raises(AttestationRefused, match=message):
        parse_envelope(data, "attestations/provenance.dsse.json")


def test_statements_pass_the_in_toto_bindings_and_name_the_image_and_files() -> None:
    facts = _facts(pinned=PINNED)
    provenance, verification = provenance_statement(facts), verification_statement(facts)
    assert subject_digests(provenance) == {"a1" * 32, "b2" * 32}
    assert provenance["subject"][1]["name"] == "127.0.0.1:5000/team/app"
    assert attested_files(provenance) == {
        "dossier/dossier.yaml": "29" * 32,
        "build/Dockerfile": "3a" * 32,
        "image.tar.gz": "4b" * 32,
    }
    assert set(attested_files(verification)) == {
        "SHA256SUMS",
        "manifest.json",
        "report/report.json",
        "dossier/dossier.yaml",
    }
    predicate = verification["predicate"]
    assert verification["predicateType"] == TEST_RESULT and predicate["result"] == "PASSED"
    assert predicate["passedTests"] == ["image", "host", "sample"] and predicate["warnedTests"] == ["device"]
    dependencies = provenance["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert {"name": "code:app", "digest": {"gitCommit": facts.code_revision}} in dependencies
    dirty = provenance_statement(_facts(code_dirty=True))["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert {"name": "code:app", "digest": {"gitCommit": facts.code_revision}, "annotations": {"dirty": True}} in dirty
    assert verification_statement(_facts(verdict="failed"))["predicate"]["result"] == "FAILED"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s.update(subject=[]), "At least one subject"),
        (lambda s: s["subject"][0].pop("digest"), "At least one digest"),
        (lambda s: s.update(predicateType="https://example.org/other"), "neither"),
        (lambda s: s.update(_type="https://in-toto.io/Statement/v0.1"), "Wrong statement type"),
        (lambda s: s["predicate"].update(buildDefinitionX={}), "buildDefinitionX"),
        (lambda s: s["predicate"]["runDetails"]["builder"].update(id=7), "builder|id|string"),
    ],
)
def test_a_statement_the_bindings_reject_is_refused(change: Any, message: str) -> None:
    statement = provenance_statement(_facts())
    change(statement)
    with pytest.raises(AttestationRefused, match=message):
        checked_statement(statement, "attestations/provenance.dsse.json")


def test_two_attestations_that_disagree_about_a_file_or_name_another_image_are_refused(tmp_path: Path) -> None:
    from orchestrator.stages.attestations import check_statements

    key = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "key").write_bytes(_ssh_private(key))
    (tmp_path / "trust").write_text(f"team {_pub_line(key)}\n")
    signer, trusted = load_signer(tmp_path / "key", None), load_trust(tmp_path / "trust")

    def envelopes(verification_files: dict[str, str], image: str = IMAGE) -> dict[str, bytes]:
        facts = _facts(image_id=image)
        other = _facts(image_id=image, files={**facts.files, **verification_files})
        return {
            "provenance.dsse.json": sign_statement(provenance_statement(facts), signer).envelope.encode(),
            "verification.dsse.json": sign_statement(verification_statement(other), signer).envelope.encode(),
        }

    who, files = check_statements(envelopes({}), trusted, image_id=IMAGE, pinned=None, display="attestations/")
    assert who.principals == "team" and files["SHA256SUMS"] == "f6" * 32
    with pytest.raises(AttestationRefused, match=r"name different sha256 for 'dossier/dossier\.yaml'"):
        check_statements(
            envelopes({"dossier/dossier.yaml": "00" * 32}), trusted, image_id=IMAGE, pinned=None, display="a/"
        )
    with pytest.raises(AttestationRefused, match="is about another image"):
        check_statements(envelopes({}), trusted, image_id="sha256:" + "99" * 32, pinned=None, display="a/")
    with pytest.raises(AttestationRefused, match="is about another image"):
        check_statements(envelopes({}), trusted, image_id=IMAGE, pinned=PINNED, display="a/")
