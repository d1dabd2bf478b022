"""Hand-over and verify on the real engine: round trip, tampering, secrets, interruption."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.engine import Engine, RemoveImage, RootfsImport
from orchestrator.report.write import read_report, write_report
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build import BuildOptions, read_record
from orchestrator.stages.execute import run_build, run_probe
from orchestrator.stages.handover import procedure_blocks, read_manifest, write_handover
from orchestrator.stages.probe import ProbeOptions
from tests.handover_craft import reseal, retag_tarball
from tests.integration.foreign import OWNER_LABEL, ForeignObjects
from tests.integration.helpers import SESSION_ID, orch, session_containers
from tests.integration.local_index import serve_index
from tests.paths import EXAMPLES

CANARY_USER = "orch-handover-canary"
CANARY_SECRET = "hc-51e2-7f3a-canary"


def _linked_copy(source: Path, dest: Path) -> Path:
    """A copy of a hand-over folder made of hard links: the image tarball is hundreds of MB per copy.

    A test that changes a file must replace it (unlink, then write), never write through the link.
    """
    shutil.copytree(source, dest, copy_function=os.link)
    return dest


def _sha256(line: bytes) -> str:
    return hashlib.sha256(line + b"\n").hexdigest()


def _rebuild(engine: Engine, loaded: LoadedDossier, out: Path) -> None:
    record = run_build(loaded, engine, BuildOptions(out=out))
    assert record.image is not None, record.failure
    report = run_probe(loaded, engine, ProbeOptions(out=out, image=record.image.tag))
    write_report(report, out)
    assert report.verdict == "passed", {n: s.first_error for n, s in report.stages.items()}


@pytest.fixture(scope="module")
def handed_over(engine: Engine, base_image: BaseOutcome, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hand-over of a private copy of tiny-embeddings (its own identity, so its image can be removed)."""
    root = tmp_path_factory.mktemp("handover-src")
    example = root / "tiny-embeddings"
    shutil.copytree(EXAMPLES / "tiny-embeddings", example)
    dossier = example / "dossier.yaml"
    # Weights and data too, so PROCEDURE.md's by-hand run must mount them: the command checks they are there.
    (example / "weights").mkdir()
    (example / "weights" / "tiny.bin").write_bytes(b"tiny weights\n")
    (example / "data.bin").write_bytes(b"tiny data\n")
    artifacts = (
        "data:\n"
        f"  - name: table\n    path: data.bin\n    sha256: {_sha256(b'tiny data')}\n    provenance: the test\n"
        "weights:\n"
        f"  - name: tiny\n    path: weights/tiny.bin\n    sha256: {_sha256(b'tiny weights')}\n    provenance: the test\n"
    )
    text = dossier.read_text().replace("on the CPU.", "on the CPU (hand-over test).")
    text = text.replace("expect:\n", artifacts + "\nexpect:\n", 1)
    text = text.replace(
        "  command: [python, embed.py,",
        "  command: [sh, -c, 'test -s /orch/weights/tiny && test -s /orch/data/table && exec python \"$@\"', sh, embed.py,",
    )
    dossier.write_text(text)
    loaded = load_dossier(dossier)
    rebuild = root / "rebuild"
    _rebuild(engine, loaded, rebuild)
    out = root / "handover"
    manifest = write_handover(loaded, engine, rebuild, out)
    assert manifest.image_id and (out / "SHA256SUMS").is_file()
    return out


