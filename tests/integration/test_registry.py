"""Publishing to a real registry (Debian's docker-registry, started by scripts/registry.sh with htpasswd
auth on a free loopback port) and verifying by digest on the real engine.

One private copy of tiny-embeddings (its own identity, so its image can be removed) is rebuilt once;
then: hand over with --push and no image file, remove the local image, `orch verify` pulls it by
digest and passes; a tag-only reference is refused (exit 2); a night's publishing records the digest;
the registry stopped is a failed publish with the reason, nothing raised; the password never appears
in output, manifest or publish.json. Signed (issue 29): a signed push stores its attestations beside the
image and `orch verify REF --trust` finds and checks them, refusing another key, another report, a
statement about another image and an image pushed unsigned. The registry is stopped by the module's fixture.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.attest.envelope import sign_statement
from orchestrator.attest.keys import load_signer, load_trust
from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine, PullRequest, RegistryAuth, RemoveImage
from orchestrator.nightly.cell import CellOutcome
from orchestrator.nightly.publish import publish_passed
from orchestrator.stages.attestations_registry import push_attestations
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.publish import publish_image, push_target
from orchestrator.stages.verify import check_handover
from tests.integration.helpers import SESSION_ID, orch, rebuilt_private_copy
from tests.paths import REPO

SCRIPT = REPO / "scripts" / "registry.sh"
USER_VAR = "ORCH_TEST_REGISTRY_USER"
PASSWORD_VAR = "ORCH_TEST_REGISTRY_PASSWORD"


@dataclass(frozen=True)
class Registry:
    address: str
    folder: Path
    password: str

    def script(self, command: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "ORCH_REGISTRY_ADDR": self.address,
            "ORCH_REGISTRY_DIR": str(self.folder),
            "ORCH_REGISTRY_PASSWORD": self.password,
            # The suite's builds can saturate the disk of a 2-core machine: docker-registry's first start from a
            # cold page cache once took over the script's default 30 s there (a CI run; alone it takes 1 s).
            "ORCH_REGISTRY_WAIT": "120",
        }
        return subprocess.run([str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=600, check=False)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    if shutil.which("docker-registry") is None and os.geteuid() != 0:
        message = "Debian's docker-registry is not installed and this is not root (make registry-tools)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    running = Registry(
        address=f"127.0.0.1:{_free_port()}",
        folder=tmp_path_factory.mktemp("registry"),
        password=f"pw-{secrets.token_hex(12)}",
    )
    started = running.script("start")
    assert started.returncode == 0, started.stderr
    yield running
    stopped = running.script("stop")
    assert stopped.returncode == 0, stopped.stderr


@pytest.fixture(scope="module")
def rebuilt(
    engine: Engine, base_image: BaseOutcome, tmp_path_factory: pytest.TempPathFactory
) -> tuple[LoadedDossier, Path]:
    """A private copy of tiny-embeddings, built and probed (cached layers: only its label layer is new)."""
    return rebuilt_private_copy(engine, tmp_path_factory.mktemp("registry-src"), "registry test")


@dataclass(frozen=True)
class PlanPublish:
    """The plan's `publish:` section, as nightly/publish.py reads it."""

    registry: str
    repository: str
    username_env: str | None = USER_VAR
    password_env: str | None = PASSWORD_VAR
    sign_key: Path | None = None


def loaded_id(out: Path) -> str:
    return str(json.loads((out / "build.json").read_text())["image"]["id"])


def _auth(registry: Registry) -> RegistryAuth:
    return RegistryAuth("orch", registry.password)


def _credentials(registry: Registry) -> dict[str, str]:
    return {USER_VAR: "orch", PASSWORD_VAR: registry.password}


