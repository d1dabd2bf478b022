"""`orch lock`: compute the hash-locked requirements for a dossier's target, or check that a lock is current.

The flow: read the dossier (without its lock, which may not exist yet), derive the target (Python,
manylinux tag, architecture, PyTorch variant) and the sources, probe the sources, run uv twice (the
requirements lock, then uv's pylock.toml constrained to the same pins, which names each chosen file),
check every file's tags against the target and the torch pin against the vendor tables, and write the
lock atomically with a header that `--check` compares.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from orchestrator.dossier.coherence import Incoherence, check_python_fits_image, check_torch, resolve_base_image

# The loader's own translation of a validation error (file, field, line): the same message as `orch validate`.
from orchestrator.dossier.load import _first_validation_error as first_validation_error
from orchestrator.dossier.load import apply_variant
from orchestrator.dossier.lock import parse_lock
from orchestrator.dossier.models import Dossier
from orchestrator.dossier.yaml_source import read_yaml
from orchestrator.errors import DossierError, IndexUnreachable, LockError, LockFailed, LockStale, YamlSourceError
from orchestrator.fsutil import atomic_write_text
from orchestrator.lock.advice import torch_choices
from orchestrator.lock.inputs import LockInput, find_input
from orchestrator.lock.output import (
    LockedPackage,
    body_digest,
    parse_uv_requirements,
    read_stamp,
    render_body,
    render_lock,
    wheel_names_from_pylock,
)
from orchestrator.lock.sources import (
    HOST_FIND_LINKS,
    Reachability,
    Source,
    credentials,
    probe_all,
    sources_for,
    torch_index_hint,
)
from orchestrator.lock.target import Arch, LockTarget
from orchestrator.lock.uv import compile_command, run_uv, uv_binary, uv_environment, uv_version


@dataclass(frozen=True)
class LockPlan:
    dossier: Path
    name: str
    variant: str | None
    model: Dossier
    target: LockTarget
    sources: tuple[Source, ...]
    lock_path: Path
    input: LockInput

    def facts(self) -> dict[str, str]:
        """What the lock depends on besides the resolver's answer: compared by --check."""
        return {
            "input": self.input.shown,
            "input_sha256": self.input.digest,
            "target": self.target.key(),
            # A host's wheel folder (--find-links) is a mirror, not an input: CI checks without it.
            "sources": " ".join(source.url for source in self.sources if source.origin != HOST_FIND_LINKS),
        }


@dataclass(frozen=True)
class LockResult:
    plan: LockPlan
    packages: tuple[LockedPackage, ...]
    unreachable: tuple[Reachability, ...]
    text: str
    changed: bool
    notes: tuple[str, ...]


def _read_model(path: Path, variant: str | None) -> Dossier:
    file = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DossierError(file, f"cannot be read: {exc.strerror}") from None
    try:
        doc = read_yaml(raw)
    except YamlSourceError as exc:
        raise DossierError(file, str(exc), line=exc.line) from None
    try:
        model = Dossier.model_validate(doc.data)
    except ValidationError as exc:
        raise first_validation_error(file, exc, doc) from None
    return apply_variant(model, variant) if variant else model


def plan_lock(
    dossier: Path,
    *,
    variant: str | None = None,
    arch: Arch = "x86_64",
    find_links: tuple[str, ...] = (),
    input_path: Path | None = None,
) -> LockPlan:
    model = _read_model(dossier, variant)
    image = resolve_base_image(model.system)
    if isinstance(image, Incoherence):
        raise DossierError(str(dossier), image.message, field=image.field)
    misfit = check_python_fits_image(model.python, image, model.system)
    if misfit is not None:
        raise DossierError(str(dossier), misfit.message, field=misfit.field)
    if image.glibc is None:
        raise DossierError(
            str(dossier),
            f"orch does not know the glibc of {image.ref}, so it cannot choose manylinux wheels for it",
            field="system.base_image.glibc",
            hint="State it, e.g. glibc: '2.35' (ldd --version inside the image).",
        )
    target = LockTarget(
        python=model.python.version,
        arch=arch,
        glibc=image.glibc,
        platform=model.system.platform,
        backend_version=model.system.version,
        base_image=image.ref,
    )
    root = dossier.resolve().parent
    lock_path = root / model.python.requirements
    code_dir = root / model.code.source if "://" not in model.code.source and "@" not in model.code.source else None
    inventory = root / model.python.reference_inventory if model.python.reference_inventory else None
    found = find_input(input_path, dossier_dir=root, lock_path=lock_path, code_dir=code_dir, inventory=inventory)
    sources = tuple(sources_for(model.python, target, list(find_links)))
    return LockPlan(dossier, model.name, variant, model, target, sources, lock_path, found)


