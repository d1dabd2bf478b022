"""Builds the dossier's compiled extensions in the builder stage, then records what built them.

Run by the rendered Dockerfile as `/opt/venv/bin/python build_extensions.py SPEC SOURCES OUT`:
SPEC is orch/extensions.json (written by orch from the dossier's `build` section), SOURCES the folder
the sources were copied to, OUT the folder the final stage copies (and only that folder). It builds
with torch.utils.cpp_extension through setuptools, as `setup.py build_ext` would, and writes
OUT/orch-extensions.json: each artefact's path and sha256, and the compilers' own `--version` lines.

CUDA sources: with NVIDIA's toolchain wheels (spec "cuda"."wheels", installed there by pip --target), it
first lays out a CUDA_HOME from the wheels' files (symlinks), the shape torch.utils.cpp_extension expects
(bin/nvcc, include, lib64/libcudart.so); on a devel base CUDA_HOME is the image's /usr/local/cuda. Either
way it checks that the nvcc it runs reports the version the dossier asked before building.

Standard library, torch and setuptools only: it runs inside the image being built, with no network.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path


def _version_line(command: list[str]) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except OSError:
        return None
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        return None
    # nvcc prints its release on a line of its own ("Cuda compilation tools, release 13.0, V13.0.88"),
    # followed by a "Build cuda_13.0.r13.0/compiler…" line; compilers print theirs first.
    releases = [line for line in lines if "release" in line]
    return releases[0] if "nvcc" in command[0] and releases else lines[0]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def lay_out_cuda_home(wheels: Path, home: Path) -> None:
    """One CUDA_HOME from NVIDIA's wheels. CUDA 13's wheels share one tree (nvidia/cu13/{bin,include,lib,nvvm});
    12.x's have one per wheel (nvidia/cuda_nvcc/, nvidia/cuda_runtime/, ...). Every file is linked into
    `home` at its path inside its tree (the first wheel, by name, wins a clash)."""
    for root in sorted(path for path in (wheels / "nvidia").iterdir() if path.is_dir()):
        for path in sorted(root.rglob("*")):
            target = home / path.relative_to(root)
            if path.is_dir() or target.exists() or target.is_symlink():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path)
    lib = home / "lib"
    # torch links with -L$CUDA_HOME/lib64 -lcudart: the toolkit's folder name, and the unversioned name
    # the wheels leave out (they ship only the runtime's libcudart.so.<major>).
    if lib.is_dir() and not (home / "lib64").exists():
        (home / "lib64").symlink_to("lib")
    versioned = sorted(lib.glob("libcudart.so.*")) if lib.is_dir() else []
    if versioned and not (lib / "libcudart.so").exists():
        (lib / "libcudart.so").symlink_to(versioned[0].name)
    # nvcc.profile adds $(TOP)/targets/<arch>-linux/include, the toolkit's layout: the same folders here.
    targets = home / "targets"
    if not targets.exists():
        targets.mkdir()
        (targets / f"{platform.machine()}-linux").symlink_to("..")


def toolchain_wheels(wheels: Path) -> list[str]:
    """name==version of each wheel pip installed into the toolchain folder (its .dist-info folders)."""
    found = []
    for info in sorted(wheels.glob("*.dist-info")):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        found.append(f"{name}=={version}")
    return found


def nvcc_release(line: str | None) -> str | None:
    """'Cuda compilation tools, release 13.0, V13.0.88' → '13.0.88'."""
    match = re.search(r"\bV(\d+\.\d+(?:\.\d+)?)", line or "")
    return match.group(1) if match else None


def prepare_cuda(cuda: dict) -> str | None:
    """The CUDA_HOME to build with, or the reason the toolchain does not fit (printed, build fails)."""
    home = Path(cuda["home"])
    if cuda.get("wheels"):
        lay_out_cuda_home(Path(cuda["wheels"]), home)
    nvcc = home / "bin" / "nvcc"
    if not nvcc.exists():
        return f"no nvcc at {nvcc}: the CUDA toolchain is missing (build.toolchain)"
    release = nvcc_release(_version_line([str(nvcc), "--version"]))
    asked = str(cuda["nvcc"])
    if release is None or release.split(".")[: len(asked.split("."))] != asked.split("."):
        return f"{nvcc} reports release {release}; the dossier asks nvcc {asked} (build.toolchain.nvcc)"
    return None


def main(spec_file: str, sources: str, out: str) -> int:
    spec = json.loads(Path(spec_file).read_text(encoding="utf-8"))
    cuda = spec.get("cuda")
    if cuda:
        problem = prepare_cuda(cuda)
        if problem is not None:
            print(f"orch: {problem}", file=sys.stderr)
            return 1
    # Imported once CUDA_HOME exists: torch.utils.cpp_extension looks for it at import.
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    root = Path(sources)
    modules = []
    for extension in spec["extensions"]:
        kind = CUDAExtension if extension["language"] == "cuda" else CppExtension
        # -g0 first: Python's own CFLAGS carry -g, and GCC 12's debug location lists differ by a few bytes
        # between two builds of the same source (measured on cpp-extension: 5 bytes of .debug_loclists, so
        # the build-id too), which would make two cold builds two environments. A shipped extension needs
        # no debug sections; a dossier's own -g, after it, still wins.
        flags: dict[str, list[str]] = {"cxx": ["-g0", *extension["cxx_flags"]]}
        if extension["language"] == "cuda":
            flags["nvcc"] = list(extension["nvcc_flags"])
        modules.append(
            kind(
                name=extension["name"],
                sources=[str(root / source) for source in extension["sources"]],
                include_dirs=[str(root / folder) for folder in extension["include_dirs"]],
                extra_compile_args=flags,
            )
        )
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    setup(
        name="orch-extensions",
        ext_modules=modules,
        cmdclass={"build_ext": BuildExtension.with_options(use_ninja=bool(spec["ninja"]))},
        script_args=["--quiet", "build_ext", "--build-lib", str(out_dir), "--build-temp", "/tmp/orch/ext-build"],
    )
    artefacts = []
    for extension in spec["extensions"]:
        built = sorted(out_dir.glob(f"{extension['name']}*.so"))
        if not built:
            print(f"orch: extension {extension['name']!r} built no shared object", file=sys.stderr)
            return 1
        artefacts.append(
            {
                "name": extension["name"],
                "file": built[0].name,
                "sha256": _sha256(built[0]),
                "language": extension["language"],
            }
        )
    record = {
        "extensions": artefacts,
        "toolchain": {
            "gcc": _version_line([os.environ.get("CC", "gcc"), "--version"]),
            "gxx": _version_line([os.environ.get("CXX", "g++"), "--version"]),
            "nvcc": _version_line([str(Path(cuda["home"]) / "bin" / "nvcc"), "--version"]) if cuda else None,
        },
        "toolchain_wheels": toolchain_wheels(Path(cuda["wheels"])) if cuda and cuda.get("wheels") else [],
        "requested": {"cuda_archs": spec["cuda_archs"], "env": spec["env"]},
    }
    (out_dir / "orch-extensions.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
