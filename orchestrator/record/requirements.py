"""The draft's requirements.in (issue 24): the reference's top-level distributions, at the versions it ran.

A full freeze pinned in requirements.in (47 exact pins, pip included) made every intended change fail to
resolve ("torch==2.6.0 depends on sympy==1.13.1"). Only the distributions the user asked for, and those nothing
else installed requires, are pinned here; `orch lock`'s first lock prefers the reference inventory's versions for
the rest (lock/compute.py `reference_preferences`), so it still reproduces the reference on the same target.
"""

from __future__ import annotations

from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name


def _required_names(item: dict[str, Any]) -> set[str]:
    """The distributions one installed distribution requires (its Requires-Dist, any marker)."""
    found: set[str] = set()
    for text in item.get("requires_dist") or []:
        try:
            found.add(canonicalize_name(Requirement(str(text)).name))
        except InvalidRequirement:
            continue
    return found


def top_level_requirements(document: dict[str, Any], notes: list[str]) -> list[str]:
    """The reference's top-level distributions — those the user asked for, and those nothing else installed
    requires (pip, setuptools) — pinned at the versions the reference ran. The rest are not pinned here: the
    first `orch lock` prefers the reference inventory's versions for them (record/pip-freeze.txt), so the lock
    reproduces the reference on the same target, yet another torch or another platform still resolves. Those
    installed from a direct URL or a local folder cannot be locked and are named."""
    installed = ((document.get("pip") or {}).get("inspect") or {}).get("installed") or []
    required = set().union(*(_required_names(item) for item in installed)) if installed else set()
    lines: list[str] = []
    for item in installed:
        name, version = item.get("name"), item.get("version")
        if not name or not version:
            continue
        if item.get("direct_url"):
            notes.append(
                f"{name} {version} was installed from a direct URL or a local folder: it is left out of "
                "requirements.in; publish it to an index (or a wheel folder) and add it there"
            )
            continue
        top = item.get("requested") or canonicalize_name(name) not in required
        if top:
            lines.append(f"{canonicalize_name(name)}=={version}")
    return sorted(lines)
