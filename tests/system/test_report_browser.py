"""The HTML report in a real headless browser (Debian's chromium): the four layers show at a glance.

The screenshot is kept as a test artifact (test-artifacts/report-browser/report.png). Under CI=true a
missing chromium is a failure (`make test` installs it as root); elsewhere the test is skipped.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from orchestrator.report.html import render_html
from tests.paths import REPO
from tests.report_sample import sample_report

ARTIFACTS = REPO / "test-artifacts" / "report-browser"
WIDTH, HEIGHT = 1280, 900
CARD_COLOURS = {"passed": (0xE9, 0xF6, 0xEC), "failed": (0xFD, 0xEC, 0xEA), "not_run": (0xFF, 0xF4, 0xE0)}


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true and chromium is missing: `make test` installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def _headless(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The flags this workplace's machines need: no sandbox as root, no GPU, no background networking.
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--window-size={WIDTH},{HEIGHT}",
        "--hide-scrollbars",
    ]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, check=False, timeout=120)


def _decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, channels, raw rows without filters) of an 8-bit RGB/RGBA PNG: enough to sample pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, idat = 8, b""
    width = height = channels = 0
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset : offset + 8])
        body = data[offset + 8 : offset + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        offset += 12 + length
    raw, stride = zlib.decompress(idat), width * channels
    rows, previous = bytearray(), bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up, up_left = previous[x], previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 0xFF
        rows += line
        previous = line
    return width, height, channels, bytes(rows)


def test_report_renders_four_layer_cards_in_a_real_browser(tmp_path: Path) -> None:
    binary = _chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    report = sample_report()
    page = ARTIFACTS / "report.html"
    page.write_text(render_html(report), encoding="utf-8")
    screenshot = ARTIFACTS / "report.png"
    screenshot.unlink(missing_ok=True)
    result = _headless(binary, tmp_path / "profile", f"--screenshot={screenshot}", page.as_uri())
    assert screenshot.is_file(), result.stderr[-2000:]

    dom = _headless(binary, tmp_path / "profile2", "--dump-dom", page.as_uri()).stdout
    order = [dom.find(f'id="card-{name}"') for name in ("image", "host", "device", "sample")]
    assert all(position > 0 for position in order) and order == sorted(order), "four cards, in layer order"
    assert "<script>alert" not in dom, "user strings stay escaped in the browser's DOM"

    width, height, channels, pixels = _decode_png(screenshot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)

    def colour_counts(x0: int, x1: int, y0: int, y1: int) -> dict[str, int]:
        counts = dict.fromkeys(CARD_COLOURS, 0)
        for y in range(y0, y1, 4):
            for x in range(x0, x1, 4):
                i = (y * width + x) * channels
                rgb = tuple(pixels[i : i + 3])
                for status, colour in CARD_COLOURS.items():
                    if all(abs(a - b) <= 2 for a, b in zip(rgb, colour, strict=True)):
                        counts[status] += 1
        return counts

    # At 1280 px the four cards sit side by side on the first screen, each painted in its status colour.
    quarter = width // 4
    expected = [report.stage(name).status for name in ("image", "host", "device", "sample")]
    for index, status in enumerate(expected):
        counts = colour_counts(index * quarter + 20, (index + 1) * quarter - 20, 150, 600)
        assert max(counts, key=lambda s: counts[s]) == status and counts[status] > 500, (index, status, counts)
