"""AMD GPU and ROCm facts: the KFD topology in sysfs first, then `amd-smi` / `rocm-smi` for what it lacks.

The KFD topology is the kernel's own list of compute agents: it exists whenever ROCm could run, needs no
ROCm user space on the host, and names each GPU's ISA (`gfx_target_version`). The DKMS amdgpu driver
adds `/sys/module/amdgpu/version`; the in-tree driver has none, and that is not an error (gpu-domain §9).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from orchestrator.host.tools import Runner, run_tool, subprocess_runner
from orchestrator.model.host import AmdDriverFacts, AmdGpu
from orchestrator.vendor import amd_gpu_ids
from orchestrator.versions import parse_version

KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
AMDGPU_MODULE_VERSION = "sys/module/amdgpu/version"
ROCM_INFO_VERSION = "opt/rocm/.info/version"
KERNEL_RELEASE = "proc/sys/kernel/osrelease"

#: Where the driver facts came from (AmdDriverFacts.source).
AmdSource = Literal["amd-smi", "rocm-smi", "sysfs", "kfd", "rocminfo"]

#: PCI vendor id of AMD/ATI (0x1002), as KFD's `vendor_id` prints it.
AMD_VENDOR_ID = 0x1002

_ROCM_SMI_DRIVER = re.compile(r"Driver version:\s*(\S+)")
_ROCM_INFO = re.compile(r"^(\d+\.\d+(?:\.\d+)?)(?:-\S+)?$")
_DKMS_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)*$")


# ---------------------------------------------------------------------------------------------- parsers


def gfx_name(gfx_target_version: int) -> str:
    """KFD's `gfx_target_version` (MMmmss) as the ISA name: 90402 → gfx942, 90010 → gfx90a, 110000 → gfx1100.

    Minor and stepping print as hex digits, as the target names do (ollama's amd_linux.go formats
    `gfx%d%x%x`). 0 is a CPU node, which has no gfx target: ValueError.
    """
    if gfx_target_version <= 0:
        raise ValueError(f"gfx_target_version {gfx_target_version} is a CPU node, not a GPU")
    major, minor, stepping = gfx_target_version // 10000, (gfx_target_version // 100) % 100, gfx_target_version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def parse_kfd_properties(text: str) -> dict[str, int | str]:
    """A KFD `properties` file: one `key value` pair a line; integer values as int."""
    properties: dict[str, int | str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if not key:
            continue
        value = value.strip()
        try:
            properties[key] = int(value)
        except ValueError:
            properties[key] = value
    return properties


def parse_rocm_smi_driver(text: str) -> str | None:
    """`rocm-smi --showdriverversion`: "Driver version: 6.8.5" (DKMS amdgpu), or the kernel release with the
    in-tree driver ("6.15.2-arch1-1"); `is_kernel_release` tells the two apart."""
    match = _ROCM_SMI_DRIVER.search(text)
    return match.group(1) if match else None


@dataclass(frozen=True)
class AmdSmiVersion:
    tool: str | None
    library: str | None
    rocm: str | None
    amdgpu: str | None  # only in newer builds ("amdgpu version: 6.16.6")


def parse_amd_smi_version(text: str) -> AmdSmiVersion:
    """`amd-smi version`: `AMDSMI Tool: 24.5.1+c5106a9 | AMDSMI Library version: 24.5.2.0 | ROCm version: 6.1.2`,
    newer builds append `| amdgpu version: 6.16.6 | amd_hsmp version: N/A`. "N/A" reads as None."""
    fields: dict[str, str] = {}
    for part in text.replace("\n", "|").split("|"):
        key, sep, value = part.partition(":")
        value = value.strip()
        if sep and value and value.upper() != "N/A":
            fields[key.strip().lower()] = value
    return AmdSmiVersion(
        tool=fields.get("amdsmi tool"),
        library=fields.get("amdsmi library version"),
        rocm=fields.get("rocm version"),
        amdgpu=fields.get("amdgpu version"),
    )


def parse_rocm_info_version(text: str) -> str | None:
    """`/opt/rocm/.info/version` ("6.4.0-47": release and build number) as the release, "6.4.0"."""
    match = _ROCM_INFO.match(text.strip())
    if not match:
        return None
    version = parse_version(match.group(1))
    return str(version) if version is not None else None


def is_kernel_release(version: str, kernel: str | None = None) -> bool:
    """Whether a "driver version" is really the kernel's release, as tools print it for the in-tree driver."""
    return version == kernel or not _DKMS_VERSION.match(version)


@dataclass(frozen=True)
class RocminfoAgent:
    name: str
    device_type: str | None
    node: int | None
    chip_id: int | None


