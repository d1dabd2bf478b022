"""Inventory probe: what the image actually contains. Runs inside the container with the image's Python.

Standard library only at top level; every step reports failure as data, and the probe prints one JSON
document and exits 0 when it managed to report (a failed check is data, not a crash).
"""

import concurrent.futures
import glob
import hashlib
import json
import os
import platform
import re
import stat
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


PIP_RUNS = (("freeze", ("freeze", "--all")), ("inspect", ("inspect",)), ("check", ("check",)))


def start_pip_runs(pool):
    """pip's three reports, each in its own process started from a thread of `pool`: they take about two
    seconds of interpreter start-up and metadata reading, which overlap the environment's hashing in the main
    thread (subprocess.run waits without the GIL) instead of adding to it."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    return {name: pool.submit(_run, [*pip, *args]) for name, args in PIP_RUNS}


def pip_section(started):
    """The pip section from the runs `start_pip_runs` began (main starts them before the other sections)."""
    freeze, inspect, check = (started[name].result() for name, _ in PIP_RUNS)
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


# -- the environment digest ---------------------------------------------------------------------------
# Every installed file of the venv (sys.prefix: the probe runs with the image's /opt/venv/bin/python),
# the app folder and the built extensions, each path with the sha256 of its bytes (a symbolic link: of
# its target, prefixed "link:"; never followed), folded into one digest. Two rebuilds of one dossier
# that install the same thing give the same digest. NORMALISED and the uv_cache rules name the only
# bytes left out, because they differ from build to build while the installed code does not
# (measured: docs/environment.md).
# The host folds the list again (orchestrator/model/environment.py, `fold_digest`): the two must agree.

ENVIRONMENT_ROOTS = (sys.prefix, "/opt/app", EXT_DIR)
ENVIRONMENT_FLAG = "--environment"
#: The most files listed; an environment larger than this is reported as an error, not half-listed.
MAX_ENVIRONMENT_FILES = 300000
_BUFFER = 1 << 20


def pyc_source_mtime(path, head):
    """A bytecode cache validated by its source's mtime (PEP 552 flags 0). Bytes 8-11 of its header are the
    mtime the source file got when pip unpacked the wheel, so they change with every install; the rest
    (flags, source size, the compiled code) was measured equal between two builds."""
    return (
        os.path.basename(os.path.dirname(path)) == "__pycache__"
        and path.endswith(".pyc")
        and len(head) >= 16
        and struct.unpack_from("<I", head, 4)[0] == 0
    )


#: (rule name, applies(path, first 16 bytes), offset, length): bytes zeroed before a file is hashed, because
#: they differ between two builds of one dossier while the installed code does not. Nothing else is left out.
NORMALISED = (("source mtime in timestamp-based __pycache__/*.pyc", pyc_source_mtime, 8, 4),)


UV_CACHE_FILE = "uv_cache.json in *.dist-info"
UV_CACHE_LINES = "RECORD lines naming uv_cache.json"


def uv_cache_file(path):
    """uv writes <dist>.dist-info/uv_cache.json with the moment of the install (secs and nanos since the
    epoch): measured different in every build, so it is left out, with its line in RECORD."""
    return os.path.basename(path) == "uv_cache.json" and os.path.dirname(path).endswith(".dist-info")


def record_without_uv_cache(path):
    """The sha256 of a dist-info RECORD without the lines naming uv_cache.json, or None if it names none."""
    if os.path.basename(path) != "RECORD" or not os.path.dirname(path).endswith(".dist-info"):
        return None
    with open(path, "rb") as handle:
        lines = handle.read().split(b"\n")
    kept = [line for line in lines if not line.split(b",", 1)[0].endswith(b"/uv_cache.json")]
    return None if len(kept) == len(lines) else hashlib.sha256(b"\n".join(kept)).hexdigest()


def hash_file(path):
    """(sha256 hex, the rule applied or None) of a regular file, read in 1 MiB chunks."""
    record = record_without_uv_cache(path)
    if record is not None:
        return record, UV_CACHE_LINES
    digest = hashlib.sha256()
    applied = None
    with open(path, "rb") as handle:
        chunk = handle.read(_BUFFER)
        for name, applies, offset, length in NORMALISED:
            if applies(path, chunk[:16]):
                chunk = chunk[:offset] + bytes(length) + chunk[offset + length :]
                applied = name
                break
        while chunk:
            digest.update(chunk)
            chunk = handle.read(_BUFFER)
    return digest.hexdigest(), applied


def fold_digest(files):
    """sha256 over "path NUL value LF" for every listed path, in sorted order: the environment digest."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode("utf-8") + b"\0" + files[path].encode("ascii") + b"\n")
    return "sha256:" + digest.hexdigest()


def _text_path(path):
    # A name that is not UTF-8 is listed with its bytes escaped, so the digest still covers it.
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def environment_section(roots=None):
    roots = [os.path.normpath(root) for root in (roots or ENVIRONMENT_ROOTS)]
    files = {}
    regular = []
    normalised = {name: 0 for name, _, _, _ in NORMALISED}
    normalised.update({UV_CACHE_FILE: 0, UV_CACHE_LINES: 0})
    seen = []
    for root in roots:
        if not os.path.isdir(root) or root in seen:
            continue
        seen.append(root)
        for here, folders, names in os.walk(root):
            folders.sort()
            for name in sorted(names):
                path = os.path.join(here, name)
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    target = os.fsencode(os.readlink(path))
                    files[_text_path(path)] = "link:" + hashlib.sha256(target).hexdigest()
                elif stat.S_ISREG(info.st_mode) and uv_cache_file(path):
                    normalised[UV_CACHE_FILE] += 1
                elif stat.S_ISREG(info.st_mode):
                    regular.append(path)
                if len(files) + len(regular) > MAX_ENVIRONMENT_FILES:
                    raise ValueError(f"more than {MAX_ENVIRONMENT_FILES} files under {', '.join(seen)}")
            # Folders that are links (os.walk lists them among `folders` and does not enter them).
            for name in list(folders):
                path = os.path.join(here, name)
                if os.path.islink(path):
                    files[_text_path(path)] = "link:" + hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest()
    # sha256 releases the GIL on large buffers: a few threads hash a CUDA build's gigabytes several times faster.
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        hashed = list(pool.map(hash_file, regular))  # in order; no zip(strict=): the probe runs on Python < 3.10 too
    for index, path in enumerate(regular):
        value, applied = hashed[index]
        files[_text_path(path)] = value
        if applied is not None:
            normalised[applied] += 1
    return {"roots": seen, "digest": fold_digest(files), "normalised": normalised, "files": files}


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
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(PIP_RUNS)) as pool:
        pip_runs = start_pip_runs(pool)
        sections = (("os", os_section), ("backend", backend_section))
        if os.path.isdir(EXT_DIR):
            sections += (("extensions", extensions_section),)
        # Asked for by orch's own images only (`--environment`): `orch record` runs this probe on a reference
        # interpreter, whose prefix may be /usr or a large conda folder that nothing compares against.
        if ENVIRONMENT_FLAG in sys.argv[1:]:
            sections += (("environment", environment_section),)
        # pip last: its runs go on in the background while the other sections read and hash.
        sections += (("pip", lambda: pip_section(pip_runs)),)
        for name, section in sections:
            try:
                result[name] = section()
            except Exception as exc:  # a probe reports, it does not crash
                result[name] = {"error": repr(exc)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
