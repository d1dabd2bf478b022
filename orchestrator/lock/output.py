"""The lock file `orch lock` writes: a header saying how it was computed, then one entry per package.

The body stays pip's requirements format (what `orchestrator.dossier.lock` reads and the build installs
with --require-hashes); the header is comments, with one machine-readable line (`# orch-lock: {json}`)
that `orch lock --check` compares with the inputs of the day.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name

from orchestrator.redact import redact

HEADER_KEY = "# orch-lock: "
FORMAT_VERSION = 1


@dataclass
class LockedPackage:
    requirement: str  # 'torch==2.13.0+cpu' (a marker kept when uv wrote one)
    hashes: list[str] = field(default_factory=list)
    via: list[str] = field(default_factory=list)
    source: str | None = None  # the index or find-links URL uv took it from
    wheel: str | None = None  # the file's name, from uv's pylock output

    @property
    def name(self) -> str:
        return canonicalize_name(re.split(r"[=<>!~;\[ ]", self.requirement, maxsplit=1)[0])

    @property
    def version(self) -> str:
        return self.requirement.split("==", 1)[1].split(";", 1)[0].strip()


def parse_uv_requirements(text: str) -> list[LockedPackage]:
    """uv's requirements output with split annotations (`# via`, `# from URL`) into packages."""
    packages: list[LockedPackage] = []
    in_via = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if not raw[0].isspace() and not line.startswith(("#", "-")):
            packages.append(LockedPackage(requirement=line.removesuffix("\\").strip()))
            in_via = False
            continue
        if not packages:
            continue
        current = packages[-1]
        if line.startswith("--hash="):
            current.hashes.append(line.removeprefix("--hash=").removesuffix("\\").strip().removeprefix("sha256:"))
        elif line.startswith("# via"):
            rest = line.removeprefix("# via").strip()
            current.via += [part.strip() for part in rest.split(",") if part.strip()]
            in_via = not rest
        elif line.startswith("# from "):
            current.source = line.removeprefix("# from ").strip()
            in_via = False
        elif in_via and line.startswith("#   "):
            current.via.append(line.removeprefix("#").strip())
    return packages


def wheel_names_from_pylock(text: str) -> dict[str, dict[str, str]]:
    """{package: {sha256: file name}} for every wheel and sdist uv's pylock.toml lists."""
    data = tomllib.loads(text)
    out: dict[str, dict[str, str]] = {}
    for package in data.get("packages", []):
        files = dict(out.get(canonicalize_name(package["name"]), {}))
        for item in [*package.get("wheels", []), *([package["sdist"]] if "sdist" in package else [])]:
            location = item.get("url") or item.get("path") or ""
            name = item.get("name") or unquote(urlsplit(location).path.rsplit("/", 1)[-1])
            sha = item.get("hashes", {}).get("sha256")
            if sha:
                files[sha] = name
        out[canonicalize_name(package["name"])] = files
    return out


def render_body(packages: list[LockedPackage], source_labels: dict[str, str]) -> str:
    lines: list[str] = []
    for package in sorted(packages, key=lambda p: p.name):
        lines.append(f"{package.requirement} \\" if package.hashes else package.requirement)
        for position, sha in enumerate(package.hashes):
            last = position == len(package.hashes) - 1
            lines.append(f"    --hash=sha256:{sha}" + ("" if last else " \\"))
        source = redact(package.source) if package.source else "unknown"
        label = source_labels.get(package.source or "", "")
        note = f"    # from {source}" + (f" ({label})" if label else "")
        if package.wheel:
            note += f"; file {package.wheel}"
        lines.append(note)
        if package.via:
            lines.append(f"    # via {', '.join(package.via)}")
    return "\n".join(lines) + "\n"


def body_digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def render_lock(header_lines: list[str], facts: dict[str, str], body: str) -> str:
    stamp = {"v": FORMAT_VERSION, **facts, "body": body_digest(body)}
    header = "".join(f"# {line}\n" if line else "#\n" for line in header_lines)
    return header + HEADER_KEY + json.dumps(stamp, sort_keys=True) + "\n\n" + body


def read_stamp(text: str) -> tuple[dict[str, str], str] | None:
    """(the header's facts, the body after the header) of a lock orch wrote; None for any other file."""
    lines = text.splitlines(keepends=True)
    for position, line in enumerate(lines):
        if line.startswith(HEADER_KEY):
            try:
                stamp = json.loads(line.removeprefix(HEADER_KEY))
            except json.JSONDecodeError:
                return None
            if not isinstance(stamp, dict):
                return None
            body = "".join(lines[position + 1 :]).removeprefix("\n")
            return {str(k): str(v) for k, v in stamp.items()}, body
        if not line.startswith("#"):
            return None
    return None