def test_handover_folder_holds_everything_and_verifies_on_a_fresh_copy(
    engine: Engine, handed_over: Path, tmp_path: Path
) -> None:
    names = {p.relative_to(handed_over).as_posix() for p in handed_over.rglob("*") if p.is_file()}
    for expected in (
        "image.tar.gz",
        "dossier/dossier.yaml",
        "dossier/requirements-cpu.lock",
        "dossier/app/embed.py",
        "dossier/sample/sample.jsonl",
        "dossier/reference/embeddings.npy",
        "build/Dockerfile",
        "build/requirements.lock",
        "build/wheels.sha256",
        "build/build.json",
        "build/pip-freeze.txt",
        "build/environment.json",
        "build/sbom.cdx.json",
        "report/report.json",
        "report/report.html",
        "report/report.md",
        "report/junit.xml",
        "PROCEDURE.md",
        "ACCESS.md",
        "manifest.json",
        "SHA256SUMS",
    ):
        assert expected in names, expected
    procedure = (handed_over / "PROCEDURE.md").read_text()
    manifest = read_manifest(handed_over)
    assert "docker load -i image.tar.gz" in procedure and manifest.image_id in procedure
    assert "orch verify ." in procedure and "needs **no credentials**" in (handed_over / "ACCESS.md").read_text()

    fresh = _linked_copy(handed_over, tmp_path / "elsewhere" / "handover")
    engine.remove(RemoveImage(manifest.image_id))
    assert engine.image(manifest.image_id) is None
    result = orch("verify", str(fresh), "--out", str(tmp_path / "verify-out"))
    assert result.returncode == 0, result.stdout + result.stderr
    # The replayed image's environment digest is the shipped one (docs/environment.md).
    assert manifest.environment_digest is not None
    assert f"same environment ({manifest.environment_digest})" in " ".join((result.stdout + result.stderr).split())
    reloaded = engine.image(manifest.image_id)
    assert reloaded is not None, "verify loaded the image"
    # Loaded with no tag of the tarball's; tagged by id, and with the dossier's own tag, which was free.
    assert set(reloaded.tags) == {f"orch-handover:{manifest.image_id.removeprefix('sha256:')}", manifest.image_tag}
    replayed = read_report(tmp_path / "verify-out" / "report.json")
    shipped = read_report(fresh / "report" / "report.json")
    assert replayed.verdict == "passed"
    assert "numbers differ" not in result.stdout, "the same numbers"
    same = {c.name: c.observed for c in shipped.stage("sample").checks}
    assert {c.name: c.observed for c in replayed.stage("sample").checks} == same


def test_a_real_builds_sbom_is_valid_cyclonedx_of_its_image_and_its_layers_add_up(handed_over: Path) -> None:
    """The SBOM and the layer sizes of a real build (the hand-over's own, so no extra build)."""
    text = (handed_over / "build" / "sbom.cdx.json").read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    sbom = json.loads(text)
    manifest = read_manifest(handed_over)
    assert sbom["metadata"]["component"]["version"] == manifest.image_id
    components = {c["name"]: c for c in sbom["components"]}
    torch = components["torch"]
    assert torch["version"] == "2.13.0+cpu" and torch["hashes"][0]["alg"] == "SHA-256"
    assert components["orch/debian-python"]["type"] == "container", "the base image"
    assert "arch=amd64" in components["libc6"]["purl"] and "distro=debian-12" in components["libc6"]["purl"]
    record = read_record(handed_over / "build" / "build.json")
    assert record.image is not None and record.layers
    assert record.layers[0].step == "base image" and record.layers[-1].step.startswith("LABEL")
    assert sum(layer.size_bytes for layer in record.layers) == record.image.size_bytes, "the layers add up to the image"
    biggest = max(record.layers, key=lambda layer: layer.size_bytes)
    # The venv, installed in place by the one install step (BuildKit's mounted wheels): the largest layer.
    assert record.context.builder == "buildkit"
    assert biggest.step.startswith("RUN --mount=type=bind,source=orch"), biggest


@pytest.mark.parametrize(
    "target",
    [
        "image.tar.gz",
        "dossier/sample/sample.jsonl",
        "report/report.json",
        "build/sbom.cdx.json",
        "PROCEDURE.md",
        "manifest.json",
    ],
)
def test_one_changed_byte_fails_verify_naming_the_file(handed_over: Path, tmp_path: Path, target: str) -> None:
    copy = _linked_copy(handed_over, tmp_path / "handover")
    path = copy / target
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.unlink()  # break the hard link: the shared hand-over stays intact for the other tests
    path.write_bytes(bytes(data))
    result = orch("verify", str(copy))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{target} does not match its checksum" in result.stderr


def test_an_added_file_fails_verify(handed_over: Path, tmp_path: Path) -> None:
    copy = _linked_copy(handed_over, tmp_path / "handover")
    (copy / "dossier" / "extra.txt").write_text("smuggled\n")
    result = orch("verify", str(copy))
    assert result.returncode == 1 and "dossier/extra.txt is in the folder but not in SHA256SUMS" in result.stderr


