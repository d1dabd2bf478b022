"""Parsers of `nvidia-smi`'s outputs: the CSV of `--query-gpu`, the banner's driver and CUDA versions, the GPU
table of plain `nvidia-smi` and the GPU blocks of `nvidia-smi -q`.

Pure functions of text, tested on real outputs (tests/corpus: smi-*). The collector (`host/nvidia.py`) runs the
commands and chooses among them: the CSV query first, the table or `-q` only when no query answered (a capture or
a log that holds one of them). The man page says the human-readable formats may change; each pattern below names
the layouts it was checked on.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence

from orchestrator.model.host import NvidiaGpu

#: What the collector asks `nvidia-smi` for. `compute_cap` is asked separately: drivers of the 470 series
#: and older reject the whole query with `"compute_cap" is not a valid field to query.` (gpu-domain §2.2).
QUERY_FIELDS: tuple[str, ...] = ("index", "name", "uuid", "pci.bus_id", "memory.total", "driver_version")
FULL_QUERY_FIELDS: tuple[str, ...] = (*QUERY_FIELDS, "compute_cap")

# The banner's header: "Driver Version: 550.54.15  CUDA Version: 12.4" until R610, which renamed both
# ("KMD Version: 610.43.02  CUDA UMD Version: 13.3"; nvidia-smi docs: "deprecated Driver Version and CUDA Version
# in favor of KMD Version and CUDA UMD Version"). `nvidia-smi -q` prints the same keys as "Key : value" lines.
_BANNER_CUDA = re.compile(r"CUDA (?:UMD )?Version\s*:\s*(\d+\.\d+)")
_BANNER_DRIVER = re.compile(r"(?:Driver|KMD) Version\s*:\s*(\d+\.\d+(?:\.\d+)*)")
# nvidia-smi's spellings of "no value": "[N/A]", "[Not Supported]", "N/A", and "[Unknown Error]" and kin.
_NO_VALUE = re.compile(r"^\[.*\]$|^N/A$", re.IGNORECASE)
# A GPU's first row in plain `nvidia-smi`'s table, in every layout seen from R390 to R580 (narrow and wide tables,
# WSL, a Jetson's "N/A" bus): "|   0  NVIDIA H100 80GB HBM3   On  |   00000000:18:00.0 Off |  0 |". The name is
# as the table prints it, cut to its column ("NVIDIA GeForce GTX 1650 ..."); the mode is persistence (Linux) or
# the driver model (WDDM/TCC on Windows). The processes and MIG tables never have a bus id in their second cell.
_TABLE_GPU = re.compile(
    r"^\|\s+(\d+)\s+(\S.*?)\s+(?:On|Off|N/A|WDDM|TCC|MCDM)\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\w|N/A)\s"
)
_TABLE_MEMORY = re.compile(r"\b\d+MiB\s*/\s*(\d+)MiB\b")
# `nvidia-smi -q`: "Attached GPUs : 4", then one block per GPU opened by its bus id ("GPU 00000000:18:00.0") with
# indented "Key : value" lines; "FB Memory Usage" is followed by its own indented "Total : 81920 MiB".
_Q_ATTACHED = re.compile(r"^Attached GPUs\s*:\s*(\d+)\s*$", re.MULTILINE)
_Q_BLOCK = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\w)\s*$", re.MULTILINE)
_Q_FIELD = re.compile(r"^\s+(Product Name|GPU UUID)\s*:\s*(.+?)\s*$", re.MULTILINE)
_Q_FB_TOTAL = re.compile(r"FB Memory Usage\s*\n\s+Total\s*:\s*(\d+)\s*MiB")


def parse_nvidia_smi_banner_cuda(text: str) -> str | None:
    """The "CUDA Version: 12.4" (R610+: "CUDA UMD Version: 13.3") of plain `nvidia-smi` or `nvidia-smi -q`:
    the newest CUDA the *driver* supports, not a toolkit."""
    match = _BANNER_CUDA.search(text)
    return match.group(1) if match else None


def parse_nvidia_smi_banner_driver(text: str) -> str | None:
    """The driver version of the banner or `-q` ("Driver Version: 550.54.15", R610+: "KMD Version: 610.43.02")."""
    match = _BANNER_DRIVER.search(text)
    return match.group(1) if match else None


def parse_nvidia_smi_csv(text: str, fields: Sequence[str] = FULL_QUERY_FIELDS) -> tuple[list[NvidiaGpu], str | None]:
    """GPUs and driver version from `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`.

    `fields` is the query's field list in order (default: index,name,uuid,pci.bus_id,memory.total,
    driver_version,compute_cap); a row that does not fit it (an error line, a short row) is skipped.
    """
    gpus: list[NvidiaGpu] = []
    driver: str | None = None
    for position, row in enumerate(smi_csv_rows(text, fields)):
        name = row.get("name")
        if name is None:
            continue
        index = _to_int(row.get("index"))
        gpus.append(
            NvidiaGpu(
                index=position if index is None else index,
                name=name,
                uuid=row.get("uuid"),
                pci_bus_id=row.get("pci.bus_id"),
                memory_total_mib=_to_int(_strip_unit(row.get("memory.total"), "MiB")),
                compute_capability=row.get("compute_cap"),
            )
        )
        driver = driver or row.get("driver_version")
    return gpus, driver


def parse_nvidia_smi_table(text: str) -> list[NvidiaGpu]:
    """GPUs from plain `nvidia-smi`'s table (index, name as printed, bus id, total memory): the fallback when no
    `--query-gpu` answer is there (a capture or log that holds only the table). Rows after "Processes:" are not
    GPUs. Names may be cut by the table's column; the CSV query, when captured, gives them whole."""
    gpus: list[NvidiaGpu] = []
    lines = text.split("Processes:", 1)[0].splitlines()
    for number, line in enumerate(lines):
        match = _TABLE_GPU.match(line.strip())
        if match is None:
            continue
        memory = _TABLE_MEMORY.search(lines[number + 1]) if number + 1 < len(lines) else None
        gpus.append(
            NvidiaGpu(
                index=int(match.group(1)),
                name=match.group(2),
                pci_bus_id=_value(match.group(3)),
                memory_total_mib=int(memory.group(1)) if memory else None,
            )
        )
    return gpus