_ROCMINFO_FIELD = re.compile(r"^\s*([A-Za-z][A-Za-z .]*?):\s*(.*?)\s*$")
_CHIP_ID = re.compile(r"^(\d+)")


def parse_rocminfo_agents(text: str) -> list[RocminfoAgent]:
    """The HSA agents `rocminfo` lists ("Agent N" blocks: Name, Device Type, Node, Chip ID). Markdown-escaped
    copies (`\\*\\*\\*`) read the same. Only the agent's own top-level fields are read, not its ISA/pool sections."""
    agents: list[RocminfoAgent] = []
    # A paste may start inside an agent block (no "Agent N" line above it): its fields still form an agent.
    current: dict[str, str] = {}
    for raw in text.replace("\\*", "*").replace("\\=", "=").splitlines():
        line = raw.rstrip()
        if re.match(r"^\s*Agent \d+\s*$", line):
            if current:
                agents.append(_agent(current))
            current = {}
            continue
        match = _ROCMINFO_FIELD.match(line)
        if match and match.group(1) in ("Name", "Device Type", "Node", "Chip ID") and match.group(1) not in current:
            current[match.group(1)] = match.group(2)
    if current:
        agents.append(_agent(current))
    return agents


def _agent(fields: dict[str, str]) -> RocminfoAgent:
    node = fields.get("Node", "")
    chip = _CHIP_ID.match(fields.get("Chip ID", ""))
    return RocminfoAgent(
        name=fields.get("Name", ""),
        device_type=fields.get("Device Type"),
        node=int(node) if node.isdigit() else None,
        chip_id=int(chip.group(1)) if chip else None,
    )


#: rocminfo's device types of a GPU agent: "GPU", and "HCU" for Hygon's DCU accelerators (gfx9xx targets), whose
#: ROCm-derived stack (DTK) prints its own word (a real capture: tests/corpus/rocminfo-rocfftdcutuning).
GPU_DEVICE_TYPES: frozenset[str] = frozenset({"GPU", "HCU"})


def rocminfo_gpus(agents: list[RocminfoAgent]) -> list[RocminfoAgent]:
    """GPU agents: a GPU device type (GPU_DEVICE_TYPES), or (in copies that lost that line) a gfx ISA name."""
    return [
        a for a in agents if a.device_type in GPU_DEVICE_TYPES or (a.device_type is None and a.name.startswith("gfx"))
    ]


# -------------------------------------------------------------------------------------------- collector


def collect_amd(
    root: Path = Path("/"), run: Runner = subprocess_runner, rocminfo_fallback: bool = False
) -> tuple[AmdDriverFacts | None, list[str]]:
    """The host's AMD GPUs and ROCm stack; (None, notes) when KFD lists no AMD GPU.

    `rocminfo_fallback`: read the GPUs from `rocminfo` when KFD lists none (a capture that holds only the
    tool's output); off on a live host, where no KFD means no GPU a container could reach."""
    notes: list[str] = []
    gpus = kfd_gpus(root)
    from_rocminfo = False
    if not gpus:
        notes.append(f"AMD: no GPU node in the KFD topology (/{KFD_NODES})")
        gpus = _gpus_from_rocminfo(run, notes) if rocminfo_fallback else []
        if not gpus:
            return None, notes
        from_rocminfo = True
    kernel = _read_line(root / KERNEL_RELEASE)
    driver = _read_line(root / AMDGPU_MODULE_VERSION)
    source: AmdSource = "sysfs" if driver else "rocminfo" if from_rocminfo else "kfd"
    if driver is None and from_rocminfo:
        # No KFD topology was read, so nothing says which amdgpu module is loaded: unknown, not "in-tree".
        notes.append(f"/{AMDGPU_MODULE_VERSION}: not available with the GPUs known from rocminfo; driver unknown")
    elif driver is None:
        notes.append(f"/{AMDGPU_MODULE_VERSION}: absent (the kernel's in-tree amdgpu driver, not an error)")
    info = _read_line(root / ROCM_INFO_VERSION)
    rocm = parse_rocm_info_version(info) if info is not None else None
    if rocm is None:
        notes.append(f"/{ROCM_INFO_VERSION}: absent or unreadable (no ROCm user space on the host)")
    if driver is None or rocm is None:
        driver, rocm, source = _ask_smi_tools(run, kernel, driver, rocm, source, notes)
    return AmdDriverFacts(source=source, driver_version=driver, rocm_version=rocm, gpus=gpus), notes


