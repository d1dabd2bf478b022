"""Signed hand-overs on the real engine: `orch handover --sign`, `orch verify --trust` (issue 29).

One private copy of tiny-embeddings is rebuilt and handed over once, signed with a key made by `ssh-keygen`;
each test works on a hard-linked copy. The refusals are those an attacker would try after reading the
folder: another key, a changed file with SHA256SUMS regenerated, a valid signature on a statement about
another image, the attestations removed. Each is refused before any container or image load, exit 1.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.attest.envelope import sign_statement
from orchestrator.attest.keys import load_signer
from orchestrator.engine import Engine
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.handover import procedure_blocks, read_manifest
from orchestrator.stages.verify import check_handover
from tests.handover_craft import reseal
from tests.integration.helpers import orch, rebuilt_private_copy, session_containers


def _keygen(folder: Path, name: str) -> Path:
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def _allowed_signers(folder: Path, name: str, principal: str, key: Path) -> Path:
    trust = folder / name
    trust.write_text(f"{principal} {key.with_suffix('.pub').read_text()}")
    return trust


def _linked_copy(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest, copy_function=os.link)
    return dest


def _replace(path: Path, data: bytes) -> None:
    path.unlink()  # break the hard link: the shared hand-over stays intact
    path.write_bytes(data)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    team, other = _keygen(folder, "team"), _keygen(folder, "other")
    return {
        "team": team,
        "other": other,
        "trust": _allowed_signers(folder, "allowed_signers", "team@example.org", team),
        "other-trust": _allowed_signers(folder, "other_signers", "other@example.org", other),
    }


@pytest.fixture(scope="module")
def signed(
    engine: Engine, base_image: BaseOutcome, keys: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    root = tmp_path_factory.mktemp("signed-src")
    loaded, rebuild = rebuilt_private_copy(engine, root, "signed test")
    dossier = loaded.path
    out = root / "handover"
    result = orch("handover", str(dossier), "--from", str(rebuild), "--out", str(out), "--sign", str(keys["team"]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "signed: attestations/ by SHA256:" in result.stdout
    return out


def test_a_signed_hand_over_verifies_with_the_teams_key_and_says_who_signed(
    signed: Path, keys: dict[str, Path], tmp_path: Path
) -> None:
    names = sorted(p.relative_to(signed).as_posix() for p in (signed / "attestations").iterdir())
    assert names == [
        "attestations/provenance.dsse.json",
        "attestations/provenance.sshsig",
        "attestations/verification.dsse.json",
        "attestations/verification.sshsig",
    ]
    private = keys["team"].read_text()
    secret_lines = [line for line in private.splitlines() if line and not line.startswith("-----")]
    for path in signed.rglob("*"):
        if path.is_file() and path.stat().st_size < 50 << 20:
            text = path.read_bytes().decode("latin-1")
            assert not any(line in text for line in secret_lines), f"private key material in {path}"
    result = orch("verify", str(signed), "--trust", str(keys["trust"]), "--out", str(tmp_path / "verify-out"))
    assert result.returncode == 0, result.stdout + result.stderr
    said = " ".join(result.stdout.split())
    assert "signed by team@example.org (SHA256:" in said and "provenance and verification attested" in said
    # Without --trust, verify says whose key the folder claims, unchecked (the same checks, in process).
    unchecked = check_handover(signed)
    assert unchecked.attribution is None and unchecked.unattributed is not None
    assert (
        unchecked.unattributed.startswith("unattributed: signed by SHA256:") and "not checked" in unchecked.unattributed
    )


def _refused(folder: Path, trust: Path, tmp_path: Path) -> str:
    containers = session_containers()
    result = orch("verify", str(folder), "--trust", str(trust), "--out", str(tmp_path / "verify-out"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "error[attestation-refused]" in result.stderr and "Traceback" not in result.stderr
    assert session_containers() == containers and not (tmp_path / "verify-out").exists(), "refused before running"
    return " ".join(result.stderr.split())


def test_a_key_not_in_the_trust_file_is_refused(signed: Path, keys: dict[str, Path], tmp_path: Path) -> None:
    said = _refused(signed, keys["other-trust"], tmp_path)
    assert "attestations/provenance.dsse.json is not signed by a key of the trust file" in said


@pytest.mark.parametrize("target", ["build/Dockerfile", "report/report.json", "dossier/sample/sample.jsonl"])
def test_one_changed_byte_with_the_checksums_regenerated_is_refused(
    signed: Path, keys: dict[str, Path], tmp_path: Path, target: str
) -> None:
    copy = _linked_copy(signed, tmp_path / "handover")
    data = bytearray((copy / target).read_bytes())
    data[len(data) // 2] ^= 0x01
    _replace(copy / target, bytes(data))
    # What an attacker does next: make SHA256SUMS and manifest.json agree with the changed file.
    reseal(copy)
    said = _refused(copy, keys["trust"], tmp_path)
    # A file the statements name is named itself; any other is caught through the attested SHA256SUMS.
    named = target if target != "dossier/sample/sample.jsonl" else "SHA256SUMS"
    assert f"{named} is not the file that was attested" in said


def test_a_resigned_statement_about_another_image_is_refused(
    signed: Path, keys: dict[str, Path], tmp_path: Path
) -> None:
    """Even signed by the trusted key itself: a statement about another image proves nothing about this one."""
    copy = _linked_copy(signed, tmp_path / "handover")
    envelope_path = copy / "attestations" / "provenance.dsse.json"
    statement = json.loads(base64.b64decode(json.loads(envelope_path.read_text())["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    signed_again = sign_statement(statement, load_signer(keys["team"], None))
    _replace(envelope_path, signed_again.envelope.encode())
    said = _refused(copy, keys["trust"], tmp_path)
    assert "attestations/provenance.dsse.json is about another image" in said


def test_removed_attestations_are_refused_and_unsigned_is_said_without_trust(
    signed: Path, keys: dict[str, Path], tmp_path: Path
) -> None:
    copy = _linked_copy(signed, tmp_path / "handover")
    shutil.rmtree(copy / "attestations")
    said = _refused(copy, keys["trust"], tmp_path)
    assert "attestations/provenance.dsse.json is missing: the hand-over is unattributed" in said
    assert (check_handover(copy).unattributed or "").startswith("unattributed: the folder carries no signature")
    (copy / "attestations").mkdir()
    (copy / "attestations" / "notes.txt").write_text("smuggled\n")
    added = orch("verify", str(copy), "--out", str(tmp_path / "v2"))
    assert added.returncode == 1 and "attestations/notes.txt is in the folder but not in SHA256SUMS" in added.stderr


def test_the_by_hand_signature_check_of_procedure_md_passes_and_fails_with_standard_tools(
    signed: Path, keys: dict[str, Path], tmp_path: Path
) -> None:
    """PROCEDURE.md's signature block, run as written with jq, base64 and ssh-keygen (OpenSSH, a third party)."""
    blocks = procedure_blocks((signed / "PROCEDURE.md").read_text())
    check = next(block for block in blocks if "ssh-keygen -Y verify" in block)
    manifest = read_manifest(signed)
    assert manifest.image_id.removeprefix("sha256:") in check

    def run(folder: Path, trust: Path) -> subprocess.CompletedProcess[str]:
        work = tmp_path / f"work-{trust.name}-{folder.name}"
        work.mkdir()
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", check],
            cwd=folder,
            env={**os.environ, "WORK": str(work), "TRUST": str(trust)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    good = run(signed, keys["trust"])
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.count('Good "orch-attestation" signature for team@example.org') == 2
    assert good.stdout.strip().endswith("PASSED")
    assert run(signed, keys["other-trust"]).returncode != 0, "another team's allowed_signers"
    copy = _linked_copy(signed, tmp_path / "tampered")
    _replace(copy / "ACCESS.md", (copy / "ACCESS.md").read_bytes() + b"\nSet TOKEN=... too.\n")
    reseal(copy)  # the checksums agree again, so only the signed SHA256SUMS digest can tell
    tampered = run(copy, keys["trust"])
    assert tampered.returncode != 0, tampered.stdout + tampered.stderr
    assert tampered.stdout.count("Good") == 2, "the signatures hold; the attested SHA256SUMS does not match"
