"""CUDA extensions: the dossier's nvcc and toolchain lock, the rendered builder, the fatbin read back from the
object, and the arch gap said on the device (examples/cpp-extension/dossier-cuda.yaml)."""

from __future__ import annotations

import importlib.util
import shutil
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.checks.cuda_archs import arch_gap, expected_archs
from orchestrator.checks.extension import extension_check_lines
from orchestrator.checks.image import extension_checks
from orchestrator.dossier.coherence import nvcc_wheel_name
from orchestrator.dossier.load import load_dossier
from orchestrator.errors import DossierError
from orchestrator.model.inventory import parse_inventory
from orchestrator.plan.build import default_build_network, make_plan
from orchestrator.render.dockerfile import render_dockerfile

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cpp-extension"
FIXTURE = ROOT / "tests" / "fixtures" / "gate_ext.nv_fatbin"


def _probe(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"orch_probe_{name}", ROOT / "probes" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    target = tmp_path / "cpp-extension"
    shutil.copytree(EXAMPLE, target)
    return target


def _edit(folder: Path, change: dict[str, Any], system: dict[str, Any] | None = None) -> Path:
    path = folder / "dossier-cuda.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["build"] = {**doc["build"], **change}
    if system is not None:
        doc["system"] = {**doc["system"], **system}
    path.write_text(yaml.safe_dump(doc))
    return path


# -- the dossier ---------------------------------------------------------------------------------------


def test_the_cuda_example_loads_with_its_toolchain_lock(folder: Path) -> None:
    loaded = load_dossier(folder / "dossier-cuda.yaml")
    build = loaded.model.build
    assert build is not None and build.language == "cuda" and build.toolchain.nvcc == "13.0"
    assert build.cuda_archs == ["8.0", "9.0+PTX"]
    assert loaded.toolchain_lock is not None
    nvcc = loaded.toolchain_lock.get("nvidia-cuda-nvcc")
    assert nvcc is not None and str(nvcc.version) == "13.0.88" and nvcc.hashes
    # the toolchain wheels are not in the runtime lock: they never reach the venv
    assert loaded.lock.get("nvidia-cuda-nvcc") is None and loaded.lock.get("nvidia-nvvm") is None
    assert "requirements-nvcc-cu130.lock" in loaded.files


def test_nvcc_wheel_names_follow_nvidias_pypi_split() -> None:
    assert nvcc_wheel_name(13) == "nvidia-cuda-nvcc"
    assert nvcc_wheel_name(12) == "nvidia-cuda-nvcc-cu12"


def test_a_toolchain_lock_change_changes_the_identity(folder: Path) -> None:
    before = load_dossier(folder / "dossier-cuda.yaml").identity
    lock = folder / "requirements-nvcc-cu130.lock"
    lock.write_text(lock.read_text() + "# edited\n")
    assert load_dossier(folder / "dossier-cuda.yaml").identity != before


@pytest.mark.parametrize(
    ("change", "system", "field", "words"),  # (the CPU platform's refusal: test_extensions_dossier)
    [
        ({"toolchain": {"gcc": "12", "nvcc": "12.4", "requirements": "requirements-nvcc-cu130.lock"}}, None,
         "build.toolchain.nvcc", "another major than torch's; choose nvcc 13.0"),
        ({"toolchain": {"gcc": "12", "nvcc": "13.0.99", "requirements": "requirements-nvcc-cu130.lock"}}, None,
         "build.toolchain.nvcc", "pins nvidia-cuda-nvcc==13.0.88"),
        ({"toolchain": {"gcc": "12", "nvcc": "13.0"}}, None,
         "build.toolchain.requirements", "has no nvcc: name a lock of NVIDIA's toolchain wheels (nvidia-cuda-nvcc"),
        ({"toolchain": {"gcc": "12", "nvcc": "13.0", "requirements": "requirements-cu130.lock"}}, None,
         "build.toolchain.requirements", "pins no nvidia-cuda-nvcc"),
        ({"cuda_archs": []}, None, "build", "CUDA sources need cuda_archs"),
    ],
)  # fmt: skip
def test_incoherent_cuda_builds_are_refused_naming_the_field(
    folder: Path, change: dict[str, Any], system: dict[str, Any] | None, field: str, words: str
) -> None:
    with pytest.raises(DossierError) as caught:
        load_dossier(_edit(folder, change, system))
    assert caught.value.field is not None and caught.value.field.startswith(field), caught.value
    assert words in str(caught.value)


def test_an_unhashed_toolchain_lock_is_refused_at_its_line(folder: Path) -> None:
    lock = folder / "requirements-nvcc-cu130.lock"
    lock.write_text(lock.read_text() + "ninja==1.13.0\n")
    with pytest.raises(DossierError) as caught:
        load_dossier(folder / "dossier-cuda.yaml")
    assert caught.value.field == "build.toolchain.requirements" and "ninja has no --hash" in str(caught.value)


def test_toolchain_requirements_without_cuda_sources_are_refused(folder: Path) -> None:
    path = folder / "dossier.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["build"]["toolchain"]["requirements"] = "requirements-nvcc-cu130.lock"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(DossierError, match=r"toolchain.requirements \(CUDA toolchain wheels\) is set but no"):
        load_dossier(path)


def test_hip_sources_stay_refused_naming_the_design(folder: Path) -> None:
    (folder / "app" / "csrc" / "gate.hip").write_text("// kernel\n")
    path = folder / "dossier.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["build"]["extensions"][0]["sources"] = ["csrc/gate.hip"]
    doc["build"]["toolchain"]["hipcc"] = "6.2"
    doc["build"]["rocm_archs"] = ["gfx90a"]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(DossierError) as caught:
        load_dossier(path)
    assert caught.value.field == "build.extensions"
    assert "HIP extensions are not built by this orch yet (the design is hipcc from a ROCm devel" in str(caught.value)


# -- the rendered builder ------------------------------------------------------------------------------


def test_nvcc_from_wheels_is_installed_in_the_builder_only(folder: Path) -> None:
    plan = make_plan(load_dossier(folder / "dossier-cuda.yaml"))
    text = render_dockerfile(plan)
    builder, final = text.split("# ---- final image", 1)
    # order: the venv, the compilers (the host's collected .deb files), the toolchain wheels (hashes, no
    # index), the build; with nothing fetched in the build, it runs with no network
    venv = builder.index("-r /tmp/orch/requirements.lock")
    apt = builder.index("RUN dpkg -i /tmp/orch/toolchain-debs/*.deb")
    assert default_build_network(plan) == "none"
    wheels = builder.index(
        "--no-index --find-links /tmp/orch/toolchain-wheels --require-hashes \\\n"
        "      --target /opt/orch/cuda-wheels -r /tmp/orch/toolchain.lock"
    )
    build = builder.index("build_extensions.py /tmp/orch/extensions.json")
    assert venv < apt < wheels < build
    assert 'CUDA_HOME="/opt/orch/cuda"' in builder and 'TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"' in builder
    runtime = final.split("LABEL io.orch.backend", 1)[0]
    assert "cuda-wheels" not in runtime and "toolchain" not in runtime and "/opt/orch/cuda " not in runtime
    assert "COPY --from=builder /opt/venv /opt/venv" in runtime
    assert "COPY --from=builder /opt/orch/ext /opt/orch/ext" in runtime
    assert plan.extensions is not None and plan.extensions.cuda_toolchain_wheels
    assert '"home": "/opt/orch/cuda"' in plan.extensions.spec_json
    assert '"wheels": "/opt/orch/cuda-wheels"' in plan.extensions.spec_json


def test_a_toolchain_lock_change_rebuilds_from_the_toolchain_step_only(folder: Path) -> None:
    """The lock's bytes enter the build at `COPY toolchain.lock`: every instruction above it is unchanged, so
    the engine's cache keeps the venv's layers (the identity in the header comment is not an instruction)."""
    before = render_dockerfile(make_plan(load_dossier(folder / "dossier-cuda.yaml"))).splitlines()
    lock = folder / "requirements-nvcc-cu130.lock"
    lock.write_text(lock.read_text().replace("# Build-only", "# A build-only"))
    after = render_dockerfile(make_plan(load_dossier(folder / "dossier-cuda.yaml"))).splitlines()
    instructions = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b and not a.startswith("#")]
    assert all("identity" in before[i] for i in instructions)  # only the LABEL's identity differs
    # The venv's install (pip's `-r` or uv's `--require-hashes … requirements.lock`) comes first.
    venv_install = next(
        i for i, line in enumerate(before) if "/tmp/orch/requirements.lock" in line and not line.startswith("COPY")
    )
    assert before.index("COPY toolchain.lock /tmp/orch/toolchain.lock") > venv_install


