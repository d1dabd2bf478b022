from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.host.amd import (
    AmdSmiVersion,
    collect_amd,
    gfx_name,
    is_kernel_release,
    parse_amd_smi_version,
    parse_kfd_properties,
    parse_rocm_info_version,
    parse_rocm_smi_driver,
)
from tests.unit.host_fakes import FakeRun, ok

# A KFD topology GPU node (an MI300X-class gfx942 agent); `gfx_target_version 90402` and `vendor_id 4098` are
# the lines gpu-domain.md §2.4 quotes, the rest is the file's usual key/value layout.
GPU_NODE = """\
cpu_cores_count 0
simd_count 1216
mem_banks_count 1
caches_count 0
io_links_count 1
p2p_links_count 7
cpu_core_id_base 0
simd_id_base 2147487744
max_waves_per_simd 8
lds_size_in_kb 64
wave_front_size 64
array_count 4
simd_per_cu 4
gfx_target_version 90402
vendor_id 4098
device_id 29857
location_id 256
domain 0
drm_render_minor 128
hive_id 0
num_sdma_engines 2
unique_id 9425893645413946713
num_xcc 8
"""
CPU_NODE = """\
cpu_cores_count 96
simd_count 0
mem_banks_count 1
gfx_target_version 0
vendor_id 0
device_id 0
drm_render_minor 0
unique_id 0
"""
MEM_BANK = "heap_type 1\nsize_in_bytes 206141652992\nflags 0\nwidth 8192\nmem_clk_max 1300\n"

# Tool output as gpu-domain.md §2.4 quotes it.
ROCM_SMI_DKMS = """\
============================ ROCm System Management Interface ============================
================================ Version of System Component =============================
Driver version: 6.8.5
==========================================================================================
================================== End of ROCm SMI Log ===================================
"""
ROCM_SMI_IN_TREE = ROCM_SMI_DKMS.replace("Driver version: 6.8.5", "Driver version: 6.15.2-arch1-1")
AMD_SMI = "AMDSMI Tool: 24.5.1+c5106a9 | AMDSMI Library version: 24.5.2.0 | ROCm version: 6.1.2\n"
AMD_SMI_NEWER = (
    "AMDSMI Tool: 24.5.1+c5106a9 | AMDSMI Library version: 24.5.2.0 | ROCm version: 6.1.2 | "
    "amdgpu version: 6.16.6 | amd_hsmp version: N/A\n"
)
AMD_SMI_MONITOR_BANNER = "AMD System Management Interface | Version: 25.5.1 | ROCm version: 6.4.2\n"

KFD = "sys/class/kfd/kfd/topology/nodes"


# ---------------------------------------------------------------------------------------------- parsers


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (90402, "gfx942"),
        (90010, "gfx90a"),
        (110000, "gfx1100"),
        (100300, "gfx1030"),
        (120001, "gfx1201"),
        (90008, "gfx908"),
    ],
)
def test_gfx_name(value: int, name: str) -> None:
    assert gfx_name(value) == name


def test_gfx_name_refuses_a_cpu_node() -> None:
    with pytest.raises(ValueError, match="CPU node"):
        gfx_name(0)


def test_kfd_properties() -> None:
    properties = parse_kfd_properties(GPU_NODE)
    assert properties["gfx_target_version"] == 90402
    assert properties["vendor_id"] == 0x1002
    assert properties["unique_id"] == 9425893645413946713
    assert properties["drm_render_minor"] == 128
    assert parse_kfd_properties("name gfx942 rev\n\n") == {"name": "gfx942 rev"}


@pytest.mark.parametrize(
    ("text", "version"), [(ROCM_SMI_DKMS, "6.8.5"), (ROCM_SMI_IN_TREE, "6.15.2-arch1-1"), ("", None)]
)
def test_rocm_smi_driver(text: str, version: str | None) -> None:
    assert parse_rocm_smi_driver(text) == version


def test_kernel_release_is_told_from_a_dkms_version() -> None:
    assert is_kernel_release("6.15.2-arch1-1")
    assert not is_kernel_release("6.8.5")
    assert is_kernel_release("6.8.0", kernel="6.8.0")  # a plain kernel release equal to the running kernel's


def test_amd_smi_version() -> None:
    assert parse_amd_smi_version(AMD_SMI) == AmdSmiVersion(
        tool="24.5.1+c5106a9", library="24.5.2.0", rocm="6.1.2", amdgpu=None
    )
    newer = parse_amd_smi_version(AMD_SMI_NEWER)
    assert (newer.rocm, newer.amdgpu) == ("6.1.2", "6.16.6")
    assert parse_amd_smi_version(AMD_SMI_MONITOR_BANNER).rocm == "6.4.2"


@pytest.mark.parametrize(
    ("text", "release"), [("6.4.0-47\n", "6.4.0"), ("7.2.4", "7.2.4"), ("6.2\n", "6.2"), ("junk", None), ("", None)]
)
def test_rocm_info_version(text: str, release: str | None) -> None:
    assert parse_rocm_info_version(text) == release