def test_a_pushed_handover_without_image_file_verifies_by_digest_after_the_local_image_is_gone(
    engine: Engine, registry: Registry, rebuilt: tuple[LoadedDossier, Path], tmp_path: Path
) -> None:
    loaded, out = rebuilt
    folder = tmp_path / "handover"
    pushed = orch(
        "handover", str(loaded.path), "--from", str(out), "--out", str(folder),
        "--push", f"{registry.address}/orch-test/tiny-{SESSION_ID}",
        "--no-image-file", "--registry-user-env", USER_VAR, "--registry-password-env", PASSWORD_VAR,
        env=_credentials(registry),
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr
    manifest = json.loads((folder / "manifest.json").read_text())
    pinned = manifest["repository_digest"]
    assert pinned.startswith(f"{registry.address}/orch-test/tiny-{SESSION_ID}@sha256:")
    assert not (folder / "image.tar.gz").exists()
    secret_seen = [
        p.name for p in folder.rglob("*") if p.is_file() and registry.password in p.read_text(errors="replace")
    ]
    assert registry.password not in pushed.stdout + pushed.stderr and not secret_seen

    image_id = manifest["image_id"]
    engine.remove(RemoveImage(image_id))  # this test's own image (its own identity): gone from the engine
    assert engine.image(image_id) is None

    verified = orch(
        "verify", str(folder), "--out", str(tmp_path / "verify"),
        "--registry-user-env", USER_VAR, "--registry-password-env", PASSWORD_VAR,
        env=_credentials(registry),
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"pulled {pinned} by digest" in " ".join(verified.stdout.split())
    pulled = engine.image(image_id)
    assert pulled is not None and pinned in pulled.repo_digests
    assert registry.password not in verified.stdout + verified.stderr


def test_a_tag_only_reference_is_refused_with_exit_2(registry: Registry, rebuilt: tuple[LoadedDossier, Path]) -> None:
    _, out = rebuilt
    refused = orch(
        "verify", f"{registry.address}/orch-test/tiny-{SESSION_ID}:moving", "--report", str(out / "report.json")
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "a tag can move" in refused.stderr and "Traceback" not in refused.stderr


def test_a_night_publishes_by_digest_and_a_registry_down_is_a_failed_result(
    engine: Engine, registry: Registry, rebuilt: tuple[LoadedDossier, Path], tmp_path: Path
) -> None:
    loaded, out = rebuilt
    night = tmp_path / "nights" / "2026-12-02"
    cell = f"{loaded.model.name}@local"
    shutil.copytree(out, night / cell)

    spec = PlanPublish(registry=registry.address, repository=f"orch-test/night-{SESSION_ID}")
    passed = CellOutcome(cell_id=cell, status="passed", exit_code=0, duration_s=1.0)
    record = publish_passed(spec, night, [passed], engine_for=lambda _: engine, environ=_credentials(registry))
    assert record.status == "passed", record.detail
    pinned = record.images[0].pinned
    assert pinned is not None and record.images[0].image_id == loaded_id(out)
    # The push tag is gone again, and with it the engine's note of that repository's digest: pulling the
    # digest back asks the registry, which must answer with this very image.
    assert engine.image(record.images[0].tagged or "") is None
    assert engine.pull(PullRequest.by_digest(pinned, _auth(registry))).id == record.images[0].image_id
    assert registry.password not in (night / "publish.json").read_text()

    image_id = record.images[0].image_id
    assert image_id is not None
    stopped = registry.script("stop")
    assert stopped.returncode == 0, stopped.stderr
    try:
        down = publish_image(engine, image_id, push_target(registry.address, spec.repository, "after-stop"))
        assert down.status == "failed" and down.reason is not None and "connection refused" in down.reason
        night_down = publish_passed(spec, night, [passed], engine_for=lambda _: engine, environ=_credentials(registry))
        assert night_down.status == "failed" and "connection refused" in night_down.detail
        assert json.loads((night / "publish.json").read_text())["status"] == "failed"
    finally:
        restarted = registry.script("start")  # the module's fixture stops it again
        assert restarted.returncode == 0, restarted.stderr


def _keygen(folder: Path, name: str) -> tuple[Path, Path]:
    """An Ed25519 key made by ssh-keygen, and an allowed_signers file trusting it."""
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    trust = folder / f"{name}.allowed_signers"
    trust.write_text(f"{name}@example.org {key.with_suffix('.pub').read_text()}")
    return key, trust


def _verify_reference(pinned: str, report: Path, trust: Path, registry: Registry, out: Path) -> str:
    result = orch(
        "verify", pinned, "--report", str(report), "--trust", str(trust), "--out", str(out),
        "--registry-user-env", USER_VAR, "--registry-password-env", PASSWORD_VAR,
        env=_credentials(registry),
    )  # fmt: skip
    said = " ".join((result.stdout + result.stderr).split())
    assert registry.password not in said
    return f"exit {result.returncode}: {said}"


def test_a_signed_push_stores_its_attestations_beside_the_image_and_verify_refuses_what_does_not_hold(
    engine: Engine, registry: Registry, rebuilt: tuple[LoadedDossier, Path], tmp_path: Path
) -> None:
    loaded, out = rebuilt
    team_key, team_trust = _keygen(tmp_path, "team")
    _, other_trust = _keygen(tmp_path, "other")
    folder = tmp_path / "handover"
    repository = f"{registry.address}/orch-test/signed-{SESSION_ID}"
    pushed = orch(
        "handover", str(loaded.path), "--from", str(out), "--out", str(folder), "--push", repository,
        "--no-image-file", "--sign", str(team_key),
        "--registry-user-env", USER_VAR, "--registry-password-env", PASSWORD_VAR,
        env=_credentials(registry),
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    pinned = json.loads((folder / "manifest.json").read_text())["repository_digest"]
    # The folder's attestations name the pushed digest too, so the folder verifies when the image is pulled.
    checked = check_handover(folder, trusted=load_trust(team_trust))
    assert checked.attribution is not None and checked.attribution.principals == "team@example.org"
    attestations = f"{repository}:{pinned.partition('@')[2].replace(':', '-')}.orch-att"
    assert engine.image(attestations) is None, "pushed, then the local tag removed"

    report = folder / "report" / "report.json"
    refused = _verify_reference(pinned, report, other_trust, registry, tmp_path / "v1")
    assert refused.startswith("exit 1") and "is not signed by a key of the trust file" in refused
    another_report = tmp_path / "report.json"
    another_report.write_text(report.read_text() + "\n")
    refused = _verify_reference(pinned, another_report, team_trust, registry, tmp_path / "v2")
    assert refused.startswith("exit 1") and "is not the report the attestations name" in refused

    # Re-signed by the trusted key, but about another image, and pushed over the attestation tag.
    forged = tmp_path / "forged"
    (forged / "attestations").mkdir(parents=True)
    signer = load_signer(team_key, None)
    for name in ("provenance", "verification"):
        envelope = json.loads((folder / "attestations" / f"{name}.dsse.json").read_text())
        statement = json.loads(base64.b64decode(envelope["payload"]))
        statement["subject"] = [{"name": "elsewhere/app", "digest": {"sha256": "0" * 64}}]
        signed = sign_statement(statement, signer)
        (forged / "attestations" / f"{name}.dsse.json").write_text(signed.envelope)
        (forged / "attestations" / f"{name}.sshsig").write_text(signed.sshsig)
    push_attestations(engine, forged, pinned, _auth(registry))
    refused = _verify_reference(pinned, report, team_trust, registry, tmp_path / "v3")
    assert refused.startswith("exit 1") and "is about another image" in refused

    unsigned = publish_image(
        engine,
        loaded_id(out),
        push_target(registry.address, f"orch-test/unsigned-{SESSION_ID}", "x"),
        _auth(registry),
    )
    assert unsigned.pinned is not None, unsigned.reason
    refused = _verify_reference(unsigned.pinned, report, team_trust, registry, tmp_path / "v4")
    assert refused.startswith("exit 1") and "has no attestations in the registry" in refused
    assert not any((tmp_path / f"v{n}").exists() for n in range(1, 5)), "refused before anything ran"


def test_a_signed_night_publishes_attestations_that_verify_by_reference(
    engine: Engine, registry: Registry, rebuilt: tuple[LoadedDossier, Path], tmp_path: Path
) -> None:
    loaded, out = rebuilt
    key, trust = _keygen(tmp_path, "nightly")
    night = tmp_path / "nights" / "2026-12-03"
    cell = f"{loaded.model.name}@local"
    shutil.copytree(out, night / cell)
    spec = PlanPublish(registry=registry.address, repository=f"orch-test/signed-night-{SESSION_ID}", sign_key=key)
    passed = CellOutcome(cell_id=cell, status="passed", exit_code=0, duration_s=1.0)
    record = publish_passed(spec, night, [passed], engine_for=lambda _: engine, environ=_credentials(registry))
    assert record.status == "passed", record.detail
    published = record.images[0]
    assert published.pinned is not None and published.attestations is not None
    assert published.attestations.endswith(".orch-att")
    said = _verify_reference(published.pinned, night / cell / "report.json", trust, registry, tmp_path / "verify")
    assert said.startswith("exit 0"), said
    assert "signed by nightly@example.org (SHA256:" in said
