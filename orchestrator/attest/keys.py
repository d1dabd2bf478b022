"""Signing keys people already have, and the trust file that says whose signatures count.

A signing key is named by its path and read into memory only (never copied, never written):

- a private key file: an OpenSSH private key (`ssh-keygen -t ed25519`) or a PEM/PKCS#8 one
  (`openssl genpkey -algorithm ed25519`), Ed25519, ECDSA (P-256, P-384) or RSA, unencrypted; it is loaded by
  pyca/cryptography and signs through securesystemslib's `CryptoSigner`;
- a public key file (`KEY.pub`, what `git config user.signingkey` names) whose private key is held by the
  ssh-agent at `SSH_AUTH_SOCK`: the agent signs (`ssh_agent.AgentSigner`), the private key never leaves it.
  An encrypted key file is refused with that way out: orch asks for no passphrase.

Every key is known by its OpenSSH fingerprint (`SHA256:…`, what `ssh-keygen -lf KEY.pub` prints), which is
also the DSSE signature's `keyid`, so a reader can match a signature to a key with standard tools. An RSA
key signs with RSASSA-PKCS1-v1_5 over SHA-512 (`rsa-sha2-512`, what the agent does), so a signature made from
the file and one made by the agent are the same kind.

The trust file (`orch verify --trust FILE`) holds public keys, one per line, in either of the forms people
keep them in:

- SSH `allowed_signers` (`ssh-keygen(1)`, ALLOWED SIGNERS): `PRINCIPALS [OPTIONS] KEYTYPE BASE64 [COMMENT]`.
  The options orch honours are `namespaces="…"` (the key counts only if a pattern matches `orch-attestation`),
  `valid-after=` and `valid-before=` (`YYYYMMDD[HHMM[SS]]`, read as UTC; a `Z` suffix is accepted). A
  `cert-authority` line is refused: orch checks the signer's own key, not certificates;
- a plain public key line (`KEYTYPE BASE64 [COMMENT]`, as in a `.pub` file or `authorized_keys`);
- a PEM `PUBLIC KEY` block (`openssl pkey -pubout`).
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import re
import shlex
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
    load_ssh_private_key,
    load_ssh_public_key,
)
from securesystemslib.signer import CryptoSigner, Signer, SSlibKey

from orchestrator.errors import BadInput

#: The SSH signature namespace of orch's attestations (`ssh-keygen -Y … -n orch-attestation`).
NAMESPACE = "orch-attestation"
#: Key and trust files are a few KiB; this bounds what is read of a path someone mistyped.
MAX_KEY_FILE_BYTES = 1 << 20
_SSH_KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521")
_SCHEMES = {"secp256r1": "ecdsa-sha2-nistp256", "secp384r1": "ecdsa-sha2-nistp384"}
PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey


def ssh_public_blob(public: PublicKey) -> bytes:
    """The key in the SSH wire format (the base64 field of a `.pub` line, decoded)."""
    line = public.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH)
    return base64.b64decode(line.split()[1])


def fingerprint(public: PublicKey) -> str:
    """`SHA256:…`, exactly as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(ssh_public_blob(public)).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def scheme_of(public: PublicKey, where: str) -> str:
    """securesystemslib's signing scheme for this key (BadInput naming `where` for an unsupported one)."""
    if isinstance(public, ed25519.Ed25519PublicKey):
        return "ed25519"
    if isinstance(public, rsa.RSAPublicKey):
        return "rsa-pkcs1v15-sha512"
    if isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name in _SCHEMES:
        return _SCHEMES[public.curve.name]
    raise BadInput(f"{where}: orch signs and checks Ed25519, ECDSA P-256/P-384 and RSA keys, not this one")


def sslib_key(public: PublicKey, where: str) -> SSlibKey:
    """The key as securesystemslib knows it, with its SSH fingerprint as keyid."""
    return SSlibKey.from_crypto(public, keyid=fingerprint(public), scheme=scheme_of(public, where))


def read_key_file(path: Path, what: str) -> bytes:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise BadInput(
            f"{what} {path}: cannot be read ({exc.strerror})", hint="Give the path of the key file."
        ) from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise BadInput(f"{what} {path}: larger than 1 MiB; a key file is a few KiB")
    return data


def _is_public_line(data: bytes) -> bool:
    return data.lstrip().split(b" ", 1)[0].decode("ascii", "replace") in _SSH_KEY_TYPES


