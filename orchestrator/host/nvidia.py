"""NVIDIA driver facts: NVML first, then `nvidia-smi`, then the kernel module's own files.

NVML is the stable interface (the `nvidia-smi` man page says its output format may change); `nvidia-smi`
covers hosts without the Python bindings; `/sys/module/nvidia/version` and `/proc/driver/nvidia/version`
cover hosts with a driver but neither (minimal images, broken user space). Parsers are pure and tested
on real output (those of nvidia-smi's outputs live in `host/nvidia_smi.py`); the collector reads the machine
only through `root` and the injected `run`.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from orchestrator.host.nvidia_smi import (
    QUERY_FIELDS,
    parse_nvidia_smi_banner_cuda,
    parse_nvidia_smi_banner_driver,
    parse_nvidia_smi_compute_caps,
    parse_nvidia_smi_csv,
    parse_nvidia_smi_q,
    parse_nvidia_smi_table,
)
from orchestrator.host.tools import Runner, run_tool, subprocess_runner
from orchestrator.model.host import NvidiaDriverFacts, NvidiaGpu

KernelModule = Literal["open", "proprietary"]

SYS_MODULE_VERSION = "sys/module/nvidia/version"
PROC_DRIVER_VERSION = "proc/driver/nvidia/version"

# The version is the first dotted number after the word "Module": the proprietary line reads
# "Kernel Module  550.54.14  <date>", the open one "Open Kernel Module for x86_64  580.95.05  Release Build".
# A pattern anchored on "Kernel Module\s+" would miss the open module (gpu-domain §9, gotcha 1).
_PROC_VERSION = re.compile(r"Module\b.*?\s(\d+\.\d+(?:\.\d+)*)(?:\s|$)")
_DRIVER_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)*$")
# Jetson: /etc/nv_tegra_release reads "# R35 (release), REVISION: 3.1, GCID: …, BOARD: t186ref, EABI: aarch64 …"
# and its kernel module reports the L4T release (35.3.1) where a desktop driver reports 550.54.15.
_TEGRA_RELEASE = re.compile(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*(\d+(?:\.\d+)*)")
TEGRA_RELEASE_FILE = "etc/nv_tegra_release"


# ---------------------------------------------------------------------------------------------- parsers


def parse_proc_version(text: str) -> tuple[str | None, KernelModule | None]:
    """Driver version and module flavour from `/proc/driver/nvidia/version` (its `NVRM version:` line)."""
    # Stripped: a pasted or quoted copy of the file ("  NVRM version: …") reads the same as the file.
    for line in (raw.strip() for raw in text.splitlines()):
        if not line.startswith("NVRM version:"):
            continue
        match = _PROC_VERSION.search(line)
        version = match.group(1) if match else None
        # The open module's ID string is built as "NVIDIA UNIX Open Kernel Module for $(arch)"
        # (open-gpu-kernel-modules: src/nvidia/Makefile); the proprietary one has no "Open".
        flavour: KernelModule = "open" if "Open Kernel Module" in line else "proprietary"
        return version, flavour
    return None, None


def parse_sys_module_version(text: str) -> str | None:
    """`/sys/module/nvidia/version`: the bare version (`MODULE_VERSION(NV_VERSION_STRING)`), e.g. 550.54.14."""
    version = text.strip()
    return version if _DRIVER_VERSION.match(version) else None


def parse_tegra_release(text: str) -> str | None:
    """/etc/nv_tegra_release's first line as the L4T release: "# R35 (release), REVISION: 3.1" → "R35.3.1"."""
    match = _TEGRA_RELEASE.search(text)
    return f"R{match.group(1)}.{match.group(2)}" if match else None


def is_tegra_proc_version(text: str) -> bool:
    """Whether /proc/driver/nvidia/version is a Jetson's: its module is built "for aarch64" and reports an L4T
    release (35.3.1), a number below any driver branch; an Arm server's driver (aarch64, 550.54.15) is not."""
    for line in text.splitlines():
        if line.strip().startswith("NVRM version:"):
            version, _ = parse_proc_version(line)
            major = int(version.split(".")[0]) if version else 0
            return "aarch64" in line and 0 < major < 100
    return False


def cuda_from_nvml_int(value: int) -> str | None:
    """NVML's CUDA driver version integer (12040) as "12.4" (NVML_CUDA_DRIVER_VERSION_MAJOR/MINOR)."""
    if value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


# -------------------------------------------------------------------------------------------- collector