def reference_preferences(plan: LockPlan, upgrade: bool = False) -> str:
    """The `name==version` lines of the dossier's reference inventory (`pip freeze --all` of the reference), as
    uv's preferences for a first lock; "" without one, with --upgrade, or when the inventory is the input."""
    relative = plan.model.python.reference_inventory
    if not relative or upgrade or plan.input.kind == "inventory":
        return ""
    try:
        text = (plan.dossier.parent / relative).read_text(encoding="utf-8")
    except OSError:
        return ""
    pins = [
        line.strip() for line in text.splitlines() if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==\S+", line.strip())
    ]
    return "".join(f"{pin}\n" for pin in pins)


def _header(plan: LockPlan, uv: str, unreachable: tuple[Reachability, ...]) -> list[str]:
    missing = {r.source.url: r.reason for r in unreachable}
    lines = [
        f"Lock for {plan.name}" + (f" (variant {plan.variant})" if plan.variant else "") + ", computed by `orch lock`: "
        "edit the input, not this file, then run orch lock again.",
        f"target: {plan.target.describe()}",
        f"input: {plan.input.shown} ({plan.input.kind})",
        f"resolver: {uv} (uv pip compile --generate-hashes, first-index strategy)",
        "sources, in the order searched:",
    ]
    for source in plan.sources:
        line = f"  {source.line()}"
        if source.url in missing:
            line += f" -- NOT CONSULTED: unreachable from the host that wrote this lock ({missing[source.url]})"
        lines.append(line)
    return lines


def _uv_failure(plan: LockPlan, stderr: str, unreachable: tuple[Reachability, ...]) -> LockFailed:
    detail = " ".join(line.strip() for line in stderr.strip().splitlines() if line.strip())[:1200]
    hints = [torch_choices(plan.target)] if "torch" in stderr else []
    if unreachable:
        skipped = ", ".join(r.source.url for r in unreachable)
        hints.append(f"not consulted (unreachable from this host): {skipped}; it may serve what is missing")
    hint = "; ".join(hints) or None
    return LockFailed(
        f"uv found no lock of {plan.input.shown} for {plan.target.describe()}: {detail or 'no message'}",
        hint=hint,
    )


def compute_lock(
    plan: LockPlan,
    *,
    upgrade: bool = False,
    upgrade_packages: tuple[str, ...] = (),
    skip_unreachable: bool = False,
    environ: Mapping[str, str] | None = None,
) -> LockResult:
    env = dict(os.environ if environ is None else environ)
    creds = credentials(list(plan.sources), env)
    reach = probe_all(list(plan.sources), env)
    unreachable = tuple(r for r in reach if not r.reachable)
    if unreachable and not skip_unreachable:
        first = unreachable[0]
        names = "; ".join(f"{r.source.url} ({r.source.origin}): {r.reason}" for r in unreachable)
        raise IndexUnreachable(
            f"cannot lock {plan.name}: {len(unreachable)} source(s) did not answer from this host: {names}",
            hint=f"Run orch lock where {first.source.url} answers; or pass --skip-unreachable (with --find-links "
            "DIR holding its wheels, if any) and the lock's header will say it was not consulted.",
        )
    used = [source for source in plan.sources if source.url not in {r.source.url for r in unreachable}]
    uv = uv_binary()
    uv_env = uv_environment(env, creds)
    with tempfile.TemporaryDirectory(prefix="orch-lock-") as scratch:
        work = Path(scratch)
        input_file = plan.input.path.resolve()
        if plan.input.kind == "inventory":
            input_file = work / "inventory.in"
            input_file.write_text(plan.input.text, encoding="utf-8")
        previous = plan.lock_path.read_text(encoding="utf-8") if plan.lock_path.is_file() else ""
        out = work / "requirements.txt"
        # The previous lock's pins are uv's preferences: an unchanged input keeps every pin; --upgrade-package
        # moves only the named ones. Its header and comments mean nothing to uv. With no lock yet, the reference
        # inventory's pins are the preferences: a loose requirements.in (its top-level distributions) then locks
        # to the reference's versions on the same target, yet an intended change (another torch) still resolves.
        out.write_text(previous or reference_preferences(plan, upgrade), encoding="utf-8")
        command = compile_command(
            uv, input_file, out, plan.target, used, upgrade=upgrade, upgrade_packages=upgrade_packages
        )
        done = run_uv(command, uv_env, plan.input.path.resolve().parent)
        if done.returncode != 0:
            raise _uv_failure(plan, done.stderr, unreachable)
        packages = parse_uv_requirements(out.read_text(encoding="utf-8"))
        pins = work / "pins.txt"
        pins.write_text("".join(f"{p.requirement}\n" for p in packages), encoding="utf-8")
        pylock = work / "pylock.toml"
        command = compile_command(
            uv, input_file, pylock, plan.target, used, output_format="pylock.toml", constraints=pins
        )
        done = run_uv(command, uv_env, plan.input.path.resolve().parent)
        if done.returncode != 0:
            raise _uv_failure(plan, done.stderr, unreachable)
        files = wheel_names_from_pylock(pylock.read_text(encoding="utf-8"))
        version = uv_version(uv)
    notes = _attach_files(plan, packages, files)
    labels = {source.url: source.origin for source in used}
    labels.update({f"file://{source.url}": source.origin for source in used if source.url.startswith("/")})
    body = render_body(packages, labels)
    _check_body(plan, body)
    hint = torch_index_hint(plan.target, list(plan.sources))
    if hint and any(p.name == "torch" for p in packages):
        notes.append(hint)
    text = render_lock(_header(plan, version, unreachable), plan.facts(), body)
    changed = previous != text
    return LockResult(plan, tuple(packages), unreachable, text, changed, tuple(notes))


