"""Environment equivalence on real builds: two builds of tiny-embeddings, one of them cold (`--no-cache`),
install the same files (one environment digest), and a one-byte change in one installed file changes the
digest and `orch compare` names exactly that file.

Cost (docs/environment.md): one cold build of tiny-embeddings (about 1.5 min on the standard machine),
one derived image (a layer appending a byte) and two inventory probes. The other build is the session's
warm tiny-embeddings image (`_warm_tiny_layers`), a separate build run: its venv layer was installed by
another pip process, at another time, so its .pyc headers carry other mtimes.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import docker
import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import Engine
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.environment import ENVIRONMENT_FILE
from orchestrator.stages.build import BuildOptions, write_record
from orchestrator.stages.execute import run_build
from orchestrator.stages.inventory import probe_inventory, write_environment
from tests.integration.helpers import SESSION_TAG_NAMESPACE, orch
from tests.paths import EXAMPLES

CHANGED = "/opt/venv/lib/python3.11/site-packages/torch/version.py"


@pytest.fixture(scope="module")
def cold(engine: Engine, tmp_path_factory: pytest.TempPathFactory, _warm_tiny_layers: BuildRecord) -> Path:
    out = tmp_path_factory.mktemp("env-cold") / "out"
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    record = run_build(loaded, engine, BuildOptions(out=out, no_cache=True, tag=f"{SESSION_TAG_NAMESPACE}/env-cold:1"))
    assert record.status == "passed", record.failure
    return out


def _record(out: Path) -> BuildRecord:
    return BuildRecord.model_validate_json((out / "build.json").read_text())


def test_two_builds_one_of_them_cold_give_one_environment_digest(cold: Path, _warm_tiny_layers: BuildRecord) -> None:
    record, warm = _record(cold), _warm_tiny_layers
    assert record.image is not None and warm.image is not None
    assert record.image.id != warm.image.id, "two builds, two images"
    assert record.cache.cached < record.cache.steps, "--no-cache ran the install again"
    assert record.inventory is not None and warm.inventory is not None
    env, warm_env = record.inventory.environment, warm.inventory.environment
    assert env is not None and warm_env is not None
    assert env.digest == warm_env.digest, "two builds of one dossier installed different bytes"
    assert env.files > 20_000 and env.roots == ["/opt/venv", "/opt/app"]
    # Every .pyc pip wrote is timestamp-based: the one normalisation is what makes the digests meet.
    assert env.normalised["source mtime in timestamp-based __pycache__/*.pyc"] > 1000
    listed = json.loads((cold / ENVIRONMENT_FILE).read_text())
    assert listed["summary"] == env.model_dump() and len(listed["files"]) == env.files


def _append_one_byte(client: docker.DockerClient, image: str, labels: dict[str, str], tag: str) -> str:
    """An image FROM `image` whose only change is one byte appended to CHANGED."""
    dockerfile = f"FROM {image}\nUSER root\nRUN printf '#' >> {CHANGED}\nUSER 10001:10001\n".encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    context.seek(0)
    built, _ = client.images.build(
        fileobj=context, custom_context=True, tag=tag, labels=labels, network_mode="none", rm=True, forcerm=True
    )
    return str(built.id)


def test_one_byte_in_one_installed_file_changes_the_digest_and_compare_names_the_file(
    cold: Path, engine: Engine, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    record = _record(cold)
    assert record.image is not None and record.inventory is not None and record.inventory.environment is not None
    derived = _append_one_byte(
        docker_client, record.image.id, dict(engine.settings.labels), f"{SESSION_TAG_NAMESPACE}/env-1b:1"
    )
    probed = probe_inventory(engine, derived)
    assert probed.inventory is not None and probed.environment is not None, probed.error
    changed_env = probed.inventory.environment
    assert changed_env is not None and changed_env.digest != record.inventory.environment.digest
    assert changed_env.files == record.inventory.environment.files

    # B: the same build record, with the derived image's inventory, as `orch build` would have written it.
    b = tmp_path / "b"
    b.mkdir()
    image = record.image.model_copy(update={"id": derived})
    write_record(b / "build.json", record.model_copy(update={"image": image, "inventory": probed.inventory}))
    write_environment(b, probed.environment)

    result = orch("compare", str(cold), str(b), "--json")
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    comparison = json.loads(result.stdout)
    environment = comparison["environment"]
    assert (environment["changed"], environment["added"], environment["removed"]) == ([CHANGED], [], [])
    assert comparison["environment_verdict"] == "changed"
    assert comparison["unintended"] == [f"environment file changed: {CHANGED}"]

    same = orch("compare", str(cold), str(cold))
    assert same.returncode == 0 and "same environment" in same.stdout + same.stderr, same.stderr[-2000:]
