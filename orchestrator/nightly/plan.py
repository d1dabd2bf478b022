"""The nightly plan file (YAML): which dossiers, on which targets, how, and where the history lives.

Strict like the dossier (pydantic v2, `extra="forbid"`, the same safe YAML reader: no aliases, no
duplicate keys, line numbers kept) with a JSON Schema for editors (`nightly_plan_json_schema`,
committed as docs/nightly-plan-schema.json). A plan that does not load is one `PlanInvalid` line: the
file, the line, the field, and what to do. Relative paths resolve against the plan file's folder.

Planning is pure: `expand_cells` turns a loaded plan into the night's cells before anything runs, so
`orch nightly run --dry-run` and a unit test see exactly what the runner will dispatch.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.dossier.load import read_declaration
from orchestrator.dossier.yaml_source import FieldPath, YamlDocument, read_yaml
from orchestrator.errors import DossierError, PlanInvalid, YamlSourceError
from orchestrator.nightly.cell import CachePolicy, CellRequest
from orchestrator.nightly.target_specs import TargetSpec

PLAN_VERSION = 1
PLAN_SCHEMA_ID = f"https://orch.invalid/schema/nightly-plan-v{PLAN_VERSION}.json"
MAX_PLAN_BYTES = 256 * 1024
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DossierEntry(_Strict):
    """One dossier of the matrix: the reference itself and/or some of its declared variants."""

    path: Path = Field(description="The dossier file, relative to the plan's folder.")
    variants: tuple[str, ...] = Field(
        default=(), description="Declared variants to rebuild too (each is a cell of its own on every target)."
    )
    reference: bool = Field(default=True, description="Rebuild the dossier as written (no variant) too.")
    timeout_s: int | None = Field(
        default=None, gt=0, description="This dossier's cell timeout (plan default if unset)."
    )
    reference_run: Path | None = Field(
        default=None,
        description="The reference run to drift against: its report.json, build.json, or the folder holding "
        "them (the output of `orch rebuild` where the reference ran). Unset: the reference is what the "
        "dossier declares (its sample's comparison with the reference outputs, in each report).",
    )

    @model_validator(mode="after")
    def _something_to_build(self) -> DossierEntry:
        if not self.reference and not self.variants:
            raise ValueError("reference: false and no variants leaves nothing to rebuild; list a variant")
        return self


class CellSelector(_Strict):
    """Cells by dossier name and target name; shell patterns (`*`) allowed.

    `dossier` matches a dossier's name (all its cells: the reference and its variants) or one cell's
    `name.variant`."""

    dossier: str = Field(default="*", description="`tiny-embeddings`, `tiny-embeddings.cpu`, `tiny-*`.")
    target: str = Field(default="*", description="A target's name or a pattern.")


class CellMatrix(_Strict):
    include: tuple[CellSelector, ...] | None = Field(
        default=None, description="Only these cells (default: every dossier on every target)."
    )
    exclude: tuple[CellSelector, ...] = Field(default=(), description="Minus these cells.")


class PublishSpec(_Strict):
    """Where passing images are pushed (by digest). Credentials by environment variable *name* only."""

    registry: str = Field(min_length=1, description="`registry.example.org:5000`.")
    repository: str = Field(pattern=r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*$", description="`team/orch-nightly`.")
    username_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    password_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    ca_cert: Path | None = Field(default=None, description="The registry's CA certificate, relative to the plan.")
    sign_key: Path | None = Field(
        default=None,
        description="Sign each pushed image's attestations with this key, relative to the plan: a private key file "
        "(OpenSSH or PEM), or a .pub whose key is in ssh-agent. Pushed beside the image; never copied.",
    )


class NightlyPlan(_Strict):
    """A night: dossiers by targets, each cell one `orch rebuild` on its target."""

    nightly: Literal[1] = Field(description="Schema version of the plan file.")
    dossiers: tuple[DossierEntry, ...] = Field(min_length=1)
    targets: tuple[TargetSpec, ...] = Field(min_length=1)
    cells: CellMatrix = Field(default_factory=CellMatrix)
    cache: CachePolicy = Field(default="cold", description="`cold`: every night rebuilds from scratch.")
    timeout_s: int = Field(default=3600, gt=0, description="A cell's timeout unless its dossier sets one.")
    retention_nights: int = Field(default=30, ge=1, description="Nights kept in the history; older ones are removed.")
    trend_nights: int = Field(default=14, ge=2, le=365, description="Nights the summary's trend plots cover.")
    history: Path = Field(description="The history folder (nights/<date>/…), relative to the plan.")
    tag_namespace: str = Field(default="orch-nightly", pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    publish: PublishSpec | None = None

    @field_validator("targets")
    @classmethod
    def _unique_targets(cls, targets: tuple[TargetSpec, ...]) -> tuple[TargetSpec, ...]:
        names = [target.name for target in targets]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"target name {twice[0]!r} is used twice; give each target its own name")
        return targets

    @model_validator(mode="after")
    def _published_from_here(self) -> NightlyPlan:
        """A night publishes from a Podman target's local socket only (nightly/targets/podman_endpoint.py)."""
        if self.publish is not None:
            for target in self.targets:
                if target.kind == "podman" and (target.podman_host or "").startswith("ssh://"):
                    raise ValueError(
                        f"target {target.name!r}: a night publishes from a Podman target on this machine "
                        "(unix://) only; publish from a Docker target or a local Podman socket, or drop `publish`"
                    )
        return self