def test_a_devel_base_uses_its_own_nvcc(folder: Path) -> None:
    loaded = load_dossier(folder / "dossier-cuda.yaml")
    devel = replace(loaded.base_image, ref="nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04")
    assert devel.has_nvcc and not loaded.base_image.has_nvcc
    assert not replace(loaded.base_image, ref="nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04").has_nvcc
    assert replace(loaded.base_image, ref="nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04@sha256:" + "a" * 64).has_nvcc
    model = loaded.model.model_copy(
        update={"build": loaded.model.build.model_copy(update={"toolchain": loaded.model.build.toolchain.model_copy(
            update={"requirements": None})})}  # type: ignore[union-attr]
    )  # fmt: skip
    plan = make_plan(replace(loaded, model=model, base_image=devel, toolchain_lock=None))
    text = render_dockerfile(plan)
    assert 'CUDA_HOME="/usr/local/cuda"' in text and "toolchain-wheels" not in text and "cuda-wheels" not in text


# -- the fatbin, read back from the object --------------------------------------------------------------


def _entry(kind: int, arch: int, payload: bytes, header: int = 64) -> bytes:
    padded = payload.ljust((len(payload) + 7) & ~7, b"\0")
    head = bytearray(header)
    struct.pack_into("<HHIQ", head, 0, kind, 0x0101, header, len(padded))
    struct.pack_into("<I", head, 16, len(payload))
    struct.pack_into("<I", head, 28, arch)
    return bytes(head) + padded