def parse_nvidia_smi_q(text: str) -> tuple[list[NvidiaGpu], int | None]:
    """GPUs from `nvidia-smi -q` (one block per GPU, in index order: name, UUID, bus id, total memory) and the
    "Attached GPUs" count it states, which is larger than the blocks when the output was cut after the first GPU."""
    attached = _Q_ATTACHED.search(text)
    starts = list(_Q_BLOCK.finditer(text))
    gpus: list[NvidiaGpu] = []
    for index, start in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        block = text[start.end() : end]
        fields = {key: _value(value) for key, value in _Q_FIELD.findall(block)}
        memory = _Q_FB_TOTAL.search(block)
        gpus.append(
            NvidiaGpu(
                index=index,
                name=fields.get("Product Name") or f"GPU {index}",
                uuid=fields.get("GPU UUID"),
                pci_bus_id=start.group(1),
                memory_total_mib=int(memory.group(1)) if memory else None,
            )
        )
    return gpus, int(attached.group(1)) if attached else None


def parse_nvidia_smi_compute_caps(text: str) -> dict[int, str]:
    """`--query-gpu=index,compute_cap`: GPU index → "9.0"; GPUs reporting [N/A] are left out."""
    caps: dict[int, str] = {}
    for row in smi_csv_rows(text, ("index", "compute_cap")):
        index, cap = _to_int(row.get("index")), row.get("compute_cap")
        if index is not None and cap is not None:
            caps[index] = cap
    return caps


def smi_csv_rows(text: str, fields: Sequence[str]) -> list[dict[str, str | None]]:
    """Rows of nvidia-smi's CSV as field → value, "[N/A]"-style values as None."""
    rows: list[dict[str, str | None]] = []
    for cells in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(cells) != len(fields):
            continue  # a blank or error line ("NVIDIA-SMI has failed because ..."), not a GPU
        rows.append({field: _value(cell) for field, cell in zip(fields, cells, strict=True)})
    return rows


def _value(cell: str) -> str | None:
    cell = cell.strip()
    return None if not cell or _NO_VALUE.match(cell) else cell


def _strip_unit(value: str | None, unit: str) -> str | None:
    # Without `nounits` memory reads "81559 MiB"; accept both so a hand-run query parses too.
    return value.removesuffix(unit).strip() if value is not None else None


def _to_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None
