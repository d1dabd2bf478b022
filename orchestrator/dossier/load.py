"""Load a dossier file into a validated, frozen `LoadedDossier`, or raise one clear `DossierError`.

Order of checks, each stopping at the first problem so the user gets one message:
file readable → safe YAML → schema version → schema (pydantic) → referenced files exist, inside the
dossier's folder, of the right kind (`paths`: the folder is untrusted, symlinks leaving it are refused)
→ declared fingerprints match, when asked (`orch validate`) → lock parses → coherence with vendor
tables (for the reference and every declared variant).

Why one module of ~490 lines: it is the loader's one sequence, read top to bottom; the parts that stand
on their own (YAML source, paths, fingerprints, lock, coherence) already live beside it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from orchestrator.dossier.coherence import (
    Incoherence,
    ResolvedBaseImage,
    check_build,
    check_python_fits_image,
    check_torch,
    resolve_base_image,
)
from orchestrator.dossier.fingerprints import (
    FINGERPRINT_NEXT_STEP,
    DeclaredFingerprint,
    declared_fingerprints,
    fingerprint_mismatch,
    total_bytes,
    where_differ,
)
from orchestrator.dossier.lock import Lock, parse_lock
from orchestrator.dossier.models import SCHEMA_VERSION, Dossier
from orchestrator.dossier.paths import (
    Kind,
    OnBytes,
    TreeFile,
    Where,
    check_relative,
    describe_mode,
    file_sha256,
    locate,
    path_sha256,
    tree_sha256,
    walk_tree,
)
from orchestrator.dossier.yaml_source import MAX_BYTES, FieldPath, YamlDocument, read_yaml
from orchestrator.errors import DossierError, LockError, YamlSourceError

# file_sha256 lives in `paths` and the fingerprint rules in `fingerprints`; both are re-exported because
# callers hash and compare files as `load` does.
__all__ = [
    "DeclaredFingerprint",
    "LoadedDossier",
    "apply_variant",
    "declared_fingerprints",
    "dossier_identity",
    "file_sha256",
    "fingerprint_mismatch",
    "load_dossier",
    "path_sha256",
    "referenced_paths",
    "where_differ",
]


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
    #: Symlinks followed (all inside the folder, by the rule in `paths`): link → target, folder-relative.
    links: dict[str, str] = field(default_factory=dict)
    #: The build-only lock of toolchain wheels (build.toolchain.requirements: nvcc and CUDA headers), if any.
    toolchain_lock: Lock | None = None

    @property
    def root(self) -> Path:
        return self.path.parent

    def resolve(self, relative: str, *, kind: Kind = "file") -> Path:
        """The real path of a file the dossier names, checked again by the rule (the folder may have changed)."""
        return locate(self.root, relative, kind, Where(str(self.path)))

    def fingerprint(self, relative: str) -> str:
        """The sha256 of a data, weights or input path as it is now: a file's, or a folder's tree hash."""
        return path_sha256(self.root, relative, Where(str(self.path)))

    def code_files(self) -> list[TreeFile]:
        """The code folder's regular files, walked by the rule: what the build context receives."""
        return list(walk_tree(self.code_dir, self.root, Where(str(self.path), "code.source")))

    def find_links(self) -> list[str]:
        """The effective find-links for the host's pip: URLs as written, folders located by the rule."""
        return [
            str(self.resolve(link, kind="folder")) if is_local_link(link) else link
            for link in self.model.python.find_links
        ]

    @property
    def short_identity(self) -> str:
        return self.identity[:12]

    @property
    def code_dir(self) -> Path:
        return self.resolve(self.model.code.source, kind="folder")


