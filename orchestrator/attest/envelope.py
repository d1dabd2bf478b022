"""DSSE envelopes of in-toto statements: signed with securesystemslib, read back as untrusted input.

An envelope is securesystemslib's `dsse.Envelope` (payloadType `application/vnd.in-toto+json`, the
statement's JSON as payload, one signature whose keyid is the signer's SSH fingerprint), written as JSON.
Beside it orch writes `NAME.sshsig`: an SSH signature (`ssh-keygen -Y sign` format, namespace
`orch-attestation`) by the same key over the envelope's PAE bytes, so a receiving team can check the
signature by hand with `ssh-keygen -Y verify` and its allowed_signers file (PROCEDURE.md shows how).
`orch verify` checks the DSSE signature itself; the `.sshsig` file is for people.

Reading is bounded and strict: at most 4 MiB, JSON, the DSSE fields with the right types, the in-toto payload
type, and a signature by a trusted key (securesystemslib's `Envelope.verify`), before the statement inside is
parsed at all.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import Error as SslibError
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import Signer

from orchestrator.attest.keys import NAMESPACE, TrustedKey, ssh_public_blob
from orchestrator.attest.ssh_agent import ssh_string
from orchestrator.errors import AttestationRefused

PAYLOAD_TYPE = "application/vnd.in-toto+json"
MAX_ENVELOPE_BYTES = 4 << 20


def _canonical(statement: dict[str, Any]) -> bytes:
    return json.dumps(statement, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _mpint(value: int) -> bytes:
    raw = value.to_bytes((value.bit_length() + 8) // 8, "big") if value else b""
    return ssh_string(raw)


def ssh_signature_blob(signer: Signer, data: bytes) -> bytes:
    """`signer`'s signature of `data` as an SSH signature blob (`string format, string signature`)."""
    key = signer.public_key
    raw = bytes.fromhex(signer.sign(data).signature)
    scheme = getattr(key, "scheme", "")
    if scheme == "ed25519":
        return ssh_string(b"ssh-ed25519") + ssh_string(raw)
    if scheme == "rsa-pkcs1v15-sha512":
        return ssh_string(b"rsa-sha2-512") + ssh_string(raw)
    r, s = decode_dss_signature(raw)
    return ssh_string(scheme.encode("ascii")) + ssh_string(_mpint(r) + _mpint(s))


def sshsig(signer: Signer, public_blob: bytes, message: bytes) -> str:
    """An armored SSH signature of `message` in orch's namespace (OpenSSH PROTOCOL.sshsig, sha512)."""
    digest = hashlib.sha512(message).digest()
    signed = b"SSHSIG" + ssh_string(NAMESPACE.encode()) + ssh_string(b"") + ssh_string(b"sha512") + ssh_string(digest)
    blob = (
        b"SSHSIG"
        + (1).to_bytes(4, "big")
        + ssh_string(public_blob)
        + ssh_string(NAMESPACE.encode())
        + ssh_string(b"")
        + ssh_string(b"sha512")
        + ssh_string(ssh_signature_blob(signer, signed))
    )
    text = base64.b64encode(blob).decode("ascii")
    lines = [text[i : i + 70] for i in range(0, len(text), 70)]
    return "-----BEGIN SSH SIGNATURE-----\n" + "\n".join(lines) + "\n-----END SSH SIGNATURE-----\n"


@dataclass(frozen=True)
class Signed:
    envelope: str  # the DSSE envelope's JSON
    sshsig: str  # the armored SSH signature over the envelope's PAE


def sign_statement(statement: dict[str, Any], signer: Signer) -> Signed:
    envelope = Envelope(payload=_canonical(statement), payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(signer)
    crypto_key = signer.public_key._crypto_key()  # type: ignore[attr-defined]  # SSlibKey's pyca key
    return Signed(
        envelope=json.dumps(envelope.to_dict(), indent=2) + "\n",
        sshsig=sshsig(signer, ssh_public_blob(crypto_key), envelope.pae()),
    )


@dataclass(frozen=True)
class VerifiedStatement:
    statement: dict[str, Any]
    #: The trusted key that signed: its principals and fingerprint, for the reader.
    signer: TrustedKey


def parse_envelope(data: bytes, display: str) -> Envelope:
    """The DSSE envelope in `data`, or AttestationRefused naming `display` and what is wrong."""
    if len(data) > MAX_ENVELOPE_BYTES:
        raise AttestationRefused(f"{display} is larger than {MAX_ENVELOPE_BYTES >> 20} MiB; orch writes a few KiB")
    try:
        document = json.loads(data.decode("utf-8"))
        if not isinstance(document, dict):
            raise TypeError("not an object")
        envelope = Envelope.from_dict(document)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError, SslibError) as exc:
        raise AttestationRefused(f"{display} is not a DSSE envelope ({ascii(str(exc))[:120]})") from None
    if envelope.payload_type != PAYLOAD_TYPE:
        raise AttestationRefused(
            f"{display} carries {ascii(str(envelope.payload_type))[:80]}, not an in-toto statement"
        )
    return envelope


def verify_envelope(
    envelope: Envelope, trusted: list[TrustedKey], display: str, *, now: datetime | None = None
) -> VerifiedStatement:
    """The statement inside, once a key of the trust file (valid now) signed it; else AttestationRefused."""
    moment = now or datetime.now(UTC)
    usable = [key for key in trusted if key.counts_at(moment)]
    if not usable:
        raise AttestationRefused(
            f"no key of the trust file is valid now (valid-after/valid-before); {display} is refused"
        )
    try:
        accepted = envelope.verify([key.key for key in usable], 1)
    except VerificationError:
        signers = ", ".join(ascii(keyid)[1:-1] for keyid in sorted(envelope.signatures)) or "nobody"
        raise AttestationRefused(
            f"{display} is not signed by a key of the trust file (signed by {signers[:200]})",
            hint="Ask the team that handed it over for its public key, or refuse the folder: "
            "it was not made (or was changed) by a signer you trust.",
        ) from None
    keyid = sorted(accepted)[0]
    signer = next(key for key in usable if key.keyid == keyid)
    try:
        statement = json.loads(envelope.payload.decode("utf-8"))
    except (ValueError, RecursionError):
        raise AttestationRefused(f"{display}: the signed payload is not JSON") from None
    if not isinstance(statement, dict):
        raise AttestationRefused(f"{display}: the signed payload is not an in-toto statement")
    return VerifiedStatement(statement, signer)


def signer_ids(envelope: Envelope) -> list[str]:
    """The keyids an envelope claims (unchecked: for the 'unattributed' message only)."""
    return sorted(envelope.signatures)
