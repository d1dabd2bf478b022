"""Small real wheels (zip files with METADATA) for `orch lock` tests, and a dossier around them."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def make_wheel(folder: Path, name: str, version: str, tag: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal valid wheel `name-version-tag.whl` whose METADATA declares `requires`."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"",
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires)
        ).encode(),
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: orch-tests\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()
    )
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    path = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_dossier(
    folder: Path,
    requirements_in: str,
    *,
    indexes: str = "[]",
    use_pypi: bool = True,
    base_image: str = "{ref: 'orch/debian-python:bookworm'}",
    platform: str = "cpu",
) -> Path:
    (folder / "app").mkdir(exist_ok=True)
    (folder / "app" / "main.py").write_text("print(1)\n")
    (folder / "requirements.in").write_text(requirements_in)
    path = folder / "dossier.yaml"
    path.write_text(
        "dossier: 1\nname: lock-test\ncode: {source: app, entrypoint: main.py}\n"
        f"python: {{version: '3.12', requirements: requirements.lock, install: wheelhouse, indexes: {indexes}, "
        f"use_pypi: {str(use_pypi).lower()}}}\n"
        f"system: {{platform: {platform}, base_image: {base_image}}}\n"
        "expect: {command: [python, main.py], outputs: [{name: o, file: o.json, format: json}]}\n"
    )
    return path
