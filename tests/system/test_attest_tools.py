"""The signing paths that need real processes: keys made by `ssh-keygen`, signing through a real `ssh-agent`,
and OpenSSH's own `ssh-keygen -Y verify` checking the SSH signature orch writes beside each envelope (the
by-hand check PROCEDURE.md gives, with a third-party tool)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.attest.envelope import parse_envelope, sign_statement, verify_envelope
from orchestrator.attest.keys import load_signer, load_trust
from orchestrator.attest.ssh_agent import AgentSigner
from orchestrator.attest.statements import TEST_RESULT
from orchestrator.errors import BadInput


@pytest.fixture(autouse=True)
def _openssh() -> None:
    if shutil.which("ssh-keygen") is None or shutil.which("ssh-agent") is None:
        message = "OpenSSH's ssh-keygen and ssh-agent are not installed (Debian: openssh-client)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


STATEMENT = {
    "_type": "https://in-toto.io/Statement/v1",
    "subject": [{"name": "orch/app:1", "digest": {"sha256": "ab" * 32}}],
    "predicateType": TEST_RESULT,
    "predicate": {"result": "PASSED", "passedTests": ["image"]},
}


def _keygen(folder: Path, name: str, kind: str, passphrase: str = "") -> Path:
    key = folder / name
    bits = ["-b", "2048"] if kind == "rsa" else []
    subprocess.run(["ssh-keygen", "-q", "-t", kind, *bits, "-N", passphrase, "-C", name, "-f", str(key)], check=True)
    return key


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[str]:
    socket_path = str(tmp_path / "agent.sock")
    process = subprocess.Popen(["ssh-agent", "-D", "-a", socket_path], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if Path(socket_path).exists():
                break
            subprocess.run(["sleep", "0.05"], check=True)
        yield socket_path
    finally:
        process.terminate()
        process.wait(timeout=10)


def _verify_by_hand(folder: Path, trust: Path, pae: bytes, sshsig: str) -> subprocess.CompletedProcess[str]:
    (folder / "sig").write_text(sshsig)
    principal = subprocess.run(
        ["ssh-keygen", "-Y", "find-principals", "-f", str(trust), "-s", str(folder / "sig")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return subprocess.run(
        [
            "ssh-keygen",
            "-Y",
            "verify",
            "-f",
            str(trust),
            "-I",
            principal,
            "-n",
            "orch-attestation",
            "-s",
            str(folder / "sig"),
        ],
        input=pae.decode("utf-8"),
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_the_agent_signs_without_the_private_key_and_ssh_keygen_checks_the_ssh_signature(
    tmp_path: Path, agent: str, kind: str
) -> None:
    key = _keygen(tmp_path, f"team-{kind}", kind, passphrase="a passphrase orch never asks for")
    subprocess.run(
        ["ssh-add", str(key)],
        env={
            **os.environ,
            "SSH_AUTH_SOCK": agent,
            "SSH_ASKPASS": str(_askpass(tmp_path)),
            "SSH_ASKPASS_REQUIRE": "force",
            "DISPLAY": ":0",
        },
        check=True,
        capture_output=True,
    )
    trust = tmp_path / "allowed_signers"
    trust.write_text(f"team@example.org {key.with_suffix('.pub').read_text()}")
    with pytest.raises(BadInput, match="passphrase"):
        load_signer(key, agent)
    signer = load_signer(key.with_suffix(".pub"), agent)
    assert isinstance(signer, AgentSigner)
    signed = sign_statement(STATEMENT, signer)
    envelope = parse_envelope(signed.envelope.encode(), "v")
    assert verify_envelope(envelope, load_trust(trust), "v").signer.principals == "team@example.org"
    result = _verify_by_hand(tmp_path, trust, envelope.pae(), signed.sshsig)
    assert result.returncode == 0, result.stderr
    assert 'Good "orch-attestation" signature for team@example.org' in result.stdout


def _askpass(folder: Path) -> Path:
    script = folder / "askpass"
    script.write_text("#!/bin/sh\necho 'a passphrase orch never asks for'\n")
    script.chmod(0o700)
    return script


def test_an_agent_without_the_key_refuses_and_ssh_keygen_refuses_a_changed_pae(tmp_path: Path, agent: str) -> None:
    key = _keygen(tmp_path, "team", "ed25519")
    signer = load_signer(key.with_suffix(".pub"), agent)
    with pytest.raises(BadInput, match="does not hold this key"):
        sign_statement(STATEMENT, signer)

    trust = tmp_path / "allowed_signers"
    trust.write_text(f"team@example.org {key.with_suffix('.pub').read_text()}")
    signed = sign_statement(STATEMENT, load_signer(key, None))
    pae = parse_envelope(signed.envelope.encode(), "v").pae()
    assert _verify_by_hand(tmp_path, trust, pae, signed.sshsig).returncode == 0
    changed = _verify_by_hand(tmp_path, trust, pae.replace(b"PASSED", b"FAILED"), signed.sshsig)
    assert changed.returncode != 0 and "Good" not in changed.stdout
