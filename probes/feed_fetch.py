"""Copies the wheels orch's wheel feed serves into a local folder, inside the build's one install step.

Run by the one-stage Dockerfile (templates/dockerfiles/base.Dockerfile.j2, `plan.wheel_feed`) as
`pythonX.Y /tmp/orch/feed_fetch.py URL DEST`, after that step has checked this file's sha256. It reads the
feed's page for `wheels/` (http.server's folder listing: the page uv's `--find-links` read before) and
downloads every `.whl` it links into DEST, four at a time. uv then installs from DEST with `--require-hashes`,
so every wheel is still checked against the lock; the step deletes DEST, so no wheel reaches a layer.

Why not let uv read the feed itself: uv unpacks a wheel it streams over HTTP in one thread as it arrives,
and a local file with all its threads; with torch's wheel in the lock the install took 13.1 s over HTTP and
9.4 s from a local folder, and this copy 0.3 s (docs/benchmarks.md).

Standard library only (it runs on the base image's Python, before any venv exists). A link that is not a
plain wheel file name is refused, so nothing is written outside DEST.
"""

from __future__ import annotations

import concurrent.futures
import html
import os
import re
import sys
import urllib.parse
import urllib.request

WHEEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.whl$")
CHUNK = 1 << 20
WORKERS = 4


def wheel_names(listing: str) -> list[str]:
    """The wheel file names a folder page links, sorted; ValueError for a wheel link that is not a bare name."""
    names = set()
    for href in re.findall(r'href="([^"]*)"', listing):
        name = urllib.parse.unquote(html.unescape(href))
        if not name.endswith(".whl"):
            continue  # the listing's own links (parent folder, sub-folders) are not wheels
        if not WHEEL_NAME.match(name):
            raise ValueError(f"the feed lists {name!r}, which is not a wheel file name")
        names.add(name)
    return sorted(names)


def fetch(url: str, dest: str, name: str) -> None:
    target = os.path.join(dest, name)
    partial = target + ".part"
    with urllib.request.urlopen(url + urllib.parse.quote(name), timeout=300) as response, open(partial, "wb") as out:
        while True:
            chunk = response.read(CHUNK)
            if not chunk:
                break
            out.write(chunk)
    os.replace(partial, target)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: feed_fetch.py URL DEST\n")
        return 2
    url, dest = argv[1], argv[2]
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            names = wheel_names(response.read().decode("utf-8", "replace"))
        if not names:
            raise ValueError(f"no wheel is listed at {url}")
        os.makedirs(dest, exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS) as pool:
            for future in [pool.submit(fetch, url, dest, name) for name in names]:
                future.result()
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"orch wheel feed: copying the wheels from {url} failed: {exc}\n")
        return 1
    print(f"orch wheel feed: {len(names)} wheels copied from {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