def _attach_files(plan: LockPlan, packages: list[LockedPackage], files: dict[str, dict[str, str]]) -> list[str]:
    """Name each package's file and keep only the hashes of files that install on the target.

    uv may list a hash for every wheel of a version (all Pythons and CPUs of a small index); orch checks
    each file's tags itself with packaging.tags and keeps the target's, so the lock says what installs.
    """
    notes: list[str] = []
    for package in packages:
        known = files.get(package.name, {})
        wheels = [(sha, known[sha]) for sha in package.hashes if known.get(sha, "").endswith(".whl")]
        fitting = [(sha, name) for sha, name in wheels if plan.target.wheel_fits(name)]
        if wheels and not fitting:
            raise LockFailed(
                f"{package.requirement}: no file uv found installs on {plan.target.describe()} (first: {wheels[0][1]})",
                hint="Pin a version that ships a wheel for the target, or choose another base image (orch tables).",
            )
        if fitting:
            # A hash uv's pylock does not list belongs to a file it did not pick for the target: dropped.
            package.hashes = [sha for sha, _ in fitting]
            package.wheel = fitting[0][1]
        elif known:
            names = [known[sha] for sha in package.hashes if sha in known]
            package.wheel = names[0] if names else None
            notes.append(f"{package.requirement} has no wheel for the target: its sdist is built at install")
    return notes


def _check_body(plan: LockPlan, body: str) -> None:
    """The result must be a lock orch's loader accepts and fit the dossier's coherence tables."""
    try:
        lock = parse_lock(body)
    except LockError as exc:
        raise LockFailed(f"uv's result is not a lock orch can read (line {exc.line}): {exc}") from None
    problem = check_torch(plan.model.system, plan.model.python, lock)
    if problem is not None:
        raise LockFailed(
            f"the lock computed from {plan.input.shown} does not fit the dossier ({problem.field}): {problem.message}",
            hint=f"Pin the torch build in {plan.input.shown}; {torch_choices(plan.target)}.",
        )


def write_lock(result: LockResult) -> None:
    atomic_write_text(result.plan.lock_path, result.text)


def check_lock(plan: LockPlan) -> list[str]:
    """What no longer matches between the lock on disk and its inputs (empty: current). Offline."""
    path = plan.lock_path
    if not path.is_file():
        return [f"{path} does not exist: run orch lock"]
    stamp = read_stamp(path.read_text(encoding="utf-8"))
    if stamp is None:
        return [f"{path} was not written by orch lock (no '# orch-lock:' header): run orch lock to compute it"]
    facts, body = stamp
    differences: list[str] = []
    labels = {
        "input": "the input file",
        "input_sha256": f"the content of {plan.input.shown}",
        "target": "the target (Python, platform tag, backend)",
        "sources": "the sources (indexes, find-links)",
    }
    for key, value in plan.facts().items():
        if facts.get(key) != value:
            differences.append(f"{labels[key]} changed: the lock has {facts.get(key)!r}, now {value!r}")
    if facts.get("body") != body_digest(body):
        differences.append("the package lines were edited by hand since orch lock wrote them")
    try:
        lock = parse_lock(body)
    except LockError as exc:
        return [*differences, f"line {exc.line}: {exc}"]
    for requirement in plan.input.requirements:
        pinned = lock.get(requirement.name)
        if pinned is None:
            differences.append(f"{requirement.name} is in {plan.input.shown} but not in the lock")
        elif not requirement.specifier.contains(pinned.version, prereleases=True):
            differences.append(f"{requirement} is not satisfied by the lock's {pinned.text}")
    return differences


def raise_if_stale(plan: LockPlan) -> None:
    differences = check_lock(plan)
    if differences:
        raise LockStale(
            f"{plan.lock_path.name} no longer matches its inputs: " + "; ".join(differences),
            hint=f"Run `orch lock {plan.dossier}` and commit the result.",
        )
