"""The image section's checks: does the built image contain what the dossier says it should? Pure."""

from __future__ import annotations

from packaging.utils import canonicalize_name

from orchestrator.checks.cuda_archs import expected_archs
from orchestrator.dossier.load import LoadedDossier
from orchestrator.model.checks import Check
from orchestrator.model.inventory import BuiltExtension, Inventory, InventoryDiff, parse_freeze
from orchestrator.versions import same_version


def reference_inventory_warning(loaded: LoadedDossier) -> str | None:
    """The seed compares the rebuilt inventory with the reference's before anything else; without one, say so.

    Not a failed check: the lock is still checked exactly, and dossiers written before this rule keep
    passing. But a lock with other, consistent versions passes the lock check too, so the reader is told.
    """
    if loaded.model.python.reference_inventory is not None:
        return None
    return (
        "no reference inventory: python.reference_inventory is not set, so the rebuilt packages were not compared "
        "with the reference environment's, only with the lock (a lock with other versions would pass). "
        "Record the reference's `pip freeze --all` and set python.reference_inventory."
    )


def image_checks(loaded: LoadedDossier, inventory: Inventory, diff: InventoryDiff | None) -> list[Check]:
    model = loaded.model
    checks: list[Check] = []

    python_ok = inventory.python_version.startswith(model.python.version + ".")
    checks.append(
        Check(name="python version", expected=model.python.version, observed=inventory.python_version, passed=python_ok)
    )

    installed = parse_freeze(inventory.pip_freeze)
    wrong: list[str] = []
    for requirement in loaded.lock.requirements:
        if requirement.marker is not None:
            continue  # platform-specific lines: pip decided, the freeze shows what applied
        found = installed.get(canonicalize_name(requirement.name))
        if found is None or not same_version(found, str(requirement.version)):
            wrong.append(f"{requirement.text} (installed: {found or 'missing'})")
    checks.append(
        Check(
            name="lock installed exactly",
            expected=f"{len(loaded.lock.requirements)} pins from {model.python.requirements}",
            observed="all installed at the pinned version" if not wrong else f"{len(wrong)} differ",
            passed=not wrong,
            detail="; ".join(wrong)
            + (". The image was built from another lock: build it again (orch build)" if wrong else "")
            or None,
        )
    )

    checks.append(
        Check(
            name="pip check",
            expected="no broken requirements",
            observed="clean" if inventory.pip_check.ok else f"{len(inventory.pip_check.lines)} problem(s)",
            passed=inventory.pip_check.ok,
            detail="; ".join(inventory.pip_check.lines) or None,
        )
    )

    torch = loaded.lock.get("torch")
    if torch is not None:
        backend = inventory.backend
        platform = model.system.platform
        if platform == "cpu":
            expected, ok = (
                "a CPU build (torch.version.cuda and .hip both None)",
                backend.torch_cuda is None and backend.torch_hip is None,
            )
        elif platform == "cuda":
            expected = f"a CUDA {model.system.version} build"
            ok = (
                backend.torch_cuda is not None
                and backend.torch_hip is None
                and backend.torch_cuda.startswith(str(model.system.version))
            )
        else:
            expected = f"a ROCm {model.system.version} build"
            ok = (
                backend.torch_hip is not None
                and backend.torch_cuda is None
                and backend.torch_hip.startswith(str(model.system.version))
            )
        observed = f"torch {backend.torch}, cuda={backend.torch_cuda}, hip={backend.torch_hip}"
        checks.append(Check(name="torch build matches platform", expected=expected, observed=observed, passed=ok))

    if diff is not None:
        summary = f"{len(diff.added)} added, {len(diff.removed)} removed, {len(diff.changed)} changed"
        details = [*(f"+{p}" for p in diff.added), *(f"-{p}" for p in diff.removed)]
        details += [f"{c.name} {c.reference} → {c.observed}" for c in diff.changed]
        details += [f"{note} (the venv's installer, not locked: not compared)" for note in diff.installer]
        if not diff.identical:
            details.append(
                "if the difference is intended (a lock changed on purpose), the reference inventory no longer "
                f"describes what this rebuild should hold: record the reference again (orch record), or replace "
                f"{diff.reference_file} with the new reference environment's `pip freeze --all`"
            )
        checks.append(
            Check(
                name="inventory matches the reference",
                expected=f"the packages of {diff.reference_file}",
                observed=f"identical: {summary}" if diff.identical else summary,
                passed=diff.identical,
                detail="; ".join(details) or None,
            )
        )

    checks += extension_checks(loaded, inventory)

    if inventory.errors:
        checks.append(
            Check(
                name="inventory probe complete",
                expected="every probe step reported",
                observed=f"{len(inventory.errors)} step(s) failed",
                passed=False,
                detail="; ".join(inventory.errors),
            )
        )
    return checks


def extension_checks(loaded: LoadedDossier, inventory: Inventory) -> list[Check]:
    """One line per compiled extension: its artefact is in the image, byte for byte what the builder made."""
    build = loaded.model.build
    if build is None:
        return []
    found = {artefact.name: artefact for artefact in (inventory.extensions.artefacts if inventory.extensions else [])}
    checks: list[Check] = []
    for extension in build.extensions:
        artefact = found.get(extension.name)
        name = f"extension {extension.name} in the image"
        if artefact is None:
            checks.append(
                Check(name=name, expected="built and recorded", observed="no record in the image", passed=False)
            )
            continue
        intact = artefact.sha256 == artefact.recorded_sha256
        observed = "missing" if artefact.sha256 is None else f"sha256 {artefact.sha256}"
        checks.append(
            Check(
                name=name,
                expected=f"{artefact.file}, sha256 {artefact.recorded_sha256}",
                observed=observed if not intact else f"{artefact.file}, sha256 {artefact.sha256}",
                passed=intact,
                detail="; ".join(artefact.compilers) or None,
            )
        )
        if extension.language == "cuda" and artefact.sha256 is not None:  # a missing object fails the line above
            checks.append(_arch_line(extension.name, build.cuda_archs, artefact))
    return checks


def _arch_line(name: str, cuda_archs: list[str], artefact: BuiltExtension) -> Check:
    """The GPU code in the object (its .nv_fatbin, read in the image) is what the dossier's arch list asks."""
    expected = expected_archs(cuda_archs)
    observed = artefact.compiled_archs
    return Check(
        name=f"extension {name} compiled for the dossier's GPU archs",
        expected=f"{', '.join(expected)} (build.cuda_archs {';'.join(cuda_archs)})",
        observed=", ".join(observed) if observed else (artefact.fatbin_error or "no GPU code in the object"),
        passed=sorted(observed) == sorted(expected),
    )