@dataclass(frozen=True)
class LoadedPlan:
    """A validated plan with every path absolute, and the dossiers' names read."""

    file: Path
    model: NightlyPlan
    dossiers: tuple[tuple[DossierEntry, str], ...]  # (entry with absolute paths, the dossier's name)

    @property
    def history(self) -> Path:
        return self.model.history


@dataclass(frozen=True)
class PlannedCell:
    request: CellRequest
    dossier_name: str
    target: str
    reference_run: Path | None


def nightly_plan_json_schema() -> dict[str, Any]:
    schema = NightlyPlan.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": PLAN_SCHEMA_ID, **schema}


def _field_text(loc: FieldPath) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _invalid(file: Path, message: str, *, line: int | None = None, field: str | None = None) -> PlanInvalid:
    where = f"{file}" + (f":{line}" if line else "") + (f" [{field}]" if field else "")
    return PlanInvalid(f"{where}: {message}")


def _from_validation(file: Path, exc: ValidationError, doc: YamlDocument) -> PlanInvalid:
    errors = exc.errors(include_url=False)
    errors.sort(key=lambda error: error["type"] != "extra_forbidden")
    first = errors[0]
    # The discriminated union adds the tag (`docker`) to the path: drop it for the reader.
    loc: FieldPath = tuple(part for part in first["loc"] if part not in ("docker", "podman", "slurm"))
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = f"unknown key {loc[-1]!r}: check its spelling (docs/nightly-plan-schema.json lists every key)"
    elif first["type"] == "missing":
        message = f"required key {loc[-1]!r} is missing: add it"
    elif first["type"] == "union_tag_invalid":
        message = "`kind` must be `docker`, `podman` or `slurm`"
    elif first["type"] == "union_tag_not_found":
        message = "a target needs `kind: docker`, `kind: podman` or `kind: slurm`"
    elif "input" in first and first["type"] not in ("value_error", "assertion_error"):
        message = f"{message} (got {first['input']!r})"
    return _invalid(file, message, line=doc.line_of(loc), field=_field_text(loc) or None)


def _absolute(base: Path, path: Path) -> Path:
    return path if path.is_absolute() else (base / path)


def _resolve_paths(plan: NightlyPlan, base: Path) -> NightlyPlan:
    dossiers = tuple(
        entry.model_copy(
            update={
                "path": _absolute(base, entry.path),
                "reference_run": _absolute(base, entry.reference_run) if entry.reference_run else None,
            }
        )
        for entry in plan.dossiers
    )
    targets = []
    for target in plan.targets:
        update: dict[str, Any] = {}
        if target.kind == "slurm":
            update["shared_dir"] = _absolute(base, target.shared_dir)
        elif target.kind == "docker" and target.tls is not None:
            tls = target.tls
            update["tls"] = tls.model_copy(
                update={
                    "ca_cert": _absolute(base, tls.ca_cert),
                    "client_cert": _absolute(base, tls.client_cert),
                    "client_key": _absolute(base, tls.client_key),
                }
            )
        targets.append(target.model_copy(update=update))
    publish = plan.publish
    if publish is not None and publish.ca_cert is not None:
        publish = publish.model_copy(update={"ca_cert": _absolute(base, publish.ca_cert)})
    if publish is not None and publish.sign_key is not None:
        publish = publish.model_copy(update={"sign_key": _absolute(base, publish.sign_key)})
    return plan.model_copy(
        update={
            "dossiers": dossiers,
            "targets": tuple(targets),
            "history": _absolute(base, plan.history),
            "publish": publish,
        }
    )


#: Folders a history may never be: retention deletes under the history, and a night writes into it.
SYSTEM_FOLDERS = frozenset(
    [
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/media",
        "/mnt",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/var",
        "/var/lib",
        "/var/log",
        "/var/tmp",
    ]
)


def history_refusal(history: Path) -> str | None:
    """Why `history` cannot be a nightly history (None: it can): a system folder, or a folder that holds
    something a history does not (`nights/`, the `latest` link, orch's own dot-files)."""
    resolved = history.resolve()
    if str(resolved) in SYSTEM_FOLDERS or resolved == Path.home().resolve():
        return f"{resolved} is a system folder; give the history a folder of its own (e.g. nightly-history/)"
    if resolved.is_dir():
        foreign = sorted(
            entry.name
            for entry in resolved.iterdir()
            if entry.name not in ("nights", "latest") and not entry.name.startswith(".")
        )
        if foreign:
            return (
                f"{resolved} holds {foreign[0]!r}, which is not part of an orch history (nights/, latest); "
                "give the history a folder of its own"
            )
    return None