def collect_nvidia(
    root: Path = Path("/"), run: Runner = subprocess_runner, use_nvml: bool = True
) -> tuple[NvidiaDriverFacts | None, list[str]]:
    """The host's NVIDIA driver, from the best source that answers; notes say what each other source said.

    `use_nvml=False` when reading a captured host (`host.capture`): NVML would describe this machine, not it."""
    notes: list[str] = []
    facts = _from_nvml(notes) if use_nvml else None
    if facts is None:
        facts = _from_nvidia_smi(run, notes)
    proc_version, flavour = _read_proc_version(root)
    l4t = read_l4t_release(root)
    if l4t is not None:
        notes.append(f"Jetson: L4T {l4t}; the kernel module's version is the L4T release, not a driver version")
        proc_text = _read(root / PROC_DRIVER_VERSION) or ""
        if is_tegra_proc_version(proc_text) or facts is None:
            proc_version = None
    if facts is None:
        facts = _from_module_files(root, proc_version, flavour)
    elif facts.kernel_module is None and flavour is not None:
        # NVML and nvidia-smi do not say which kernel module is loaded; procfs does, when it is there.
        facts = facts.model_copy(update={"kernel_module": flavour})
    if facts is None:
        notes.append(
            f"NVIDIA: no driver found (looked at NVML, nvidia-smi, /{SYS_MODULE_VERSION}, /{PROC_DRIVER_VERSION})"
        )
    return facts, notes


def _from_nvml(notes: list[str]) -> NvidiaDriverFacts | None:
    try:
        # nvidia-ml-py is optional, not a dependency: import it by name so that neither mypy nor the
        # package needs it; a test inserts a fake into sys.modules.
        nvml = importlib.import_module("pynvml")
    except ImportError:
        notes.append("NVML: the pynvml module (nvidia-ml-py) is not installed")
        return None
    nvml_error: type[BaseException] = getattr(nvml, "NVMLError", OSError)
    try:
        nvml.nvmlInit()
    except (nvml_error, OSError) as error:  # e.g. NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED
        notes.append(f"NVML: {_text(error) or type(error).__name__}")
        return None
    try:
        return _read_nvml(nvml, nvml_error)
    except (nvml_error, OSError) as error:
        notes.append(f"NVML: {_text(error) or type(error).__name__}")
        return None
    finally:
        _quietly(nvml.nvmlShutdown, nvml_error)


def _read_nvml(nvml: ModuleType, nvml_error: type[BaseException]) -> NvidiaDriverFacts:
    get_cuda = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or nvml.nvmlSystemGetCudaDriverVersion
    cuda_int = _quietly(get_cuda, nvml_error)
    gpus = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        gpus.append(_nvml_gpu(nvml, nvml_error, index, handle))
    return NvidiaDriverFacts(
        source="nvml",
        driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
        cuda_driver_version=cuda_from_nvml_int(int(cuda_int)) if cuda_int is not None else None,
        gpus=gpus,
    )


def _nvml_gpu(nvml: ModuleType, nvml_error: type[BaseException], index: int, handle: Any) -> NvidiaGpu:
    # Each per-GPU query may be unsupported on some GPU or driver (NVML_ERROR_NOT_SUPPORTED): such a field
    # stays None instead of losing the GPU.
    memory = _quietly(lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total, nvml_error)
    capability = _quietly(lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle), nvml_error)
    return NvidiaGpu(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)) or f"GPU {index}",
        uuid=_text(_quietly(lambda: nvml.nvmlDeviceGetUUID(handle), nvml_error)),
        pci_bus_id=_text(_quietly(lambda: nvml.nvmlDeviceGetPciInfo(handle).busId, nvml_error)),
        memory_total_mib=int(memory) // (1024 * 1024) if memory is not None else None,
        compute_capability=f"{capability[0]}.{capability[1]}" if capability is not None else None,
    )


def _quietly(call: Any, error: type[BaseException]) -> Any:
    try:
        return call()
    except error:
        return None


