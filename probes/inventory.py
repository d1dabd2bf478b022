"""Inventory probe: what the image actually contains. Runs inside the container with the image's Python.

Standard library only at top level; every step reports failure as data, and the probe prints one JSON
document and exits 0 when it managed to report (a failed check is data, not a crash).
"""

import glob
import hashlib
import json
import os
import platform
import re
import struct
import subprocess
import sys

PROBE_VERSION = 1


def _run(args, timeout=300):
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "error": repr(exc)}
    return {"ok": done.returncode == 0, "returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def pip_section():
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    freeze = _run([*pip, "freeze", "--all"])
    inspect = _run([*pip, "inspect"])
    check = _run([*pip, "check"])
    section = {
        "freeze": freeze["stdout"].splitlines() if freeze["ok"] else None,
        "freeze_error": None if freeze["ok"] else (freeze.get("stderr") or freeze.get("error")),
        "check_ok": check.get("returncode") == 0,
        "check_lines": (check.get("stdout") or check.get("error") or "").splitlines(),
        "inspect": None,
        "inspect_error": None,
    }
    if inspect["ok"]:
        try:
            report = json.loads(inspect["stdout"])
            section["inspect"] = {
                "version": report.get("version"),
                "pip_version": report.get("pip_version"),
                "environment": report.get("environment"),
                "installed": [
                    {
                        "name": item.get("metadata", {}).get("name"),
                        "version": item.get("metadata", {}).get("version"),
                        "requires_dist": item.get("metadata", {}).get("requires_dist", []),
                        "installer": item.get("installer"),
                        "direct_url": item.get("direct_url"),
                        "requested": item.get("requested"),
                    }
                    for item in report.get("installed", [])
                ],
            }
        except ValueError as exc:
            section["inspect_error"] = "pip inspect printed no JSON: " + repr(exc)
    else:
        section["inspect_error"] = inspect.get("stderr") or inspect.get("error")
    return section


def os_section():
    release = {}
    for line in (_read("/etc/os-release") or "").splitlines():
        key, _, value = line.partition("=")
        if key:
            release[key] = value.strip().strip('"')
    packages = {}
    architectures = {}
    status = _read("/var/lib/dpkg/status")
    if status is not None:
        for block in status.split("\n\n"):
            fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", block, flags=re.M))
            if fields.get("Status", "").endswith(" installed") and "Package" in fields:
                packages[fields["Package"]] = fields.get("Version", "")
                if fields.get("Architecture"):
                    architectures[fields["Package"]] = fields["Architecture"]
        manager = "dpkg"
    else:
        rpm = _run(["rpm", "-qa", "--queryformat", "%{NAME}\t%{VERSION}-%{RELEASE}\n"])
        manager = "rpm" if rpm["ok"] else None
        for line in (rpm.get("stdout") or "").splitlines():
            name, _, version = line.partition("\t")
            packages[name] = version
    section = {"release": release, "package_manager": manager, "packages": packages}
    if architectures:
        section["architectures"] = architectures  # for the SBOM's purls (pkg:deb/…?arch=)
    return section


def _torch_versions():
    """torch's version strings, read from torch/version.py without importing torch (fast, no device init)."""
    for entry in sys.path:
        text = _read(os.path.join(entry, "torch", "version.py"))
        if text is not None:
            pattern = r"^(__version__|cuda|hip|git_version)\s*(?::\s*\S+)?\s*=\s*'?\"?([^'\"\n]*)"
            found = dict(re.findall(pattern, text, flags=re.M))
            return {
                "version": found.get("__version__"),
                "cuda": None if found.get("cuda") in (None, "None") else found.get("cuda"),
                "hip": None if found.get("hip") in (None, "None") else found.get("hip"),
            }
    return None


def _torch_arch_list(torch_versions):
    """torch's compiled GPU targets without a GPU (torch._C._cuda_getArchFlags, what get_arch_list returns once a
    device is there), in a child process so the inventory itself never imports torch; [] for CPU builds."""
    if not torch_versions or not (torch_versions.get("cuda") or torch_versions.get("hip")):
        return []
    code = "import torch;f=torch._C._cuda_getArchFlags();print(' '.join((f or '').split()))"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = done.stdout.strip().splitlines()
    return lines[-1].split() if done.returncode == 0 and lines else []


def backend_section():
    cuda_json = _read("/usr/local/cuda/version.json")
    cuda_toolkit = None
    if cuda_json:
        try:
            cuda_toolkit = json.loads(cuda_json).get("cuda", {}).get("version")
        except ValueError:
            cuda_toolkit = None
    rocm = (_read("/opt/rocm/.info/version") or "").strip() or None
    prefixes = ("CUDA_", "NV_", "NVIDIA_", "ROCM_", "HIP")
    env = {key: os.environ[key] for key in sorted(os.environ) if key.startswith(prefixes)}
    # cuda-compat user-mode driver libraries: forward compatibility on data-center GPUs needs them.
    compat = sorted(glob.glob("/usr/local/cuda/compat/libcuda.so.*")) + sorted(
        glob.glob("/usr/local/cuda-*/compat/libcuda.so.*")
    )
    torch_versions = _torch_versions()
    return {
        "cuda_toolkit": cuda_toolkit,
        "rocm": rocm,
        "env": env,
        "torch": torch_versions,
        "cuda_compat_libs": compat,
        "torch_arch_list": _torch_arch_list(torch_versions),
    }


EXT_DIR = "/opt/orch/ext"


def elf_sections(data):
    """{name: bytes} of a little-endian 64-bit ELF object's sections; {} for anything else."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}  # not a little-endian 64-bit ELF: nothing orch builds
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(index):
        name, kind, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + index * shentsize)
        return name, kind, offset, size

    _, _, names_at, _ = header(shstrndx)
    sections = {}
    for index in range(shnum):
        name, kind, offset, size = header(index)
        end = data.index(b"\0", names_at + name)
        # SHT_NOBITS (8) occupies no bytes in the file
        sections[data[names_at + name : end].decode("utf-8", "replace")] = (
            b"" if kind == 8 else data[offset : offset + size]
        )
    return sections


def elf_comment(path):
    """The strings of an ELF object's .comment section: each compiler that built a part of it writes its
    identity there ("GCC: (Debian 12.2.0-14) 12.2.0"), so this is read from the artefact, not from a log."""
    with open(path, "rb") as handle:
        raw = elf_sections(handle.read()).get(".comment", b"").split(b"\0")
    return sorted({part.decode("utf-8", "replace") for part in raw if part})


#: A fat binary container's magic (fatbinary_section.h / fatbinary.h: FATBIN_MAGIC).
FATBIN_MAGIC = 0xBA55ED50
FATBIN_KIND_PTX = 1
#: Machine code (cubin): 2, and 0x10 (an alternate ELF kind cuobjdump also lists).
FATBIN_KINDS_ELF = (2, 0x10)


def fatbin_archs(section):
    """The GPU code in an ELF's .nv_fatbin section: 'sm_XY' for each machine-code (cubin) entry, 'compute_XY'
    for each PTX entry, sorted and deduplicated. Read from the bytes nvcc wrote, not from the arch list asked.

    The layout, as documented by NVIDIA's fatbinary.h (struct fatBinaryHeader: magic u32, version u16,
    headerSize u16, fatSize u64) and the reverse-engineered spec in GrigoryEvko/nvopen-tools,
    fatbin/FORMAT_SPECIFICATION.md (entry: kind u16 @0, header size u32 @4, padded payload size u64 @8,
    sm arch u32 @28): the section holds containers back to back (one per translation unit, each 8-aligned),
    a container's entries follow its header, and each entry's payload (compressed or not) follows its own
    header. Payloads are skipped, never decompressed: the arch is in the entry header.
    """
    archs = set()
    at = 0
    while at + 16 <= len(section):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", section, at)
        if magic != FATBIN_MAGIC:
            if magic == 0:  # padding between containers
                at += 8
                continue
            raise ValueError(f"not a fatbin container at offset {at} (magic {magic:#x})")
        entry, end = at + header_size, at + header_size + fat_size
        if end > len(section):
            raise ValueError(f"fatbin container at offset {at} runs past the section's end")
        while entry + 32 <= end:
            kind, _, entry_size, padded = struct.unpack_from("<HHIQ", section, entry)
            (arch,) = struct.unpack_from("<I", section, entry + 28)
            if entry_size == 0:
                break
            if kind == FATBIN_KIND_PTX:
                archs.add(f"compute_{arch}")
            elif kind in FATBIN_KINDS_ELF:
                archs.add(f"sm_{arch}")
            entry += entry_size + padded
        at = (end + 7) & ~7
    return sorted(archs, key=lambda name: (int(re.sub(r"\D", "", name) or 0), name))


def compiled_archs(path):
    """GPU archs compiled into a shared object (its .nv_fatbin section); [] for a CPU-only object."""
    with open(path, "rb") as handle:
        section = elf_sections(handle.read()).get(".nv_fatbin")
    return fatbin_archs(section) if section else []


def extensions_section():
    """The compiled extensions orch built (EXT_DIR), each hashed and read again here, in the image."""
    record_text = _read(os.path.join(EXT_DIR, "orch-extensions.json"))
    if record_text is None:
        return None
    record = json.loads(record_text)
    artefacts = []
    for extension in record.get("extensions", []):
        path = os.path.join(EXT_DIR, extension["file"])
        entry = {"name": extension["name"], "file": extension["file"], "recorded_sha256": extension["sha256"]}
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as handle:
                entry["sha256"] = hashlib.sha256(handle.read()).hexdigest()
            entry["compilers"] = elf_comment(path)
            try:
                entry["compiled_archs"] = compiled_archs(path)
            except (ValueError, struct.error) as exc:
                entry["compiled_archs"] = []
                entry["fatbin_error"] = str(exc)[:300]
        else:
            entry["sha256"] = None
            entry["compilers"] = []
            entry["compiled_archs"] = []
        artefacts.append(entry)
    return {
        "artefacts": artefacts,
        "toolchain": record.get("toolchain", {}),
        "toolchain_wheels": record.get("toolchain_wheels", []),
    }


def main():
    result = {"probe": "inventory", "probe_version": PROBE_VERSION}
    result["python"] = {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "machine": platform.machine(),
        "libc": "-".join(platform.libc_ver()),
    }
    sections = (("pip", pip_section), ("os", os_section), ("backend", backend_section))
    if os.path.isdir(EXT_DIR):
        sections += (("extensions", extensions_section),)
    for name, section in sections:
        try:
            result[name] = section()
        except Exception as exc:  # a probe reports, it does not crash
            result[name] = {"error": repr(exc)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
