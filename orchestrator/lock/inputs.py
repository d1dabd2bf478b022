"""The loose requirements a lock is computed from, and their fingerprint (what `--check` compares).

Looked for in this order unless `--input` names one: `<lock stem>.in` beside the lock
(requirements-cpu.lock → requirements-cpu.in), `requirements.in` in the dossier's folder, the
`[project].dependencies` of a pyproject.toml at the code's root, the dossier's reference inventory
(a `pip freeze`: its pins are kept; editable and direct-URL lines cannot be locked and are refused).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement

from orchestrator.errors import BadInput

InputKind = Literal["requirements", "pyproject", "inventory"]

_INCLUDE = re.compile(r"^\s*(-r|-c|--requirement|--constraint)[=\s]+(\S+)")
#: Options of a requirements file that choose where packages come from. `orch lock` takes its sources from the
#: dossier (`python.indexes`, `python.find_links`, each credential by variable name), so such a line would be
#: ignored while the user believes it was used: it is refused instead, its value (maybe a token) never shown.
_SOURCE_OPTION = re.compile(
    r"^\s*(-i|--index-url|--extra-index-url|--index|-f|--find-links|--trusted-host|--no-index|--default-index)(?=[=\s]|$)"
)


@dataclass(frozen=True)
class LockInput:
    path: Path
    kind: InputKind
    #: The text uv reads (for an inventory: the freeze with only its `name==version` lines).
    text: str
    #: sha256 over the input and every file it includes with -r/-c, in order.
    digest: str
    shown: str  # the path as the lock header shows it (relative to the dossier's folder)

    @property
    def requirements(self) -> list[Requirement]:
        out: list[Requirement] = []
        for raw in self.text.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", raw).strip()
            if not line or line.startswith("-"):
                continue
            try:
                out.append(Requirement(line))
            except InvalidRequirement:
                continue
        return out


def _included_digest(path: Path, seen: set[Path]) -> list[bytes]:
    real = path.resolve()
    if real in seen:
        return []
    seen.add(real)
    try:
        raw = real.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the lock's input: {exc.strerror}") from None
    parts = [raw]
    for line in raw.decode("utf-8", "replace").splitlines():
        match = _INCLUDE.match(line)
        if match:
            parts += _included_digest(real.parent / match.group(2), seen)
    return parts


def _refuse_source_options(path: Path, seen: set[Path] | None = None) -> None:
    """A requirements file (and each it includes with -r/-c) must not name indexes or wheel folders."""
    seen = set() if seen is None else seen
    real = path.resolve()
    if real in seen or not real.is_file():
        return
    seen.add(real)
    text = real.read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        option = _SOURCE_OPTION.match(line)
        if option:
            raise BadInput(
                f"{path}:{number}: {option.group(1)} in the lock's input: orch lock takes indexes and wheel folders "
                "from the dossier (python.indexes, python.find_links), not from this file, so the line would be "
                "ignored",
                hint="Remove the line and declare the index under python.indexes in the dossier, its credential "
                "by variable name (docs/lock.md).",
            )
        include = _INCLUDE.match(line)
        if include:
            _refuse_source_options(real.parent / include.group(2), seen)


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    for part in _included_digest(path, set()):
        sha.update(hashlib.sha256(part).digest())
    return sha.hexdigest()


def _pyproject_dependencies(path: Path) -> str:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"{path}: cannot read its [project].dependencies ({exc})") from None
    dependencies = data.get("project", {}).get("dependencies")
    if not isinstance(dependencies, list) or not dependencies:
        raise BadInput(f"{path}: has no [project].dependencies to lock", hint="List them, or give --input FILE.")
    return "".join(f"{item}\n" for item in dependencies)


def _inventory_pins(path: Path) -> str:
    """The freeze's `name==version` lines; editable and direct-URL installs are refused with their line."""
    kept: list[str] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-e") or " @ " in line:
            raise BadInput(
                f"{path}:{number}: {line.split()[0]} was installed from a local folder or a direct URL, which no "
                "index serves and a lock cannot pin",
                hint="Publish it to an index (or a wheel folder given with --find-links) and list it by name "
                "in a requirements.in given with --input.",
            )
        kept.append(line)
    return "".join(f"{line}\n" for line in kept)


def find_input(
    given: Path | None, *, dossier_dir: Path, lock_path: Path, code_dir: Path | None, inventory: Path | None
) -> LockInput:
    candidates: list[tuple[Path, InputKind]]
    if given is not None:
        kind: InputKind = "pyproject" if given.name == "pyproject.toml" else "requirements"
        candidates = [(given, kind)]
        if not given.is_file():
            raise BadInput(f"{given}: no such file: give the loose requirements (requirements.in) to lock")
    else:
        candidates = [(lock_path.with_suffix(".in"), "requirements"), (dossier_dir / "requirements.in", "requirements")]
        if code_dir is not None:
            candidates.append((code_dir / "pyproject.toml", "pyproject"))
        if inventory is not None:
            candidates.append((inventory, "inventory"))
    for path, kind in candidates:
        if not path.is_file():
            continue
        if kind == "pyproject":
            text = _pyproject_dependencies(path)
        elif kind == "inventory":
            text = _inventory_pins(path)
        else:
            _refuse_source_options(path)
            text = path.read_text(encoding="utf-8")
        try:
            shown = str(path.resolve().relative_to(dossier_dir.resolve()))
        except ValueError:
            shown = str(path)
        return LockInput(path=path, kind=kind, text=text, digest=_digest(path), shown=shown)
    looked = ", ".join(str(path) for path, _ in candidates)
    raise BadInput(
        f"nothing to lock from: looked for {looked}",
        hint="Write the app's direct dependencies (loose, e.g. 'sentence-transformers>=6') in requirements.in "
        "beside the dossier, or give --input FILE.",
    )