def _text(value: Any) -> str | None:
    """NVML strings: str in current bindings, bytes in very old ones (gpu-domain §2.3)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").strip("\x00 ")
    return str(value).strip()


def _from_nvidia_smi(run: Runner, notes: list[str]) -> NvidiaDriverFacts | None:
    answer = run_tool(run, ["nvidia-smi", f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"])
    if answer.stdout is None:
        notes.append(answer.note or "nvidia-smi: no answer")
        # A missing nvidia-smi is not asked again; one that ran but failed the query may still print its header.
        return None if answer.note == "nvidia-smi: not found" else _from_nvidia_smi_text(run, notes)
    gpus, driver = parse_nvidia_smi_csv(answer.stdout, QUERY_FIELDS)
    if driver is None:
        notes.append(f"nvidia-smi: no GPU rows in its answer ({_first_words(answer.stdout)})")
        return _from_nvidia_smi_text(run, notes)
    caps = _nvidia_smi_compute_caps(run, notes)
    gpus = [gpu.model_copy(update={"compute_capability": caps.get(gpu.index)}) for gpu in gpus]
    banner = run_tool(run, ["nvidia-smi"])
    if banner.note:
        notes.append(banner.note)
    cuda = parse_nvidia_smi_banner_cuda(banner.stdout or "")
    if cuda is None:
        cuda = parse_nvidia_smi_banner_cuda(run_tool(run, ["nvidia-smi", "-q"]).stdout or "")
    return NvidiaDriverFacts(source="nvidia-smi", driver_version=driver, cuda_driver_version=cuda, gpus=gpus)


def _from_nvidia_smi_text(run: Runner, notes: list[str]) -> NvidiaDriverFacts | None:
    """The driver and its CUDA version from the banner (or `nvidia-smi -q`) when the CSV query gave nothing:
    an nvidia-smi too old or too new for the query still prints its header (both header styles). The GPUs come
    from the banner's table, else from `-q`'s blocks (a capture or log that holds only one of them)."""
    text = run_tool(run, ["nvidia-smi"]).stdout or ""
    driver = parse_nvidia_smi_banner_driver(text)
    gpus = parse_nvidia_smi_table(text)
    read_from = "GPUs read from its table (names as the table prints them)" if gpus else ""
    if driver is None or not gpus:
        full = run_tool(run, ["nvidia-smi", "-q"]).stdout or ""
        q_gpus = _gpus_of_q(full, notes)
        if driver is None:
            driver, text = parse_nvidia_smi_banner_driver(full), full
        if q_gpus:
            gpus, read_from = q_gpus, "GPUs read from `nvidia-smi -q`"
    if driver is None:
        return None
    notes.append(f"nvidia-smi: driver and CUDA version read from its header; {read_from or 'no per-GPU rows'}")
    return NvidiaDriverFacts(
        source="nvidia-smi", driver_version=driver, cuda_driver_version=parse_nvidia_smi_banner_cuda(text), gpus=gpus
    )


def _gpus_of_q(text: str, notes: list[str]) -> list[NvidiaGpu]:
    gpus, attached = parse_nvidia_smi_q(text)
    if attached is not None and attached > len(gpus):
        # The output was cut after the first GPUs (a pasted log): the count it states is still the host's.
        notes.append(f"nvidia-smi -q: Attached GPUs says {attached}, its output describes {len(gpus)}")
        gpus += [NvidiaGpu(index=index, name=f"GPU {index}") for index in range(len(gpus), attached)]
    return gpus


def _nvidia_smi_compute_caps(run: Runner, notes: list[str]) -> dict[int, str]:
    answer = run_tool(run, ["nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader,nounits"])
    if answer.stdout is None:
        notes.append(f"compute capability not read: {answer.note}")
        return {}
    return parse_nvidia_smi_compute_caps(answer.stdout)


def _first_words(text: str) -> str:
    return text.strip()[:120] or "empty output"


def _read_proc_version(root: Path) -> tuple[str | None, KernelModule | None]:
    text = _read(root / PROC_DRIVER_VERSION)
    return parse_proc_version(text) if text is not None else (None, None)


def read_l4t_release(root: Path) -> str | None:
    """The Jetson L4T release ("R35.3.1") from /etc/nv_tegra_release, else from a Jetson's own
    /proc/driver/nvidia/version (built "for aarch64" with an L4T version); None on other hosts."""
    text = _read(root / TEGRA_RELEASE_FILE)
    release = parse_tegra_release(text) if text is not None else None
    if release is not None:
        return release
    proc = _read(root / PROC_DRIVER_VERSION) or ""
    if is_tegra_proc_version(proc):
        version, _ = parse_proc_version(proc)
        return f"R{version}" if version else None
    return None


def _from_module_files(root: Path, proc_version: str | None, flavour: KernelModule | None) -> NvidiaDriverFacts | None:
    l4t = read_l4t_release(root)
    if l4t is not None:
        # A Jetson's GPU driver is part of L4T: its module reports the L4T release (35.3.1), which is reported
        # as the driver, marked as such, so that the host stage finds a driver and the verdict takes its own
        # Jetson case; never compared with the desktop driver table (the "L4T " prefix keeps it from parsing).
        return NvidiaDriverFacts(source="l4t", driver_version=f"L4T {l4t}", kernel_module=flavour)
    # /sys/module first: it is the bare version, the same for both module flavours.
    text = _read(root / SYS_MODULE_VERSION)
    sys_version = parse_sys_module_version(text) if text is not None else None
    if sys_version is not None:
        return NvidiaDriverFacts(source="sysfs", driver_version=sys_version, kernel_module=flavour)
    if proc_version is not None or flavour is not None:
        return NvidiaDriverFacts(source="procfs", driver_version=proc_version, kernel_module=flavour)
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:  # absent, or unreadable for this user: both mean "this source has nothing"
        return None