def test_killing_handover_halfway_leaves_no_folder_that_verifies(
    engine: Engine, handed_over: Path, tmp_path: Path
) -> None:
    source = handed_over.parent / "rebuild"
    dossier = handed_over.parent / "tiny-embeddings" / "dossier.yaml"
    out = tmp_path / "handover"
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "handover", str(dossier), "--from", str(source), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    partial: list[Path] = []
    while time.monotonic() < deadline and not partial:
        partial = [p for p in tmp_path.iterdir() if p.name.startswith(".handover.orch-partial-")]
        time.sleep(0.05)
    assert partial, "the hand-over started writing"
    time.sleep(0.5)  # inside docker save: the image is being written
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert not out.exists(), "an interrupted hand-over never leaves the destination folder"
    result = orch("verify", str(partial[0]))
    assert result.returncode == 1 and "not a complete hand-over folder" in result.stderr
    shutil.rmtree(partial[0])


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MiB filesystem (tmpfs): a hand-over into it meets a real ENOSPC."""
    if os.geteuid() != 0 and os.environ.get("CI") != "true":
        pytest.skip("mounting a tmpfs needs root (CI runs as root, as the engine needs)")
    mount = tmp_path / "small-disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_fails_the_handover_with_one_message_and_leaves_nothing(
    handed_over: Path, small_disk: Path
) -> None:
    source = handed_over.parent / "rebuild"
    dossier = handed_over.parent / "tiny-embeddings" / "dossier.yaml"
    result = orch("handover", str(dossier), "--from", str(source), "--out", str(small_disk / "handover"))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "error[disk-full]" in result.stderr and f"no space left in {small_disk}" in result.stderr
    assert "GB are free now" in result.stderr and "Traceback" not in result.stderr
    assert list(small_disk.iterdir()) == [], "the half-written hand-over was removed"


def test_a_canary_credential_is_nowhere_in_the_handover(
    engine: Engine, base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    loaded_reference = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    from orchestrator.stages.wheelhouse import TargetPlatform, collect_wheels

    collect_wheels(loaded_reference.lock, TargetPlatform("3.11", "2.36"), wheels)
    with serve_index(sorted(wheels.glob("*.whl")), credentials=f"{CANARY_USER}:{CANARY_SECRET}") as (url, state):
        dossier = tiny_example / "dossier.yaml"
        dossier.write_text(
            dossier.read_text().replace(
                "  indexes:\n    - url: https://download.pytorch.org/whl/cpu\n",
                f"  use_pypi: false\n  indexes:\n    - url: {url}/simple\n      access: ORCH_HANDOVER_CANARY\n",
            )
        )
        env = {"ORCH_HANDOVER_CANARY": f"{CANARY_USER}:{CANARY_SECRET}", "ORCH_CACHE_DIR": str(tmp_path / "cache")}
        out = tmp_path / "handover"
        # Signed too (`orch rebuild --handover --sign`): the attestations are scanned for the canary like every file.
        key = tmp_path / "signing-key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        result = orch(
            "rebuild", str(dossier), "--out", str(tmp_path / "rebuild"), "--handover", str(out), "--sign", str(key),
            env=env,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert "signed hand-over folder" in result.stdout
        assert state.authorized_hits > 0
    assert "ORCH_HANDOVER_CANARY" in (out / "ACCESS.md").read_text(), "the credential is named"
    assert sorted(p.name for p in (out / "attestations").iterdir()) == [
        "provenance.dsse.json",
        "provenance.sshsig",
        "verification.dsse.json",
        "verification.sshsig",
    ]
    for envelope in (out / "attestations").glob("*.dsse.json"):
        # The statement travels base64-encoded: read it decoded, as a receiving team does.
        statement = base64.b64decode(json.loads(envelope.read_text())["payload"])
        assert CANARY_SECRET.encode() not in statement and CANARY_USER.encode() not in statement, envelope.name
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as handle:
            previous = b""
            while chunk := handle.read(1 << 22):
                window = previous + chunk
                assert CANARY_SECRET.encode() not in window, f"the canary secret is in {path}"
                assert CANARY_USER.encode() not in window, f"the canary user is in {path}"
                previous = chunk[-64:]


# -- verify trusts nothing it has not checked ----------------------------------------------------------


def _tags_of(engine: Engine, ref: str) -> tuple[str, tuple[str, ...]]:
    image = engine.image(ref)
    assert image is not None, ref
    return image.id, image.tags


@pytest.fixture
def tiny_foreign_image(engine: Engine, tmp_path: Path) -> Iterator[str]:
    """Another user's tiny image (their label, not the session's), tagged; removed by id at the end."""
    root = tmp_path / "foreign-root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "foreign").write_text("not orch's\n")
    tar_path = tmp_path / "foreign.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(root / "etc", arcname="etc")
    repository = f"another-user-{SESSION_ID}/tiny"
    image_id = engine.load(RootfsImport(tar_path, repository, "1", [f"LABEL {OWNER_LABEL}=another-user"]))[0]
    yield f"{repository}:1"
    engine.remove(RemoveImage(image_id))


def test_a_swapped_tarball_is_refused_before_loading_and_moves_no_tag(
    engine: Engine, handed_over: Path, tiny_foreign_image: str, tmp_path: Path
) -> None:
    foreign_image = tiny_foreign_image
    copy = _linked_copy(handed_over, tmp_path / "handover")
    manifest = read_manifest(copy)
    assert engine.image(manifest.image_id) is not None, "the shipped image is on this host: the old lookup passed"
    foreign_before = _tags_of(engine, foreign_image)
    (copy / "image.tar.gz").unlink()
    with (copy / "image.tar.gz").open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as packed:
        engine.save(foreign_image, packed)  # type: ignore[arg-type]
    reseal(copy)
    result = orch("verify", str(copy), "--out", str(tmp_path / "verify-out"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "error[handover-damaged]: image.tar.gz: it holds image sha256:" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert _tags_of(engine, foreign_image) == foreign_before
    assert not (tmp_path / "verify-out").exists(), "nothing ran"


def test_a_tarball_naming_an_existing_tag_loads_untagged_and_the_tag_stays(
    engine: Engine, handed_over: Path, foreign_objects: ForeignObjects, tmp_path: Path
) -> None:
    """The tar's RepoTags and the manifest's image_tag both name another user's tag: checks pass, no tag moves.

    The session's end checks that tag again (conftest.foreign_objects): still on the other user's image.
    """
    foreign_image = foreign_objects.tag
    copy = _linked_copy(handed_over, tmp_path / "handover")
    manifest = read_manifest(copy)
    foreign_before = _tags_of(engine, foreign_image)
    (copy / "image.tar.gz").unlink()
    retag_tarball(handed_over / "image.tar.gz", copy / "image.tar.gz", [foreign_image])
    reseal(copy, manifest_update={"image_tag": foreign_image})
    engine.remove(RemoveImage(manifest.image_id))  # so that verify really loads it
    result = orch("verify", str(copy), "--out", str(tmp_path / "verify-out"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert _tags_of(engine, foreign_image) == foreign_before, "the foreign tag still names the foreign image"
    loaded_id, loaded_tags = _tags_of(engine, manifest.image_id)
    assert loaded_tags == (f"orch-handover:{manifest.image_id.removeprefix('sha256:')}",), loaded_tags
    assert loaded_id == manifest.image_id


def test_verify_refuses_a_shipped_dossier_reading_a_host_file_before_any_container(
    engine: Engine, handed_over: Path, tmp_path: Path
) -> None:
    copy = _linked_copy(handed_over, tmp_path / "handover")
    dossier = copy / "dossier" / "dossier.yaml"
    text = dossier.read_text().replace("- path: sample/sample.jsonl", "- path: /etc/passwd")
    dossier.unlink()
    dossier.write_text(text)
    reseal(copy)
    containers_before = session_containers()
    result = orch("verify", str(copy), "--out", str(tmp_path / "verify-out"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "may reference only files inside the folder" in result.stderr
    assert session_containers() == containers_before
    assert not (tmp_path / "verify-out").exists()


def test_procedure_followed_literally_works_and_the_folder_still_verifies(
    engine: Engine, handed_over: Path, tmp_path: Path
) -> None:
    """Every ```sh block of PROCEDURE.md, in order, run from the folder as written; then nothing was added."""
    copy = _linked_copy(handed_over, tmp_path / "handover")
    before = sorted(str(p.relative_to(copy)) for p in copy.rglob("*"))
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "orch").write_text(f'#!/bin/sh\nexec {sys.executable} -m orchestrator "$@"\n')
    (shim / "orch").chmod(0o755)
    blocks = procedure_blocks((copy / "PROCEDURE.md").read_text())
    assert len(blocks) >= 7, blocks
    work = tmp_path / "work"
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(blocks)],
        cwd=copy,
        env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "WORK": str(work)},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert (work / "out" / "embeddings.npy").is_file(), "the by-hand run (weights and data mounted) wrote its output"
    assert read_report(work / "probe-out" / "report.json").verdict == "passed"
    assert read_report(work / "verify-out" / "report.json").verdict == "passed"
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == before, "the procedure added nothing"
