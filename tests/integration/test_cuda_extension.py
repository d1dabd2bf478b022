"""examples/cpp-extension/dossier-cuda.yaml for real, in one build shared by every test here: the `gate` operator
as a CUDA kernel built by nvcc 13.0 from NVIDIA's wheels on the local Debian base (pip offline, from the
wheelhouse), its nvcc version and GPU archs read back from the built object, no compiler in the runtime
image, and — on a machine without an NVIDIA GPU — a device stage that fails saying why.

Heavy (the CUDA 13 torch layers, 2.9 GB of wheels, as test_probe's CUDA test): skipped, saying so, when the
disk cannot hold it; `-k "not cuda"` leaves it out of a quick local run.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from orchestrator.checks.cuda_archs import expected_archs
from orchestrator.dossier.load import load_dossier
from orchestrator.engine import Engine, RunSpec
from orchestrator.model.build_record import BuildRecord
from orchestrator.report.write import read_report
from orchestrator.stages.base_image import BaseOutcome
from tests.integration.helpers import orch, session_containers
from tests.paths import EXAMPLES

DOSSIER = EXAMPLES / "cpp-extension" / "dossier-cuda.yaml"
LINE = "extension gate_ext: gate matches gate_reference:gate"
ARCHS = "extension gate_ext compiled for the dossier's GPU archs"
#: Measured like test_probe's CUDA 13 build (docs/benchmarks.md): the torch layers dominate.
NEEDED_GIB = 30


@pytest.fixture(scope="module")
def cuda_rebuilt(
    engine: Engine, base_image: BaseOutcome, docker_client: docker.DockerClient
) -> Iterator[tuple[Path, str]]:
    # conftest's needs_free_space, for a module-scoped build: a skip saying why, not a cascade of ENOSPC.
    places = [tempfile.gettempdir(), str(docker_client.info().get("DockerRootDir") or "")]
    for place in (place for place in places if Path(place).is_dir()):
        free = shutil.disk_usage(place).free / 2**30
        if free < NEEDED_GIB:
            pytest.skip(f"the CUDA extension build needs {NEEDED_GIB} GiB free and {place} has {free:.1f} GiB")
    folder = Path(tempfile.mkdtemp(prefix="orch-cuda-ext-"))
    try:
        out = folder / "out"
        before = session_containers()
        result = orch("rebuild", str(DOSSIER), "--out", str(out), "--no-preflight")
        assert session_containers() == before, "orch rebuild left containers behind"
        # exit 1: the image builds and passes its stage; the device stage fails here (no NVIDIA GPU)
        assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
        yield out, result.stdout
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _record(out: Path) -> BuildRecord:
    return BuildRecord.model_validate_json((out / "build.json").read_text())


def test_cuda_extension_builds_offline_and_records_nvcc_and_the_archs_read_from_the_object(
    cuda_rebuilt: tuple[Path, str],
) -> None:
    out, _ = cuda_rebuilt
    record = _record(out)
    assert record.image is not None and record.failure is None
    dockerfile = (out / "context" / "Dockerfile").read_text()
    # The build ran with no network at all: the compilers too came from the context (.deb files the host
    # collected from the base's archive, stages/debhouse.py), recorded with their sha256.
    assert record.context.network == "none" and "apt-get install" not in dockerfile
    packages = {deb.package: deb for deb in record.context.debs}
    assert {"g++-12", "gcc-12", "python3.11-dev"} <= set(packages), sorted(packages)
    assert all(len(deb.sha256) == 64 for deb in record.context.debs)
    assert sorted(p.name for p in (out / "context" / "toolchain-debs").iterdir()) == sorted(
        deb.file for deb in record.context.debs
    )
    # No install reaches an index: the venv's seed (uv, the base's ensurepip wheels), the venv (uv) and the
    # toolchain wheels (pip --target) all install from local wheels: every install line says --no-index.
    installs = dockerfile.count("pip install ")
    assert installs == 3 and dockerfile.count("--no-index") == installs, dockerfile
    assert "--target /opt/orch/cuda-wheels" in dockerfile
    assert "--find-links /tmp/orch/wheels " in dockerfile and "--find-links /tmp/orch/toolchain-wheels " in dockerfile
    assert sorted(p.name.split("-")[0] for p in (out / "context" / "toolchain-wheels").iterdir()) == [
        "nvidia_cuda_cccl",
        "nvidia_cuda_crt",
        "nvidia_cuda_nvcc",
        "nvidia_cuda_runtime",
        "nvidia_nvvm",
    ]
    inventory = record.inventory
    assert inventory is not None and inventory.extensions is not None
    assert "release 13.0, V13.0.88" in (inventory.extensions.toolchain["nvcc"] or "")
    assert "nvidia_cuda_nvcc==13.0.88" in inventory.extensions.toolchain_wheels
    (artefact,) = inventory.extensions.artefacts
    build = load_dossier(DOSSIER).model.build
    assert build is not None
    # read from the .nv_fatbin section of the object in the image, equal to what the dossier asked
    assert artefact.compiled_archs == expected_archs(build.cuda_archs) == ["sm_80", "compute_90", "sm_90"]
    assert any(comment.startswith("GCC: (Debian 12.") for comment in artefact.compilers), artefact.compilers
    report = read_report(out / "report.json")
    image = {check.name: check for check in report.stage("image").checks}
    assert report.stage("image").status == "passed"
    assert image[ARCHS].passed and image[ARCHS].observed == "sm_80, compute_90, sm_90"
    assert image["extension gate_ext in the image"].passed


def test_the_runtime_image_holds_no_compiler_and_no_toolchain_wheel(
    engine: Engine, cuda_rebuilt: tuple[Path, str]
) -> None:
    record = _record(cuda_rebuilt[0])
    assert record.image is not None
    probe = (
        "for c in nvcc gcc g++ cc c++ gcc-12 g++-12 cpp-12 cicc; do command -v $c; done; "
        # executables and links by a compiler's name (the base's gcc-12-base package lists are not one)
        "find / -xdev \\( -name nvcc -o -name 'gcc*' -o -name 'g++*' -o -name cc1plus -o -name cc1 -o -name cicc \\) "
        "\\( -type f -perm -u+x -o -type l \\) 2>/dev/null; find / -xdev -name 'nvidia_cuda_nvcc*' 2>/dev/null; "
        "ls -d /opt/orch/cuda /opt/orch/cuda-wheels /tmp/orch 2>/dev/null; true"
    )
    result = engine.run(RunSpec(image=record.image.id, command=["sh", "-c", probe], timeout_s=120))
    assert result.exit_code == 0 and result.stdout.strip() == "", result.stdout
    listing = engine.run(RunSpec(image=record.image.id, command=["ls", "/opt/orch/ext"], timeout_s=60))
    assert "gate_ext." in listing.stdout and "orch-extensions.json" in listing.stdout


def test_the_cuda13_image_on_a_cpu_machine_passes_its_image_stage_and_fails_host_and_device(
    cuda_rebuilt: tuple[Path, str],
) -> None:
    """Was test_probe.py's test_cuda_dossier_on_a_cpu_machine_fails_at_device, which built tiny-embeddings'
    `local-cuda13` variant: a second 25-30 GB CUDA 13 image of the very same lock (requirements-cu130.lock,
    byte for byte). Issue 22: this module's one CUDA 13 image serves both; the variant's own Dockerfile is
    pinned by tests/golden (tiny-embeddings--dossier-cuda+local-cuda13.Dockerfile)."""
    out, _ = cuda_rebuilt
    assert (EXAMPLES / "cpp-extension" / "requirements-cu130.lock").read_bytes() == (
        EXAMPLES / "tiny-embeddings" / "requirements-cu130.lock"
    ).read_bytes(), "the two CUDA 13 dossiers no longer share a lock: test the local-cuda13 variant on its own"
    report = read_report(out / "report.json")
    stages = report.stages
    assert stages["image"].status == "passed", stages["image"].first_error
    image = {check.name: check for check in stages["image"].checks}
    assert image["torch build matches platform"].observed.startswith("torch 2.14.1+cu130, cuda=13.0")
    assert stages["host"].status == "failed"
    host = {check.name: check for check in stages["host"].checks}
    assert host["NVIDIA driver present"].observed == "no NVIDIA driver found"
    assert host["driver supports the image's CUDA"].observed == "no-driver"
    assert stages["device"].status == "failed"
    device = {check.name: check for check in stages["device"].checks}
    assert device["torch is a CUDA build"].passed, "the CUDA build is there..."
    visible = device["NVIDIA GPU visible in the container"]
    assert not visible.passed and "torch sees 0 device(s)" in visible.observed, "...but no GPU to run it on"
    assert stages["sample"].status == "not_run"
    assert stages["sample"].reason is not None and "device stage failed" in stages["sample"].reason
    assert report.verdict == "failed"


def test_the_device_stage_fails_naming_the_reason_with_no_cpu_fallback(cuda_rebuilt: tuple[Path, str]) -> None:
    out, _ = cuda_rebuilt
    report = read_report(out / "report.json")
    device = report.stage("device")
    assert device.status == "failed"
    lines = {check.name: check for check in device.checks}
    assert not lines["NVIDIA GPU visible in the container"].passed
    # the extension's own line runs and says why, rather than falling back to the CPU
    assert not lines[LINE].passed and lines[LINE].observed == "no GPU visible to torch"
    assert report.stage("sample").status == "not_run"
    assert "no silent CPU fallback" in (report.stage("sample").reason or "")
    assert "extension gate\\_ext: gate matches" in (out / "report.md").read_text()


def test_the_recorded_archs_agree_with_cuobjdump(engine: Engine, cuda_rebuilt: tuple[Path, str]) -> None:
    """An independent reading of the same object: NVIDIA's cuobjdump, which torch's triton wheel ships in the
    runtime image (a disassembler, not a compiler), lists the same machine code and PTX as orch's parser."""
    record = _record(cuda_rebuilt[0])
    assert record.image is not None and record.inventory is not None and record.inventory.extensions is not None
    (artefact,) = record.inventory.extensions.artefacts
    cuobjdump = "/opt/venv/lib/python3.11/site-packages/triton/backends/nvidia/bin/cuobjdump"
    listed = engine.run(
        RunSpec(
            image=record.image.id,
            command=[cuobjdump, "--list-elf", "--list-ptx", f"/opt/orch/ext/{artefact.file}"],
            timeout_s=60,
        )
    )
    assert listed.exit_code == 0, listed.stderr
    # "ELF file    1: gate_ext.1.sm_80.cubin" / "PTX file    1: gate_ext.1.sm_90.ptx"
    found = {
        ("compute_" if line.startswith("PTX") else "sm_") + re.search(r"\.sm_(\d+)", line).group(1)  # type: ignore[union-attr]
        for line in listed.stdout.splitlines()
        if re.search(r"\.sm_\d+", line)
    }
    assert sorted(found) == sorted(artefact.compiled_archs), listed.stdout
