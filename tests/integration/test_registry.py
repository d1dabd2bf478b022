"""Publishing to a real registry (Debian's docker-registry, started by scripts/registry.sh with htpasswd
auth on a free loopback port) and verifying by digest on the real engine.

One private copy of tiny-embeddings (its own identity, so its image can be removed) is rebuilt once;
then: hand over with --push and no image file, remove the local image, `orch verify` pulls it by
digest and passes; a tag-only reference is refused (exit 2); a night's publishing records the digest;
the registry stopped is a failed publish with the reason, nothing raised; the password never appears
in output, manifest or publish.json. The registry is stopped by the module's fixture.
"""

from __future__ import annotations

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

from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.engine import Engine, PullRequest, RegistryAuth, RemoveImage
from orchestrator.nightly.cell import CellOutcome
from orchestrator.nightly.publish import publish_passed
from orchestrator.report.write import write_report
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.execute import run_build, run_probe
from orchestrator.stages.probe import ProbeOptions
from orchestrator.stages.publish import publish_image, push_target
from tests.integration.helpers import SESSION_ID, orch
from tests.paths import EXAMPLES, REPO

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
    root = tmp_path_factory.mktemp("registry-src")
    example = root / "tiny-embeddings"
    shutil.copytree(EXAMPLES / "tiny-embeddings", example)
    dossier = example / "dossier.yaml"
    dossier.write_text(dossier.read_text().replace("on the CPU.", f"on the CPU (registry test {SESSION_ID})."))
    loaded = load_dossier(dossier)
    out = root / "rebuild"
    record = run_build(loaded, engine, BuildOptions(out=out))
    assert record.image is not None, record.failure
    report = run_probe(loaded, engine, ProbeOptions(out=out, image=record.image.tag))
    write_report(report, out)
    assert report.verdict == "passed", {n: s.first_error for n, s in report.stages.items()}
    return loaded, out


@dataclass(frozen=True)
class PlanPublish:
    """The plan's `publish:` section, as nightly/publish.py reads it."""

    registry: str
    repository: str
    username_env: str | None = USER_VAR
    password_env: str | None = PASSWORD_VAR


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