def _container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_the_fatbin_parser_lists_machine_code_and_ptx_from_crafted_containers() -> None:
    probe = _probe("inventory")
    # two translation units, as nvcc writes them: one with sm_80 and sm_90 cubins and compute_90 PTX,
    # one with an sm_100 cubin behind a 112-byte entry header; payloads of odd lengths (padding)
    first = _container(_entry(2, 80, b"\x7fELF" + b"x" * 13), _entry(2, 90, b"y" * 5), _entry(1, 90, b"ptx"))
    second = _container(_entry(2, 100, b"z" * 9, header=112))
    section = first + b"\0" * ((-len(first)) % 8) + second
    assert probe.fatbin_archs(section) == ["sm_80", "compute_90", "sm_90", "sm_100"]
    assert probe.fatbin_archs(b"") == []
    with pytest.raises(ValueError, match="not a fatbin container"):
        probe.fatbin_archs(b"\x01" * 16)
    with pytest.raises(ValueError, match="runs past the section's end"):
        probe.fatbin_archs(first[:-8])


def _elf_with(sections: dict[str, bytes]) -> bytes:
    """A little-endian ELF64 with the given sections after a null one and .shstrtab."""
    names = b"\0.shstrtab\0" + b"".join(name.encode() + b"\0" for name in sections)
    body = names + b"".join(sections.values())
    shoff = 64 + len(body)
    header = bytearray(64)
    header[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 2 + len(sections), 1)
    table = bytes(64) + struct.pack("<IIQQQQ", 1, 3, 0, 0, 64, len(names)).ljust(64, b"\0")
    name_at, data_at = len(b"\0.shstrtab\0"), 64 + len(names)
    for name, data in sections.items():
        table += struct.pack("<IIQQQQ", name_at, 1, 0, 0, data_at, len(data)).ljust(64, b"\0")
        name_at, data_at = name_at + len(name) + 1, data_at + len(data)
    return bytes(header) + body + table


