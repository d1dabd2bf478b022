"""Compiles a venv's bytecode once, at install (orch's BuildKit install step, orch/install-venv.sh).

    python compile_venv.py SITE_PACKAGES

Every `.py` file under SITE_PACKAGES except those under a `tests/` folder (no application imports a package's
own tests; they are 16% of the files, docs/benchmarks.md) is compiled by `compileall.compile_file`, so the
`.pyc` files are byte for byte those of `python -m compileall -q -j 0 -x '/tests/' SITE_PACKAGES`, which the
classic builder's Dockerfile runs (both builders give one environment digest). What differs is the handing
out: `compileall -j 0` gives its process pool one file per task, and for minilm's 10,000 files the pickling
round trips took half of its 13 s; chunks of 64 files compile the same set in 7 s (docs/benchmarks.md).

A file that does not compile (a stray Python 2 script) is reported and left to the interpreter, as pip and
uv leave it; the exit status is 0 either way. Standard library only.
"""

import compileall
import multiprocessing
import os
import re
import sys

SKIPPED = re.compile("/tests/")
CHUNK = 64


def sources(root):
    for here, folders, names in os.walk(root):
        folders.sort()
        for name in sorted(names):
            path = os.path.join(here, name)
            if name.endswith(".py") and not SKIPPED.search(path):
                yield path


def compile_one(path):
    return compileall.compile_file(path, quiet=1)


def main(root):
    with multiprocessing.Pool() as pool:
        # Every result, before the pool closes: `all()` over the iterator would stop at the first failure
        # and leave the rest of the files uncompiled.
        results = list(pool.imap_unordered(compile_one, list(sources(root)), chunksize=CHUNK))
    if not all(results):
        print("orch: the files above did not compile to bytecode; Python compiles them at import")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