def load_plan(path: Path) -> LoadedPlan:
    """Read and validate a plan file; every dossier it names is read (its declaration only) for its name."""
    file = path.absolute()
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise _invalid(file, "no such file: give the path of a nightly plan (YAML)") from None
    except OSError as exc:
        raise _invalid(file, f"cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_PLAN_BYTES:
        raise _invalid(file, f"{len(raw):,} bytes; a plan is at most {MAX_PLAN_BYTES:,} bytes")
    try:
        doc = read_yaml(raw)
    except YamlSourceError as exc:
        raise _invalid(file, str(exc).replace("in a dossier", "in a plan"), line=exc.line) from None
    if not isinstance(doc.data, dict):
        raise _invalid(file, "a plan is a YAML mapping starting with `nightly: 1`", line=1)
    if doc.data.get("nightly") != PLAN_VERSION:
        raise _invalid(
            file,
            f"the plan must start with `nightly: {PLAN_VERSION}` (the schema version this orch reads)",
            line=doc.line_of(("nightly",)) or 1,
            field="nightly",
        )
    try:
        model = NightlyPlan.model_validate(doc.data)
    except ValidationError as exc:
        raise _from_validation(file, exc, doc) from None
    model = _resolve_paths(model, file.parent)
    refused = history_refusal(model.history)
    if refused is not None:
        raise _invalid(file, refused, line=doc.line_of(("history",)), field="history")
    dossiers: list[tuple[DossierEntry, str]] = []
    for index, entry in enumerate(model.dossiers):
        field = f"dossiers[{index}].path"
        line = doc.line_of(("dossiers", index, "path"))
        try:
            declared = read_declaration(entry.path)
        except DossierError as exc:
            raise _invalid(file, f"the dossier does not load: {exc.message}", line=line, field=field) from None
        known = {variant.name for variant in declared.variants}
        for variant in entry.variants:
            if variant not in known:
                shown = ", ".join(sorted(known)) or "none"
                raise _invalid(
                    file,
                    f"{declared.name} declares no variant {variant!r} (declared: {shown}); fix the name",
                    line=doc.line_of(("dossiers", index, "variants")),
                    field=f"dossiers[{index}].variants",
                )
        if entry.reference_run is not None and not entry.reference_run.exists():
            raise _invalid(
                file,
                f"reference_run {entry.reference_run} does not exist: give a report.json, build.json or their folder",
                line=doc.line_of(("dossiers", index, "reference_run")),
                field=f"dossiers[{index}].reference_run",
            )
        dossiers.append((entry, declared.name))
    seen: dict[str, Path] = {}
    for entry, name in dossiers:
        if name in seen and seen[name] != entry.path:
            raise _invalid(
                file,
                f"two dossiers are both named {name!r} ({seen[name]} and {entry.path}): cell names must be unique",
                field="dossiers",
            )
        seen[name] = entry.path
    return LoadedPlan(file=file, model=model, dossiers=tuple(dossiers))


def _selected(selectors: tuple[CellSelector, ...], cell_name: str, base_name: str, target: str) -> bool:
    return any(
        (fnmatch.fnmatchcase(cell_name, s.dossier) or fnmatch.fnmatchcase(base_name, s.dossier))
        and fnmatch.fnmatchcase(target, s.target)
        for s in selectors
    )


def expand_cells(plan: LoadedPlan, night_dir: Path) -> list[PlannedCell]:
    """The night's cells, in plan order (dossier, variant, target): dossiers by targets, then include/exclude."""
    model = plan.model
    cells: list[PlannedCell] = []
    seen: set[str] = set()
    for entry, name in plan.dossiers:
        variants: list[str | None] = ([None] if entry.reference else []) + list(entry.variants)
        for variant in variants:
            cell_name = name if variant is None else f"{name}.{variant}"
            for target in model.targets:
                if model.cells.include is not None and not _selected(model.cells.include, cell_name, name, target.name):
                    continue
                if _selected(model.cells.exclude, cell_name, name, target.name):
                    continue
                cell_id = f"{cell_name}@{target.name}"
                if cell_id in seen:
                    continue
                seen.add(cell_id)
                request = CellRequest(
                    cell_id=cell_id,
                    dossier=entry.path,
                    variant=variant,
                    out=night_dir / cell_id,
                    cache=model.cache,
                    timeout_s=entry.timeout_s or model.timeout_s,
                    gpus=target.gpus,
                    tag_namespace=model.tag_namespace,
                )
                cells.append(PlannedCell(request, name, target.name, entry.reference_run))
    if not cells:
        raise PlanInvalid(f"{plan.file} [cells]: include/exclude leave no cell to run; widen `cells.include`")
    return cells