def test_the_probe_reads_the_archs_from_the_objects_nv_fatbin_section(tmp_path: Path) -> None:
    probe = _probe("inventory")
    fatbin = _container(_entry(2, 80, b"a" * 8), _entry(1, 90, b"b" * 8))
    built = tmp_path / "gate_ext.so"
    built.write_bytes(_elf_with({".comment": b"GCC: (Debian 12.2.0-14) 12.2.0\0", ".nv_fatbin": fatbin}))
    assert probe.compiled_archs(str(built)) == ["sm_80", "compute_90"]
    assert probe.elf_comment(str(built)) == ["GCC: (Debian 12.2.0-14) 12.2.0"]
    cpu_only = tmp_path / "cpu.so"
    cpu_only.write_bytes(_elf_with({".comment": b"GCC: 12\0"}))
    assert probe.compiled_archs(str(cpu_only)) == []


def test_the_fatbin_parser_reads_the_real_section_nvcc_wrote() -> None:
    """tests/fixtures/gate_ext.nv_fatbin (14,680 bytes): the .nv_fatbin section of examples/cpp-extension's
    CUDA build (nvcc 13.0.88, TORCH_CUDA_ARCH_LIST 8.0;9.0+PTX), extracted with `objcopy -O binary
    --only-section=.nv_fatbin`. NVIDIA's cuobjdump --list-elf --list-ptx on that object listed sm_80 and
    sm_90 cubins and sm_90 PTX: one container, two ELF entries with 64-byte headers, a PTX entry with an
    80-byte one."""
    assert _probe("inventory").fatbin_archs(FIXTURE.read_bytes()) == ["sm_80", "compute_90", "sm_90"]


# -- the archs: asked, found, and a GPU outside them -----------------------------------------------------


def test_the_expected_archs_follow_torch_arch_list_rules() -> None:
    assert expected_archs(["8.0", "9.0+PTX"]) == ["sm_80", "compute_90", "sm_90"]
    assert expected_archs(["8.6", "12.0"]) == ["sm_86", "sm_120"]


@pytest.mark.parametrize(
    ("device", "compiled", "gap"),
    [
        ("sm_90", ["sm_80"], "built for sm_80, this GPU is sm_90, no PTX"),
        ("sm_90", ["sm_80", "compute_80"], None),  # the driver JIT-compiles older PTX
        (
            "sm_90",
            ["sm_80", "compute_100"],
            "built for sm_80, this GPU is sm_90, its PTX (compute_100) is for newer GPUs",
        ),
        ("sm_86", ["sm_80"], None),  # machine code runs within its major, on a minor at or above
        ("sm_80", ["sm_86"], "built for sm_86, this GPU is sm_80, no PTX"),
        ("sm_100", ["sm_90a"], "built for sm_90a, this GPU is sm_100, no PTX"),
        ("sm_90", ["sm_80", "sm_90"], None),
        ("sm_90", [], None),  # a CPU-only object says nothing about archs
    ],
)
def test_arch_gap_follows_cudas_compatibility_rules(device: str, compiled: list[str], gap: str | None) -> None:
    assert arch_gap(device, compiled) == gap


def _cuda_inventory(archs: list[str], sha256: str | None = "a" * 64, error: str | None = None) -> Any:
    artefact: dict[str, Any] = {
        "name": "gate_ext",
        "file": "gate_ext.so",
        "recorded_sha256": "a" * 64,
        "sha256": sha256,
        "compilers": ["GCC: 12.2.0"],
        "compiled_archs": archs,
    }
    if error:
        artefact["fatbin_error"] = error
    toolchain = {"nvcc": "Cuda compilation tools, release 13.0, V13.0.88"}
    return parse_inventory(
        {
            "python": {"version": "3.11.2"},
            "pip": {},
            "os": {},
            "backend": {},
            "extensions": {
                "artefacts": [artefact],
                "toolchain": toolchain,
                "toolchain_wheels": ["nvidia_cuda_nvcc==13.0.88"],
            },
        }
    )