# -------------------------------------------------------------------------------------------- collector


def kfd_tree(root: Path, nodes: dict[int, str], banks: dict[int, list[str]] | None = None) -> None:
    for node, properties in nodes.items():
        write(root / KFD / str(node) / "properties", properties)
        for number, bank in enumerate((banks or {}).get(node, [])):
            write(root / KFD / str(node) / "mem_banks" / str(number) / "properties", bank)


def test_dkms_host_needs_no_tool(tmp_path: Path) -> None:
    kfd_tree(tmp_path, {0: CPU_NODE, 1: GPU_NODE, 2: GPU_NODE.replace("128", "136")}, {0: [MEM_BANK], 1: [MEM_BANK]})
    write(tmp_path / "sys/module/amdgpu/version", "6.8.5\n")
    write(tmp_path / "opt/rocm/.info/version", "6.2.0-66\n")
    run = FakeRun()
    facts, notes = collect_amd(tmp_path, run)
    assert facts is not None
    assert (facts.source, facts.driver_version, facts.rocm_version) == ("sysfs", "6.8.5", "6.2.0")
    assert [(g.node, g.gfx_target, g.vendor_id, g.device_id) for g in facts.gpus] == [
        (1, "gfx942", 4098, 29857),
        (2, "gfx942", 4098, 29857),
    ]
    assert facts.gpus[0].vram_bytes == 206141652992
    assert facts.gpus[1].vram_bytes is None  # no mem_banks folder
    assert facts.gpus[0].unique_id == "9425893645413946713"
    assert run.calls == [] and notes == []


def test_nodes_sort_numerically(tmp_path: Path) -> None:
    gpu_b = GPU_NODE.replace("90402", "110000")
    kfd_tree(tmp_path, {10: gpu_b, 2: GPU_NODE, 0: CPU_NODE})
    facts, _ = collect_amd(tmp_path, FakeRun())
    assert facts is not None and [(g.node, g.gfx_target) for g in facts.gpus] == [(2, "gfx942"), (10, "gfx1100")]


def test_in_tree_driver_is_not_an_error(tmp_path: Path) -> None:
    kfd_tree(tmp_path, {0: CPU_NODE, 1: GPU_NODE.replace("90402", "110000")})
    write(tmp_path / "proc/sys/kernel/osrelease", "6.15.2-arch1-1\n")
    run = FakeRun({("rocm-smi", "--showdriverversion"): ok(ROCM_SMI_IN_TREE)})
    facts, notes = collect_amd(tmp_path, run)
    assert facts is not None
    assert (facts.source, facts.driver_version, facts.rocm_version) == ("kfd", None, None)
    assert facts.gpus[0].gfx_target == "gfx1100"
    assert "/sys/module/amdgpu/version: absent (the kernel's in-tree amdgpu driver, not an error)" in notes
    assert "amd-smi: not found" in notes
    assert "rocm-smi reports the kernel release 6.15.2-arch1-1: the in-tree amdgpu driver" in notes
    assert run.calls == [("amd-smi", "version"), ("rocm-smi", "--showdriverversion")]


def test_amd_smi_fills_what_sysfs_lacks(tmp_path: Path) -> None:
    kfd_tree(tmp_path, {0: CPU_NODE, 1: GPU_NODE})
    run = FakeRun({("amd-smi", "version"): ok(AMD_SMI_NEWER)})
    facts, _ = collect_amd(tmp_path, run)
    assert facts is not None
    assert (facts.source, facts.driver_version, facts.rocm_version) == ("amd-smi", "6.16.6", "6.1.2")
    assert not run.ran("rocm-smi")


def test_rocm_smi_dkms_version(tmp_path: Path) -> None:
    kfd_tree(tmp_path, {0: CPU_NODE, 1: GPU_NODE})
    write(tmp_path / "opt/rocm/.info/version", "6.2.0-66\n")
    facts, _ = collect_amd(tmp_path, FakeRun({("rocm-smi", "--showdriverversion"): ok(ROCM_SMI_DKMS)}))
    assert facts is not None
    assert (facts.source, facts.driver_version, facts.rocm_version) == ("rocm-smi", "6.8.5", "6.2.0")


def test_no_kfd_means_no_amd(tmp_path: Path) -> None:
    run = FakeRun()
    assert collect_amd(tmp_path, run) == (
        None,
        ["AMD: no GPU node in the KFD topology (/sys/class/kfd/kfd/topology/nodes)"],
    )
    assert run.calls == []


def test_cpu_nodes_only_means_no_amd(tmp_path: Path) -> None:
    kfd_tree(tmp_path, {0: CPU_NODE, 1: CPU_NODE})
    facts, notes = collect_amd(tmp_path, FakeRun())
    assert facts is None and "no GPU node" in notes[0]


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
