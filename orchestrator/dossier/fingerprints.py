"""The dossier's fingerprints: which fields declare a sha256, how a mismatch is told, how much there is to hash.

`load` checks them (`orch validate`, and before a probe); the sample stage and the hand-over name a
mismatch the same way, with both hashes in full and where they first differ.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.dossier.models import Dossier
from orchestrator.dossier.paths import TreeFile


@dataclass(frozen=True)
class DeclaredFingerprint:
    field: str  # where the sha256 is written, e.g. 'weights[0].sha256'
    expected: str


def declared_fingerprints(model: Dossier) -> dict[str, list[DeclaredFingerprint]]:
    """Every local file whose sha256 the dossier declares: path → the fields that declare it."""
    found: dict[str, list[DeclaredFingerprint]] = {}

    def add(relative: str | None, field_name: str, expected: str | None) -> None:
        if relative is not None and expected is not None:
            found.setdefault(relative, []).append(DeclaredFingerprint(field_name, expected))

    for section, artifacts in (("data", model.data), ("weights", model.weights)):
        for index, artifact in enumerate(artifacts):
            add(artifact.path, f"{section}[{index}].sha256", artifact.sha256)
    for index, sample_input in enumerate(model.expect.inputs):
        add(sample_input.path, f"expect.inputs[{index}].sha256", sample_input.sha256)
    for index, output in enumerate(model.expect.outputs):
        if output.compare is not None:
            add(output.compare.reference, f"expect.outputs[{index}].compare.sha256", output.compare.sha256)
    for index, variant in enumerate(model.variants):
        for name, comparison in variant.compare.items():
            add(comparison.reference, f"variants[{index}].compare.{name}.sha256", comparison.sha256)
    return found


def fingerprint_mismatch(relative: str, expected: str, observed: str) -> str:
    """Both hashes in full and where they first differ: two hashes cut short can look identical."""
    return f"sha256 of {relative!r} does not match: declared {expected}, the file has {observed} ({where_differ(expected, observed)})"


#: What to do about a fingerprint that no longer matches, whether the change was intended or not.
FINGERPRINT_NEXT_STEP = (
    "If the file changed on purpose, write the new sha256 (the file's, above) into that field, or record the "
    "reference again with `orch record` so that its outputs match the new file; if it did not, restore the file "
    "the reference used."
)


def where_differ(expected: str, observed: str) -> str:
    first = next((i for i, (a, b) in enumerate(zip(expected, observed, strict=False)) if a != b), None)
    if first is None:
        return "same prefix, different length" if len(expected) != len(observed) else "identical"
    return f"they differ from character {first + 1}"


def total_bytes(located: list[tuple[str, str, Path, list[TreeFile] | None]]) -> int:
    seen: set[str] = set()
    total = 0
    for _, relative, target, tree in located:
        if relative in seen:
            continue
        seen.add(relative)
        paths = [entry.real for entry in tree] if tree is not None else [target]
        total += sum(os.stat(path).st_size for path in paths)
    return total