def test_the_image_stage_checks_the_archs_read_from_the_object(folder: Path) -> None:
    loaded = load_dossier(folder / "dossier-cuda.yaml")
    inventory = _cuda_inventory(["sm_80", "compute_90", "sm_90"])
    assert inventory.extensions is not None and inventory.extensions.toolchain_wheels == ["nvidia_cuda_nvcc==13.0.88"]
    bytes_line, archs = extension_checks(loaded, inventory)
    assert bytes_line.passed and archs.passed
    assert archs.name == "extension gate_ext compiled for the dossier's GPU archs"
    assert archs.expected == "sm_80, compute_90, sm_90 (build.cuda_archs 8.0;9.0+PTX)"
    assert archs.observed == "sm_80, compute_90, sm_90"
    (_, short) = extension_checks(loaded, _cuda_inventory(["sm_80"]))
    assert not short.passed and short.observed == "sm_80"
    (_, unreadable) = extension_checks(loaded, _cuda_inventory([], error="not a fatbin container at offset 0"))
    assert not unreadable.passed and unreadable.observed == "not a fatbin container at offset 0"
    (missing,) = extension_checks(loaded, _cuda_inventory([], sha256=None))  # one failure, not two
    assert not missing.passed and missing.observed == "missing"


def test_the_device_line_says_the_gpu_is_outside_the_compiled_archs(folder: Path) -> None:
    build = load_dossier(folder / "dossier-cuda.yaml").model.build
    assert build is not None
    found = {
        "device_arch": "sm_90",
        "results": [{"name": "gate_ext", "error": "run: torch.AcceleratorError: CUDA error: no kernel image"}],
    }
    (line,) = extension_check_lines(build, found, None, {"gate_ext": ["sm_80"]})
    assert not line.passed and line.detail == "built for sm_80, this GPU is sm_90, no PTX"
    assert line.observed.startswith("gate_ext: run: ")
    (line,) = extension_check_lines(build, {"results": [], "error": "no GPU visible to torch"}, None, {})
    assert not line.passed and line.observed == "no GPU visible to torch"


# -- the builder's CUDA_HOME from wheels ----------------------------------------------------------------


def test_a_cuda_home_is_laid_out_from_the_wheels_files(tmp_path: Path) -> None:
    build = _probe("build_extensions")
    wheels = tmp_path / "wheels"
    for relative in ("bin/nvcc", "bin/ptxas", "include/cuda_runtime.h", "lib/libcudart.so.13", "nvvm/bin/cicc"):
        (wheels / "nvidia" / "cu13" / relative).parent.mkdir(parents=True, exist_ok=True)
        (wheels / "nvidia" / "cu13" / relative).write_text(relative)
    (wheels / "nvidia_cuda_nvcc-13.0.88.dist-info").mkdir()
    (wheels / "nvidia_nvvm-13.0.88.dist-info").mkdir()
    home = tmp_path / "cuda"
    build.lay_out_cuda_home(wheels, home)
    assert (home / "bin" / "nvcc").is_symlink() and (home / "bin" / "nvcc").read_text() == "bin/nvcc"
    assert (home / "lib64" / "libcudart.so").read_text() == "lib/libcudart.so.13"  # lib64 and the -l name
    assert (home / "targets" / "x86_64-linux" / "include" / "cuda_runtime.h").exists() or (
        build.platform.machine() != "x86_64"
    )
    assert build.toolchain_wheels(wheels) == ["nvidia_cuda_nvcc==13.0.88", "nvidia_nvvm==13.0.88"]
    assert build.nvcc_release("Cuda compilation tools, release 13.0, V13.0.88") == "13.0.88"
    assert build.nvcc_release(None) is None


def test_an_extension_kernel_failing_for_a_gpu_stack_reason_is_explained_by_the_catalogue(folder: Path) -> None:
    build = load_dossier(folder / "dossier-cuda.yaml").model.build
    assert build is not None
    error = "run: torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device"
    found = {"device_arch": "sm_90", "results": [{"name": "gate_ext", "error": error}]}
    (line,) = extension_check_lines(build, found, None, {"gate_ext": ["sm_80"]})
    assert line.detail is not None and line.detail.startswith("built for sm_80, this GPU is sm_90, no PTX; ")
    assert (
        "[image] The framework build (torch, OpenCV, ggml, …) has no kernels (SASS) for this GPU's compute capability"
        in line.detail
    )