def load_signer(path: Path, agent_socket: str | None) -> Signer:
    """The signer for `--sign PATH`: a private key file, or the agent's key when PATH is a public key.

    `agent_socket` is `SSH_AUTH_SOCK` (used only for a public key). BadInput names the file and the fix.
    """
    data = read_key_file(path, "signing key")
    if _is_public_line(data):
        from orchestrator.attest.ssh_agent import AgentSigner

        public = _public_from_line(data.decode("ascii", "replace").split(), f"signing key {path}")
        if not agent_socket:
            raise BadInput(
                f"signing key {path} is a public key, and no ssh-agent is running (SSH_AUTH_SOCK is not set)",
                hint="Start ssh-agent and `ssh-add` the private key, or give the private key file itself.",
            )
        return AgentSigner(agent_socket, public, sslib_key(public, f"signing key {path}"), path)
    loader = load_ssh_private_key if b"-----BEGIN OPENSSH PRIVATE KEY-----" in data else load_pem_private_key
    try:
        private = loader(data, password=None)
    except TypeError:
        raise BadInput(
            f"signing key {path} is protected by a passphrase; orch asks for none",
            hint=f"Add it to ssh-agent (`ssh-add {path}`) and give its public key: --sign {path}.pub",
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(
            f"signing key {path} is not a private key orch can read (OpenSSH or PEM; Ed25519, ECDSA or RSA)",
            hint="Make one with `ssh-keygen -t ed25519 -f KEY`, or give KEY.pub with the key in ssh-agent.",
        ) from None
    if not isinstance(private, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise BadInput(f"signing key {path}: orch signs with Ed25519, ECDSA P-256/P-384 and RSA keys, not this one")
    return CryptoSigner(private, sslib_key(private.public_key(), f"signing key {path}"))


def _public_from_line(tokens: list[str], where: str) -> PublicKey:
    try:
        public = load_ssh_public_key(f"{tokens[0]} {tokens[1]}".encode("ascii"))
    except (IndexError, ValueError, UnsupportedAlgorithm, UnicodeEncodeError):
        raise BadInput(f"{where}: not an OpenSSH public key ('KEYTYPE BASE64 [COMMENT]')") from None
    if not isinstance(public, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
        raise BadInput(f"{where}: orch checks Ed25519, ECDSA P-256/P-384 and RSA keys, not this one")
    scheme_of(public, where)
    return public


@dataclass(frozen=True)
class TrustedKey:
    """One key of the trust file: whose it is, and when (and for what) it counts."""

    key: SSlibKey
    principals: str
    where: str  # "FILE line N"
    valid_after: datetime | None = None
    valid_before: datetime | None = None

    @property
    def keyid(self) -> str:
        return self.key.keyid

    def counts_at(self, moment: datetime) -> bool:
        return (self.valid_after is None or moment >= self.valid_after) and (
            self.valid_before is None or moment < self.valid_before
        )


_KEY_FIELD = re.compile(r"(?:^|\s)(" + "|".join(map(re.escape, _SSH_KEY_TYPES)) + r"|sk-\S+)\s")
_STAMP = re.compile(r"(\d{8})(\d{4}(\d{2})?)?Z?")


def _stamp(text: str, where: str) -> datetime:
    if not _STAMP.fullmatch(text):
        raise BadInput(f"{where}: {text!r} is not a time of the form YYYYMMDD[HHMM[SS]]")
    digits = text.rstrip("Z").ljust(14, "0")
    try:
        return datetime.strptime(digits, "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        raise BadInput(f"{where}: {text!r} is not a valid date") from None


def _trusted_from_line(line: str, where: str) -> TrustedKey | None:
    """One allowed_signers or public-key line; None when its namespaces leave orch out."""
    found = _KEY_FIELD.search(line)
    if found is None:
        raise BadInput(f"{where}: no public key on this line (KEYTYPE BASE64, e.g. 'ssh-ed25519 AAAA…')")
    if found.group(1).startswith("sk-"):
        raise BadInput(
            f"{where}: a security-key ({found.group(1)}) signature cannot be checked by orch; list another key"
        )
    public = _public_from_line(line[found.start(1) :].split(), where)
    # Only what comes before the key is split like a shell line (options may be quoted); the comment after the
    # key is free text ("bob's laptop").
    try:
        prefix = shlex.split(line[: found.start(1)], comments=False, posix=True)
    except ValueError:
        raise BadInput(f"{where}: an option's quotes do not close") from None
    principals = prefix[0] if prefix else "(any)"
    after = before = None
    for option in ",".join(prefix[1:]).split(",") if len(prefix) > 1 else []:
        name, _, value = option.partition("=")
        lowered = name.strip().lower()
        if lowered == "cert-authority":
            raise BadInput(
                f"{where}: cert-authority keys are not supported; list each signer's own public key",
            )
        if lowered == "namespaces":
            patterns = [pattern for pattern in value.split("|") if pattern]
            if not any(fnmatch.fnmatchcase(NAMESPACE, pattern) for pattern in patterns):
                return None
        elif lowered == "valid-after":
            after = _stamp(value, where)
        elif lowered == "valid-before":
            before = _stamp(value, where)
        elif lowered:
            raise BadInput(f"{where}: unknown option {name!r} (orch knows namespaces, valid-after, valid-before)")
    return TrustedKey(sslib_key(public, where), principals, where, after, before)


def _namespaces_joined(line: str) -> str:
    # allowed_signers separates namespace patterns with commas inside the quotes, and options with commas
    # outside them; fold the inner commas to '|' before the options are split.
    return re.sub(r'namespaces="([^"]*)"', lambda m: 'namespaces="' + m.group(1).replace(",", "|") + '"', line)


def load_trust(path: Path) -> list[TrustedKey]:
    """Every key of the trust file, in order. BadInput naming the file and line for anything unreadable."""
    data = read_key_file(path, "trust file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"trust file {path}: not UTF-8 text") from None
    keys: list[TrustedKey] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        number, line = index + 1, lines[index].strip()
        index += 1
        where = f"trust file {path} line {number}"
        if not line or line.startswith("#"):
            continue
        if line.startswith("-----BEGIN PUBLIC KEY-----"):
            block = [line]
            while index < len(lines) and not block[-1].startswith("-----END"):
                block.append(lines[index].strip())
                index += 1
            try:
                public = load_pem_public_key("\n".join(block).encode("ascii"))
            except (ValueError, UnsupportedAlgorithm, UnicodeEncodeError):
                raise BadInput(f"{where}: the PEM block is not a public key") from None
            if not isinstance(public, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
                raise BadInput(f"{where}: orch checks Ed25519, ECDSA P-256/P-384 and RSA keys, not this one")
            keys.append(TrustedKey(sslib_key(public, where), "(any)", where))
            continue
        trusted = _trusted_from_line(_namespaces_joined(line), where)
        if trusted is not None:
            keys.append(trusted)
    if not keys:
        raise BadInput(
            f"trust file {path} lists no key that may sign orch attestations",
            hint="One line per key: an allowed_signers line ('team@example.org ssh-ed25519 AAAA…') or a .pub line.",
        )
    return keys