def _ask_smi_tools(
    run: Runner, kernel: str | None, driver: str | None, rocm: str | None, source: AmdSource, notes: list[str]
) -> tuple[str | None, str | None, AmdSource]:
    """Fill what sysfs lacked from `amd-smi version`, else `rocm-smi --showdriverversion` (its predecessor)."""
    answer = run_tool(run, ["amd-smi", "version"])
    if answer.stdout is not None:
        version = parse_amd_smi_version(answer.stdout)
        rocm = rocm or version.rocm
        if driver is None and version.amdgpu and not is_kernel_release(version.amdgpu, kernel):
            driver, source = version.amdgpu, "amd-smi"
        return driver, rocm, source
    notes.append(answer.note or "amd-smi: no answer")
    if driver is not None:
        return driver, rocm, source
    answer = run_tool(run, ["rocm-smi", "--showdriverversion"])
    if answer.stdout is None:
        notes.append(answer.note or "rocm-smi: no answer")
        return driver, rocm, source
    reported = parse_rocm_smi_driver(answer.stdout)
    if reported is not None and is_kernel_release(reported, kernel):
        notes.append(f"rocm-smi reports the kernel release {reported}: the in-tree amdgpu driver")
    elif reported is not None:
        driver, source = reported, "rocm-smi"
    return driver, rocm, source


def _gpus_from_rocminfo(run: Runner, notes: list[str]) -> list[AmdGpu]:
    """GPUs from `rocminfo` when the KFD topology is not readable (a container without /sys/class/kfd, or a
    capture of the tool's output only). Asked only when rocminfo exists; its absence is not noted twice."""
    answer = run_tool(run, ["rocminfo"])
    if answer.stdout is None:
        return []
    found = [
        AmdGpu(node=agent.node if agent.node is not None else position, gfx_target=agent.name, device_id=agent.chip_id)
        for position, agent in enumerate(rocminfo_gpus(parse_rocminfo_agents(answer.stdout)))
        if agent.name.startswith("gfx")
    ]
    if found:
        notes.append(f"AMD: {len(found)} GPU(s) read from rocminfo instead")
    return found


def kfd_gpus(root: Path) -> list[AmdGpu]:
    """The AMD GPU nodes of the KFD topology, in node order; CPU nodes (gfx_target_version 0) left out."""
    nodes = root / KFD_NODES
    if not nodes.is_dir():
        return []
    gpus = []
    for node_dir in sorted((p for p in nodes.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        text = _read(node_dir / "properties")
        if text is None:
            continue
        properties = parse_kfd_properties(text)
        gpu = _kfd_gpu(int(node_dir.name), properties, node_dir)
        if gpu is not None:
            gpus.append(gpu)
    return gpus


@cache
def legacy_gfx_targets() -> dict[int, str]:
    """PCI device id → gfx target for KFD nodes without `gfx_target_version` (data/amd_gpu_ids.json, libhsakmt's
    gfxip_lookup_table)."""
    return {int(key, 16): entry.gfx_target for key, entry in amd_gpu_ids().items()}


def kfd_gfx_target(properties: dict[str, int | str]) -> str | None:
    """The node's gfx target: from `gfx_target_version` when KFD publishes it; on older kernels (no such
    property) from the device id, if the node is a GPU (simd_count > 0) of a known device. None for CPU nodes."""
    target = properties.get("gfx_target_version")
    if isinstance(target, int):
        return gfx_name(target) if target > 0 else None
    simds, device = properties.get("simd_count"), properties.get("device_id")
    if isinstance(simds, int) and simds > 0 and isinstance(device, int):
        return legacy_gfx_targets().get(device)
    return None


def _kfd_gpu(node: int, properties: dict[str, int | str], node_dir: Path) -> AmdGpu | None:
    target = kfd_gfx_target(properties)
    vendor = properties.get("vendor_id")
    if target is None:
        return None
    if isinstance(vendor, int) and vendor not in (0, AMD_VENDOR_ID):
        return None  # KFD only lists AMD agents today; a foreign vendor id is not ours to describe
    device = properties.get("device_id")
    unique = properties.get("unique_id")
    return AmdGpu(
        node=node,
        gfx_target=target,
        vendor_id=vendor if isinstance(vendor, int) else None,
        device_id=device if isinstance(device, int) else None,
        unique_id=str(unique) if unique not in (None, 0, "") else None,
        vram_bytes=_vram_bytes(node_dir),
    )


def _vram_bytes(node_dir: Path) -> int | None:
    """Sum of the node's memory banks (`mem_banks/*/properties` size_in_bytes); None when none says."""
    sizes = []
    for bank in sorted((node_dir / "mem_banks").glob("*/properties")):
        text = _read(bank)
        size = parse_kfd_properties(text).get("size_in_bytes") if text is not None else None
        if isinstance(size, int):
            sizes.append(size)
    return sum(sizes) if sizes else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _read_line(path: Path) -> str | None:
    text = _read(path)
    if text is None or not text.strip():
        return None
    return text.strip()
