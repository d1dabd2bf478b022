"""Load a dossier file into a validated, frozen `LoadedDossier`, or raise one clear `DossierError`.

Order of checks, each stopping at the first problem so the user gets one message:
file readable → safe YAML → schema version → schema (pydantic) → referenced files exist →
lock parses → coherence with vendor tables (for the reference and every declared variant).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from orchestrator.dossier.coherence import (
    Incoherence,
    ResolvedBaseImage,
    check_python_fits_image,
    check_torch,
    resolve_base_image,
)
from orchestrator.dossier.lock import Lock, LockError, parse_lock
from orchestrator.dossier.models import SCHEMA_VERSION, Dossier
from orchestrator.dossier.yaml_source import FieldPath, YamlDocument, YamlSourceError, read_yaml
from orchestrator.errors import DossierError

# Files and folders that never belong to an application's identity or build context.
IGNORED_NAMES = frozenset({".git", "__pycache__", ".mypy_cache", ".pytest_cache", ".venv", ".DS_Store"})


@dataclass(frozen=True)
class LoadedDossier:
    path: Path  # the dossier file, absolute
    model: Dossier  # the effective dossier (variant applied)
    reference_model: Dossier  # as written
    variant: str | None
    lock: Lock
    base_image: ResolvedBaseImage
    identity: str  # sha256 hex over the normalised dossier and every file it references
    files: dict[str, str]  # dossier-relative path → sha256 (folders: a tree hash)

    @property
    def root(self) -> Path:
        return self.path.parent

    def resolve(self, relative: str) -> Path:
        return (self.root / relative).resolve()

    @property
    def short_identity(self) -> str:
        return self.identity[:12]

    @property
    def code_dir(self) -> Path:
        return self.resolve(self.model.code.source)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def iter_tree(root: Path) -> Iterator[Path]:
    """Files under `root` in a stable order, skipping VCS and cache folders."""
    for path in sorted(root.rglob("*")):
        if any(part in IGNORED_NAMES or part.endswith(".pyc") for part in path.relative_to(root).parts):
            continue
        if path.is_file():
            yield path


def tree_sha256(root: Path) -> str:
    digest = hashlib.sha256()
    for path in iter_tree(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + file_sha256(path).encode() + b"\n")
    return digest.hexdigest()


def _dotted(path: FieldPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _field_path(dotted: str) -> FieldPath:
    """'expect.outputs[0].shape' → ('expect', 'outputs', 0, 'shape'), to look up its line."""
    parts = dotted.replace("]", "").replace("[", ".").split(".")
    return tuple(int(part) if part.isdigit() else part for part in parts)


def _referenced_paths(model: Dossier) -> list[tuple[str, str, bool]]:
    """(field path, relative path, is a folder) for every local file or folder the dossier names."""
    refs: list[tuple[str, str, bool]] = []
    if not model.code.is_git_url:
        refs.append(("code.source", model.code.source, True))
    refs.append(("python.requirements", model.python.requirements, False))
    if model.python.reference_inventory:
        refs.append(("python.reference_inventory", model.python.reference_inventory, False))
    for section, artifacts in (("data", model.data), ("weights", model.weights)):
        for index, artifact in enumerate(artifacts):
            if artifact.path is not None:
                refs.append((f"{section}[{index}].path", artifact.path, False))
    for index, sample_input in enumerate(model.expect.inputs):
        refs.append((f"expect.inputs[{index}].path", sample_input.path, False))
    for index, output in enumerate(model.expect.outputs):
        if output.ids is not None:
            refs.append((f"expect.outputs[{index}].ids.expected", output.ids.expected, False))
        if output.compare is not None:
            refs.append((f"expect.outputs[{index}].compare.reference", output.compare.reference, False))
    for index, check in enumerate(model.expect.business):
        target = check.pairs if check.kind == "nearest_neighbour" else check.reference
        key = "pairs" if check.kind == "nearest_neighbour" else "reference"
        refs.append((f"expect.business[{index}].{key}", target, False))
    for index, variant in enumerate(model.variants):
        if variant.python is not None:
            refs.append((f"variants[{index}].python.requirements", variant.python.requirements, False))
        for name, comparison in variant.compare.items():
            refs.append((f"variants[{index}].compare.{name}.reference", comparison.reference, False))
    return refs


def apply_variant(model: Dossier, name: str) -> Dossier:
    """The effective dossier for a declared variant: its system, lock and comparisons replace the reference's."""
    try:
        variant = model.variant(name)
    except KeyError as exc:
        raise DossierError("--variant", str(exc.args[0])) from None
    outputs = [
        output.model_copy(update={"compare": variant.compare[output.name]})
        if output.name in variant.compare
        else output
        for output in model.expect.outputs
    ]
    return model.model_copy(
        update={
            "system": variant.system or model.system,
            "python": variant.python or model.python,
            "expect": model.expect.model_copy(update={"outputs": outputs}),
        }
    )


