"""Writes the requirements file that seeds a new venv with ensurepip's own wheels (orch's BuildKit install step).

Run by orch/install-venv.sh as `pythonX.Y venv_seed.py OUT` with the base image's Python, before any venv
exists. It lists the very wheels `python -m venv` would install (ensurepip's bundled pip, and setuptools on
Python < 3.12), as `--find-links FOLDER` lines and `name==version` pins, for uv to install in 0.5 s where
ensurepip's own pip run takes 5 s (docs/benchmarks.md). ensurepip's package list is read through its private
`_get_packages()` (Debian's 3.11); on a Python where it is missing or names no file, it exits 1 and the
script lets ensurepip seed the venv itself, as `python -m venv` does: slower, the same packages.

Standard library only.
"""

import ensurepip
import os
import sys


def main(out):
    try:
        packages = ensurepip._get_packages()
    except AttributeError:
        return 1
    here = os.path.join(os.path.dirname(ensurepip.__file__), "_bundled")
    files = {name: package.wheel_path or os.path.join(here, package.wheel_name) for name, package in packages.items()}
    if not files or not all(os.path.isfile(path) for path in files.values()):
        return 1
    links = sorted({"--find-links " + os.path.dirname(path) + "\n" for path in files.values()})
    pins = [name + "==" + packages[name].version + "\n" for name in sorted(packages)]
    with open(out, "w") as handle:
        handle.write("".join(links) + "".join(pins))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
