"""Builds the dossier's compiled extensions in the builder stage, then records what built them.

Run by the rendered Dockerfile as `/opt/venv/bin/python build_extensions.py SPEC SOURCES OUT`:
SPEC is orch/extensions.json (written by orch from the dossier's `build` section), SOURCES the folder
the sources were copied to, OUT the folder the final stage copies (and only that folder). It builds
with torch.utils.cpp_extension through setuptools, as `setup.py build_ext` would, and writes
OUT/orch-extensions.json: each artefact's path and sha256, and the compilers' own `--version` lines.

Standard library, torch and setuptools only: it runs inside the image being built, with no network.
"""

from __future__ import annotations

import hashlib
import json
import os
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
    # nvcc prints its release on the last line ("Cuda compilation tools, release 12.4, V12.4.131").
    return lines[-1] if "nvcc" in command[0] else lines[0]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def main(spec_file: str, sources: str, out: str) -> int:
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    spec = json.loads(Path(spec_file).read_text(encoding="utf-8"))
    root = Path(sources)
    modules = []
    for extension in spec["extensions"]:
        kind = CUDAExtension if extension["language"] == "cuda" else CppExtension
        flags: dict[str, list[str]] = {"cxx": list(extension["cxx_flags"])}
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
            "nvcc": _version_line(["nvcc", "--version"]) if spec["language"] == "cuda" else None,
        },
        "requested": {"cuda_archs": spec["cuda_archs"], "env": spec["env"]},
    }
    (out_dir / "orch-extensions.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