def _first_validation_error(file: str, exc: ValidationError, doc: YamlDocument) -> DossierError:
    errors = exc.errors(include_url=False)
    # A misspelt key shows up twice: as unknown, and as the required key it was meant to be. The
    # unknown one is the cause, so it goes first.
    errors.sort(key=lambda error: error["type"] != "extra_forbidden")
    first = errors[0]
    loc: FieldPath = tuple(first["loc"])
    message = first["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if first["type"] == "extra_forbidden":
        message = f"unknown key {loc[-1]!r} (check its spelling; `orch schema` lists every key)"
    elif first["type"] == "missing":
        message = f"required key {loc[-1]!r} is missing"
    elif "input" in first and first["type"] not in ("value_error", "assertion_error"):
        shown = repr(first["input"])
        message = f"{message} (got {shown[:60] + '…' if len(shown) > 60 else shown})"
    more = len(errors) - 1
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    # pydantic inserts union tags ('cosine') into loc; keep only the parts that name real keys.
    field = _dotted(tuple(part for part in loc if isinstance(part, int) or part in doc.keys_seen))
    return DossierError(file, message, field=field or None, line=doc.line_of(loc))


def _check_coherence(file: str, model: Dossier, lock: Lock, doc: YamlDocument, prefix: str = "") -> ResolvedBaseImage:
    image = resolve_base_image(model.system)
    problem: Incoherence | None = image if isinstance(image, Incoherence) else None
    if problem is None and isinstance(image, ResolvedBaseImage):
        problem = check_python_fits_image(model.python, image, model.system) or check_torch(
            model.system, model.python, lock
        )
    if problem is not None:
        field = prefix + problem.field if prefix else problem.field
        line = doc.line_of(_field_path(field))
        raise DossierError(file, problem.message, field=field, line=line)
    assert isinstance(image, ResolvedBaseImage)
    return image


def _read_lock(file: str, model: Dossier, root: Path, field: str) -> Lock:
    lock_path = (root / model.python.requirements).resolve()
    try:
        lock = parse_lock(lock_path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DossierError(str(lock_path), "the lock is not UTF-8 text", field=field) from None
    except LockError as exc:
        raise DossierError(str(lock_path), str(exc), line=exc.line, field=field) from None
    if model.python.install == "wheelhouse" and not lock.fully_hashed:
        unhashed = next(req for req in lock.requirements if not req.hashes)
        raise DossierError(
            str(lock_path),
            f"{unhashed.name} has no --hash: install: wheelhouse installs with --require-hashes, "
            "so every line needs --hash=sha256:…",
            line=unhashed.line,
            field=field,
        )
    return lock


def load_dossier(path: str | Path, *, variant: str | None = None) -> LoadedDossier:
    file = str(path)
    dossier_path = Path(path).resolve()
    try:
        raw = dossier_path.read_bytes()
    except FileNotFoundError:
        raise DossierError(file, "no such file: give the path of a dossier YAML file") from None
    except IsADirectoryError:
        raise DossierError(file, "is a folder; give the dossier YAML file inside it") from None
    except OSError as exc:
        raise DossierError(file, f"cannot be read: {exc.strerror}") from None
    try:
        doc = read_yaml(raw)
    except YamlSourceError as exc:
        raise DossierError(file, str(exc), line=exc.line) from None
    if not isinstance(doc.data, dict):
        raise DossierError(file, f"the top level must be a mapping of keys, got {type(doc.data).__name__}", line=1)
    version = doc.data.get("dossier")
    if version != SCHEMA_VERSION:
        raise DossierError(
            file,
            f"unsupported or missing schema version {version!r}: this orch reads 'dossier: {SCHEMA_VERSION}'",
            field="dossier",
            line=doc.line_of(("dossier",)) or 1,
        )
    try:
        reference = Dossier.model_validate(doc.data)
    except ValidationError as exc:
        raise _first_validation_error(file, exc, doc) from None

    root = dossier_path.parent
    files: dict[str, str] = {}
    for field, relative, is_dir in _referenced_paths(reference):
        target = (root / relative).resolve()
        kind = "folder" if is_dir else "file"
        exists = target.is_dir() if is_dir else target.is_file()
        if not exists:
            raise DossierError(
                file,
                f"{kind} {relative!r} does not exist (looked at {target})",
                field=field,
                line=doc.line_of(_field_path(field)),
            )
        files[relative] = tree_sha256(target) if is_dir else file_sha256(target)

    reference_lock = _read_lock(file, reference, root, "python.requirements")
    reference_image = _check_coherence(file, reference, reference_lock, doc)
    for index, declared in enumerate(reference.variants):
        effective = apply_variant(reference, declared.name)
        variant_lock = (
            _read_lock(file, effective, root, f"variants[{index}].python.requirements")
            if declared.python is not None
            else reference_lock
        )
        _check_coherence(file, effective, variant_lock, doc, prefix=f"variants[{index}].")

    model, lock, image = reference, reference_lock, reference_image
    if variant is not None:
        model = apply_variant(reference, variant)
        lock = _read_lock(file, model, root, "python.requirements") if model.python != reference.python else lock
        image = _check_coherence(file, model, lock, doc)

    return LoadedDossier(
        path=dossier_path,
        model=model,
        reference_model=reference,
        variant=variant,
        lock=lock,
        base_image=image,
        identity=dossier_identity(reference, files, variant),
        files=files,
    )


def dossier_identity(model: Dossier, files: dict[str, str], variant: str | None) -> str:
    """Content hash of the normalised dossier (defaults filled in, keys sorted) and its files' contents.

    Paths are dossier-relative, so moving the folder keeps the identity; changing a byte of any
    referenced file, or choosing a variant, changes it.
    """
    dumped = model.model_dump(mode="json")
    # determinism.cpu came after dossier format 1 shipped: left out while unset, so every dossier that does not
    # use it keeps its identity (and its image tag and hand-overs).
    if dumped["determinism"].get("cpu") is None:
        dumped["determinism"].pop("cpu", None)
    payload = {
        "dossier": dumped,
        "files": dict(sorted(files.items())),
        "variant": variant,
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
