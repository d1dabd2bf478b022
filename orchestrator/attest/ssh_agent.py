"""Signing with a key held by ssh-agent: the private key never leaves the agent, as with `git` and `ssh-keygen -Y`.

The agent protocol (draft-ietf-sshm-ssh-agent, OpenSSH's PROTOCOL.agent) needs one request here:
SSH_AGENTC_SIGN_REQUEST (13) with the public key blob, the data and flags; the agent answers
SSH_AGENT_SIGN_RESPONSE (14) with an SSH signature blob, or SSH_AGENT_FAILURE (5) when it does not hold the
key (or the user refused a confirmation). The signature is the same one the key file would give:
Ed25519's 64 bytes, RSA's PKCS#1 v1.5 over SHA-512 (flag SSH_AGENT_RSA_SHA2_512), ECDSA's (r, s), which
is turned into the DER form pyca/cryptography and securesystemslib verify. So an envelope signed through
the agent verifies with the same public key as one signed from the file.

Why not paramiko: it would bring bcrypt and PyNaCl (and a whole SSH client) for these ~60 lines of framing.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from securesystemslib.signer import SecretsHandler, Signature, Signer, SSlibKey

from orchestrator.attest.keys import PublicKey, load_signer, ssh_public_blob
from orchestrator.errors import BadInput, EnvironmentFailure

_SIGN_REQUEST = 13
_SIGN_RESPONSE = 14
_FAILURE = 5
_RSA_SHA2_512 = 4
#: An agent answers in a few hundred bytes; more is not an agent.
_MAX_ANSWER = 1 << 16


def ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def read_ssh_string(data: bytes, offset: int) -> tuple[bytes, int]:
    """The string at `offset` and the offset after it; ValueError when the data ends first."""
    if offset + 4 > len(data):
        raise ValueError("truncated")
    (length,) = struct.unpack_from(">I", data, offset)
    end = offset + 4 + length
    if end > len(data):
        raise ValueError("truncated")
    return data[offset + 4 : end], end


def _receive(connection: socket.socket, count: int) -> bytes:
    chunks = b""
    while len(chunks) < count:
        chunk = connection.recv(count - len(chunks))
        if not chunk:
            raise ValueError("the agent closed the connection")
        chunks += chunk
    return chunks


def agent_sign(agent_socket: str, public: PublicKey, data: bytes) -> bytes:
    """The agent's signature of `data` as the raw bytes securesystemslib verifies for this key type."""
    flags = _RSA_SHA2_512 if isinstance(public, rsa.RSAPublicKey) else 0
    request = bytes([_SIGN_REQUEST]) + ssh_string(ssh_public_blob(public)) + ssh_string(data) + struct.pack(">I", flags)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(120)  # an agent may ask the user to confirm
            connection.connect(agent_socket)
            connection.sendall(ssh_string(request))
            (length,) = struct.unpack(">I", _receive(connection, 4))
            if length == 0 or length > _MAX_ANSWER:
                raise ValueError(f"an answer of {length} bytes")
            answer = _receive(connection, length)
    except (OSError, ValueError) as exc:
        raise EnvironmentFailure(
            f"the ssh-agent at SSH_AUTH_SOCK did not sign ({exc})",
            hint="Check that ssh-agent runs (`ssh-add -l` lists the key), then sign again.",
        ) from None
    if answer[0] == _FAILURE:
        raise BadInput(
            "the ssh-agent refused to sign: it does not hold this key (or its confirmation was declined)",
            hint="`ssh-add` the private key of the --sign public key, then sign again.",
        )
    try:
        if answer[0] != _SIGN_RESPONSE:
            raise ValueError(f"message type {answer[0]}")
        blob, _ = read_ssh_string(answer, 1)
        return raw_signature(blob, public)
    except ValueError as exc:
        raise EnvironmentFailure(f"the ssh-agent's answer is not a signature ({exc})") from None


def raw_signature(blob: bytes, public: PublicKey) -> bytes:
    """An SSH signature blob (`string format, string signature`) as securesystemslib's signature bytes."""
    algorithm, offset = read_ssh_string(blob, 0)
    signature, _ = read_ssh_string(blob, offset)
    if isinstance(public, ec.EllipticCurvePublicKey):
        r, inner = read_ssh_string(signature, 0)
        s, _ = read_ssh_string(signature, inner)
        return encode_dss_signature(int.from_bytes(r, "big"), int.from_bytes(s, "big"))
    if isinstance(public, rsa.RSAPublicKey) and algorithm != b"rsa-sha2-512":
        raise ValueError(f"an RSA signature of kind {algorithm!r}, not rsa-sha2-512")
    return signature


class AgentSigner(Signer):
    """A securesystemslib `Signer` whose private key stays in ssh-agent."""

    #: `ssh-agent:<path of the public key file>`, for `Signer.from_priv_key_uri`.
    SCHEME = "ssh-agent"

    def __init__(self, agent_socket: str, public: PublicKey, key: SSlibKey, path: Path) -> None:
        self._socket = agent_socket
        self._public = public
        self._key = key
        self._path = path

    @property
    def public_key(self) -> SSlibKey:
        return self._key

    def sign(self, payload: bytes) -> Signature:
        return Signature(self._key.keyid, agent_sign(self._socket, self._public, payload).hex())

    @classmethod
    def from_priv_key_uri(
        cls, priv_key_uri: str, public_key: Any, secrets_handler: SecretsHandler | None = None
    ) -> AgentSigner:
        """`ssh-agent:PATH.pub` with SSH_AUTH_SOCK from the environment, for callers that name signers by URI."""
        import os

        scheme, _, path = priv_key_uri.partition(":")
        if scheme != cls.SCHEME or not path:
            raise ValueError(f"AgentSigner takes 'ssh-agent:PATH.pub', not {priv_key_uri!r}")
        signer = load_signer(Path(path), os.environ.get("SSH_AUTH_SOCK"))
        if not isinstance(signer, AgentSigner) or signer.public_key != public_key:
            raise ValueError(f"{path} is not the public key {getattr(public_key, 'keyid', '?')}")
        return signer