def _dotted(path: FieldPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _field_path(dotted: str) -> FieldPath:
    """'expect.outputs[0].shape' → ('expect', 'outputs', 0, 'shape'), to look up its line."""
    parts = dotted.replace("]", "").replace("[", ".").split(".")
    return tuple(int(part) if part.isdigit() else part for part in parts)


def referenced_paths(model: Dossier) -> list[tuple[str, str, Kind]]:
    """(field path, relative path, what it must be) for every local file or folder the dossier names. Data,
    weights and sample inputs may be folders: one item, fingerprinted as a tree, mounted as a tree."""
    refs: list[tuple[str, str, Kind]] = []
    if not model.code.is_git_url:
        refs.append(("code.source", model.code.source, "folder"))
    refs.append(("python.requirements", model.python.requirements, "file"))
    if model.python.reference_inventory:
        refs.append(("python.reference_inventory", model.python.reference_inventory, "file"))
    for section, artifacts in (("data", model.data), ("weights", model.weights)):
        for index, artifact in enumerate(artifacts):
            if artifact.path is not None:
                refs.append((f"{section}[{index}].path", artifact.path, "any"))
    for index, sample_input in enumerate(model.expect.inputs):
        refs.append((f"expect.inputs[{index}].path", sample_input.path, "any"))
    for index, output in enumerate(model.expect.outputs):
        if output.ids is not None:
            refs.append((f"expect.outputs[{index}].ids.expected", output.ids.expected, "file"))
        if output.compare is not None:
            refs.append((f"expect.outputs[{index}].compare.reference", output.compare.reference, "file"))
    for index, check in enumerate(model.expect.business):
        target = check.pairs if check.kind == "nearest_neighbour" else check.reference
        key = "pairs" if check.kind == "nearest_neighbour" else "reference"
        refs.append((f"expect.business[{index}].{key}", target, "file"))
    if model.build is not None and model.build.toolchain.requirements is not None:
        refs.append(("build.toolchain.requirements", model.build.toolchain.requirements, "file"))
    for index, variant in enumerate(model.variants):
        if variant.python is not None:
            refs.append((f"variants[{index}].python.requirements", variant.python.requirements, "file"))
        for name, comparison in variant.compare.items():
            refs.append((f"variants[{index}].compare.{name}.reference", comparison.reference, "file"))
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


def _check_coherence(
    file: str, model: Dossier, lock: Lock, doc: YamlDocument, prefix: str = "", toolchain_lock: Lock | None = None
) -> ResolvedBaseImage:
    image = resolve_base_image(model.system)
    problem: Incoherence | None = image if isinstance(image, Incoherence) else None
    if problem is None and isinstance(image, ResolvedBaseImage):
        problem = (
            check_python_fits_image(model.python, image, model.system)
            or check_torch(model.system, model.python, lock)
            or check_build(model.build, model.system, image, lock, toolchain_lock)
        )
    if problem is not None:
        field = prefix + problem.field if prefix else problem.field
        line = doc.line_of(_field_path(field))
        raise DossierError(file, problem.message, field=field, line=line)
    assert isinstance(image, ResolvedBaseImage)
    return image


def is_local_link(link: str) -> bool:
    return not link.startswith(("http://", "https://"))


def _local_find_links(model: Dossier) -> list[tuple[str, str]]:
    """(field, path) of every host folder the dossier names as find-links, variants' included.

    They fall under the folder rule like every other path: the host's `pip download` reads them, and a
    wheel found there enters the image whenever the (dossier-controlled) lock holds its hash, so a
    dossier naming `/srv/private-wheels` could carry a private wheel out. A site-wide wheel folder is
    the operator's to give, through the host's pip configuration (PIP_FIND_LINKS, pip.conf), which
    `pip download` reads as usual.
    """
    found = [(f"python.find_links[{i}]", link) for i, link in enumerate(model.python.find_links)]
    for v, variant in enumerate(model.variants):
        if variant.python is not None:
            found += [
                (f"variants[{v}].python.find_links[{i}]", link) for i, link in enumerate(variant.python.find_links)
            ]
    return [(field_name, link) for field_name, link in found if is_local_link(link)]


#: What to do about a lock that does not load, whether it was edited on purpose or not.
LOCK_NEXT_STEP = (
    "The lock is computed, not written: put an intended change (another version, another package) in the lock's "
    "input (requirements.in) and run orch lock DOSSIER again; otherwise restore the lock orch lock wrote."
)


def _read_lock(file: str, model: Dossier, root: Path, field: str) -> Lock:
    lock_path = root / model.python.requirements
    try:
        real = locate(root, model.python.requirements, "file", Where(file, field))
    except DossierError as exc:
        exc.hint = exc.hint or f"Compute it: orch lock {file} (it reads requirements.in beside the dossier)."
        raise
    try:
        lock = parse_lock(real.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DossierError(str(lock_path), "the lock is not UTF-8 text", field=field, hint=LOCK_NEXT_STEP) from None
    except LockError as exc:
        raise DossierError(str(lock_path), str(exc), line=exc.line, field=field, hint=LOCK_NEXT_STEP) from None
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


def _read_toolchain_lock(file: str, model: Dossier, root: Path) -> Lock | None:
    """build.toolchain.requirements: installed with --require-hashes in the builder stage, in every mode."""
    relative = model.build.toolchain.requirements if model.build is not None else None
    if relative is None:
        return None
    field = "build.toolchain.requirements"
    real = locate(root, relative, "file", Where(file, field))
    try:
        lock = parse_lock(real.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DossierError(str(root / relative), "the lock is not UTF-8 text", field=field) from None
    except LockError as exc:
        raise DossierError(str(root / relative), str(exc), line=exc.line, field=field) from None
    unhashed = next((req for req in lock.requirements if not req.hashes), None)
    if unhashed is not None:
        raise DossierError(
            str(root / relative),
            f"{unhashed.name} has no --hash: the toolchain wheels install with --require-hashes, "
            "so every line needs --hash=sha256:…",
            line=unhashed.line,
            field=field,
        )
    return lock


def _read_dossier_file(given: Path) -> tuple[Path, bytes]:
    """The dossier's real path and at most MAX_BYTES + 1 of its bytes, by the folder rule.

    A link is followed only inside the folder it sits in; a FIFO or device is refused by its kind,
    never read (`/dev/zero` would fill memory, a FIFO would block).
    """
    file = str(given)
    folder = Path(os.path.realpath(given.parent))
    try:
        mode = os.lstat(given).st_mode
        real = Path(os.path.realpath(given, strict=True))
    except FileNotFoundError:
        raise DossierError(file, "no such file: give the path of a dossier YAML file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DossierError(file, f"is a symlink loop (it points to {os.readlink(given)!r})") from None
        raise DossierError(file, f"cannot be read: {exc.strerror}") from None
    if stat.S_ISLNK(mode) and not real.is_relative_to(folder):
        raise DossierError(
            file,
            f"is a symlink to {os.readlink(given)!r}, outside its folder {folder}: orch never follows a link "
            "out of a dossier's folder; give the real file",
        )
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise DossierError(file, f"cannot be read: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise DossierError(file, "is a folder; give the dossier YAML file inside it")
        raise DossierError(file, f"is {describe_mode(mode)}; give the dossier YAML file")
    with os.fdopen(fd, "rb") as handle:
        try:
            return real, handle.read(MAX_BYTES + 1)  # read_yaml says "too large" past MAX_BYTES
        except OSError as exc:
            raise DossierError(file, f"cannot be read: {exc.strerror}") from None


def read_declaration(path: Path) -> Dossier:
    """The dossier's own fields, validated, with no referenced file opened, hashed or checked.

    For readers of what a dossier *declared* after the fact (`orch compare` looking a recorded variant
    up, `orch verify` checking a shipped dossier's paths before anything is hashed). The file itself is
    read by the same rule as `load_dossier` (no link out of its folder, no FIFO or device, a size cap).
    A file that cannot be read is `DossierError` with no field and no line; one that does not validate
    names its field and line.
    """
    file = str(path)
    _, raw = _read_dossier_file(path)
    try:
        doc = read_yaml(raw)
    except YamlSourceError as exc:
        raise DossierError(file, str(exc), line=exc.line or 1) from None
    try:
        return Dossier.model_validate(doc.data)
    except ValidationError as exc:
        raise _first_validation_error(file, exc, doc) from None


def load_dossier(
    path: str | Path,
    *,
    variant: str | None = None,
    check_fingerprints: bool = False,
    on_total: Callable[[int], None] | None = None,
    on_bytes: OnBytes | None = None,
) -> LoadedDossier:
    """Load and check a dossier. Every referenced file is hashed (streamed) for the identity;
    `check_fingerprints` also compares each declared sha256 with it and stops at the first mismatch.
    `on_total` receives the number of bytes to hash, then `on_bytes` each chunk (a progress bar)."""
    file = str(path)
    dossier_path, raw = _read_dossier_file(Path(path))
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
    # The entry point lies in the code's tree, which for git is only known at build time: here its form.
    entry = "code.entrypoint"
    check_relative(reference.code.entrypoint, Where(file, entry, doc.line_of(_field_path(entry))))
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    located: list[tuple[str, str, Path, list[TreeFile] | None]] = []
    for field_name, relative, kind in referenced_paths(reference):
        where = Where(file, field_name, doc.line_of(_field_path(field_name)))
        target = locate(root, relative, kind, where, links)
        tree = list(walk_tree(target, root, where, links)) if target.is_dir() else None
        located.append((field_name, relative, target, tree))
    for field_name, relative in _local_find_links(reference):
        where = Where(file, field_name, doc.line_of(_field_path(field_name)))
        if relative.startswith("file:"):
            raise where.error(
                f"find-links {relative!r} names a host folder by URL; give a folder relative to the dossier's "
                "folder (a site-wide wheel folder belongs in the host's pip configuration, PIP_FIND_LINKS)"
            )
        locate(root, relative, "folder", where, links)
    if reference.build is not None and not reference.code.is_git_url:
        # A git URL's tree is known at build time only; a local folder's sources are checked here.
        for e, extension in enumerate(reference.build.extensions):
            for s, source in enumerate(extension.sources):
                field_name = f"build.extensions[{e}].sources[{s}]"
                where = Where(file, field_name, doc.line_of(_field_path(field_name)))
                locate(root, f"{reference.code.source.rstrip('/')}/{source}", "file", where, links)
    fingerprints = declared_fingerprints(reference) if check_fingerprints else {}
    if on_total is not None:
        on_total(total_bytes(located))
    for field_name, relative, target, tree in located:
        if relative in files:
            continue  # one file named by several fields is read once
        where = Where(file, field_name, doc.line_of(_field_path(field_name)))
        try:
            files[relative] = tree_sha256(tree, on_bytes) if tree is not None else file_sha256(target, on_bytes)
        except OSError as exc:  # changed between the check and the read (a file swapped for a FIFO)
            raise where.error(f"cannot read {relative!r}: {exc.strerror}") from None
        for fingerprint in fingerprints.get(relative, ()):
            if fingerprint.expected != files[relative]:
                raise DossierError(
                    file,
                    fingerprint_mismatch(relative, fingerprint.expected, files[relative]),
                    field=fingerprint.field,
                    line=doc.line_of(_field_path(fingerprint.field)),
                    hint=FINGERPRINT_NEXT_STEP,
                )

    reference_lock = _read_lock(file, reference, root, "python.requirements")
    toolchain_lock = _read_toolchain_lock(file, reference, root)  # the build section is not a variant's
    reference_image = _check_coherence(file, reference, reference_lock, doc, toolchain_lock=toolchain_lock)
    for index, declared in enumerate(reference.variants):
        effective = apply_variant(reference, declared.name)
        variant_lock = (
            _read_lock(file, effective, root, f"variants[{index}].python.requirements")
            if declared.python is not None
            else reference_lock
        )
        _check_coherence(
            file, effective, variant_lock, doc, prefix=f"variants[{index}].", toolchain_lock=toolchain_lock
        )

    model, lock, image = reference, reference_lock, reference_image
    if variant is not None:
        model = apply_variant(reference, variant)
        lock = _read_lock(file, model, root, "python.requirements") if model.python != reference.python else lock
        image = _check_coherence(file, model, lock, doc, toolchain_lock=toolchain_lock)

    return LoadedDossier(
        path=dossier_path,
        model=model,
        reference_model=reference,
        variant=variant,
        lock=lock,
        base_image=image,
        identity=dossier_identity(reference, files, variant),
        files=files,
        links=links,
        toolchain_lock=toolchain_lock,
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
    # build (compiled extensions) likewise: absent from the identity while unset.
    if dumped.get("build") is None:
        dumped.pop("build", None)
    # python.installer likewise (its default, uv for a wheelhouse, is what the rendered Dockerfile shows).
    for python in [dumped["python"], *(variant.get("python") for variant in dumped.get("variants") or [])]:
        if isinstance(python, dict) and python.get("installer") is None:
            python.pop("installer", None)
    # data/weights endpoint (an S3-compatible store, with remote sources) likewise.
    for section in ("data", "weights"):
        for artifact in dumped.get(section) or []:
            if isinstance(artifact, dict) and artifact.get("endpoint") is None:
                artifact.pop("endpoint", None)
    payload = {
        "dossier": dumped,
        "files": dict(sorted(files.items())),
        "variant": variant,
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
