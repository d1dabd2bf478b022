"""Reading the output of a build and of pip: cached steps, the failed step and its first error, a pin that
does not exist, an image removed under a build. Pure: the engine adapter only hands the log over."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.dossier.lock import Lock
from orchestrator.errors import BadInput
from orchestrator.model.build_record import BuildFailure, CacheStats
from orchestrator.redact import redact

#: The classic builder's step header, `Step 3/9 : RUN pip install …`: the one reading of it (this module,
#: the live progress bar).
STEP_LINE = re.compile(r"^Step (?P<number>\d+)/(?P<total>\d+) : (?P<instruction>.*)$")
#: Lines of the failed step read for its first error: the last ones (a RUN step's output is the installed
#: packages' code, and pip and apt print their errors at the end), each cut to `STEP_LINE_CHARS`.
STEP_LINES_KEPT = 2000
STEP_LINE_CHARS = 2000
# Lines that carry the cause of a failed RUN step, as pip, apt, git and Python print them (for a Python
# traceback, its last line: the exception, not "Traceback (most recent call last):").
_ERROR_LINE = re.compile(r"^(ERROR:|E: |error:|Error:|fatal:|\S+(Error|Exception): )")
# Error-looking lines that only give context; pip prints these before the real error.
_CONTEXT_ONLY = ("ERROR: Ignored the following versions", "ERROR: Ignored the following yanked versions")
# pip's resolver explains a ResolutionImpossible in indented blocks under these headings (pip 23 to 26,
# src/pip/_internal/resolution/resolvelib/factory.py): without them "Cannot install … conflicting
# dependencies" names no culprit.
_CONFLICT_HEAD = "The conflict is caused by:"
_NO_DISTRIBUTION_HEAD = "Additionally, some packages in these conflicts have no matching distributions available"
# pip's words for a requirement no index or find-links folder can satisfy, with the versions it did see.
_NOT_FOUND = re.compile(
    r"Could not find a version that satisfies the requirement (?P<req>\S+) \(from versions: (?P<versions>[^)]*)\)"
)
_REQUESTED = re.compile(r"^The user requested (?P<req>[A-Za-z0-9._-]+(?:\[[^\]]*\])?==\S+)$")
# An image that vanished under a running build or probe: another user's `docker rmi` or prune on a shared engine.
_REMOVED_IMAGE = re.compile(r"No such image: sha256:[0-9a-f]{12,}|unknown parent image ID", re.IGNORECASE)


def cache_stats(log: str) -> CacheStats:
    """Every non-FROM step is either cached (`---> Using cache`) or rebuilt; FROM steps only select a base.

    A step is its header (`Step N/M : instruction`): BuildKit's log (engine/buildkit_trace.py) repeats a
    header when the output of two stages' steps interleaves, and a repeated header is the same step.
    """
    steps: dict[str, tuple[str, bool]] = {}
    last: str | None = None
    for line in log.splitlines():
        match = STEP_LINE.match(line)
        if match:
            last = line
            steps.setdefault(line, (match.group("instruction"), False))
        elif line.strip() == "---> Using cache" and last is not None:
            steps[last] = (steps[last][0], True)
    buildable = [
        (instruction, cached) for instruction, cached in steps.values() if not instruction.upper().startswith("FROM ")
    ]
    return CacheStats(
        steps=len(buildable),
        cached=sum(1 for _, cached in buildable if cached),
        rebuilt=[instruction for instruction, cached in buildable if not cached],
    )


def _block(lines: Sequence[str], heading: str) -> list[str]:
    """The indented lines right under `heading` (pip indents each item by four spaces)."""
    items: list[str] = []
    inside = False
    for line in lines:
        if not inside:
            inside = line.strip().startswith(heading)
            continue
        if line.startswith((" ", "\t")) and line.strip():
            items.append(line.strip())
        elif items or line.strip():
            break
    return items


def first_error(step_lines: Sequence[str]) -> str | None:
    """The first line of a failed step that says why, on one line, redacted.

    When pip's resolver gave up, its explanation (what requested what) is appended: the first line alone
    ("Cannot install … because these package versions have conflicting dependencies") names no culprit.
    """
    first = next(
        (
            line.strip()
            for line in step_lines
            if _ERROR_LINE.match(line.strip()) and not line.strip().startswith(_CONTEXT_ONLY)
        ),
        None,
    )
    if first is None:
        return None
    causes = _block(step_lines, _CONFLICT_HEAD)
    if causes:
        first += f" {_CONFLICT_HEAD} {'; '.join(causes)}."
    unavailable = _block(step_lines, _NO_DISTRIBUTION_HEAD)
    if unavailable:
        first += f" pip found no matching distribution for this platform: {', '.join(unavailable)}."
    return redact(first)


@dataclass(frozen=True)
class MissingPin:
    """A pinned requirement no index offered; `available` lists the versions pip did see (may be empty)."""

    requirement: str
    available: tuple[str, ...]


def missing_pin(output: str) -> MissingPin | None:
    """The pin pip could not find anywhere, when its output proves the pin (not the network) is wrong.

    Two wordings: "Could not find a version … (from versions: A, B)" — the pin is wrong when pip saw other
    versions; "(from versions: none)" proves nothing (an unreachable index says the same), so it is not
    read as a wrong pin. With a pip constraint on the same package, pip reports a conflict instead and lists
    the package under "no matching distributions available": the user's `==` pin is the missing one.
    """
    for match in _NOT_FOUND.finditer(output):
        versions = tuple(v.strip() for v in match.group("versions").split(",") if v.strip() and v.strip() != "none")
        if versions:
            return MissingPin(requirement=match.group("req"), available=versions)
    lines = output.splitlines()
    unavailable = {name.lower() for name in _block(lines, _NO_DISTRIBUTION_HEAD)}
    for cause in _block(lines, _CONFLICT_HEAD):
        requested = _REQUESTED.match(cause)
        if requested and requested.group("req").split("==")[0].split("[")[0].lower() in unavailable:
            return MissingPin(requirement=requested.group("req"), available=())
    return None


def pin_not_found(lock: Lock, lock_file: str | None, missing: MissingPin, where: str) -> BadInput:
    """A lock line pins a version that no index offers: the lock is wrong, so it is bad input (exit 2)."""
    name = missing.requirement.split("==", 1)[0].split("[", 1)[0]
    locked = lock.get(name)
    place = f"{lock_file or 'the lock'}:{locked.line}" if locked is not None else lock_file or "the lock"
    shown = missing.available[-8:]  # pip lists oldest first: the newest are the likely fix
    older = f"{len(missing.available) - len(shown)} older, " if len(missing.available) > len(shown) else ""
    seen = f"versions offered: {older}{', '.join(shown)}" if missing.available else "no version of it fits"
    return BadInput(
        f"{place}: {missing.requirement} does not exist on {where} ({seen})",
        hint=f"Pin a version that exists in {lock_file or 'the lock'} (and its hashes), or add the index or "
        "find-links folder that carries it to the dossier's python section.",
    )


def build_failure(log: str, engine_error: str | None) -> BuildFailure:
    """Why a build failed, from its log: the step that ran last and the first line of its output that
    says why (pip, apt, git, Python); else the engine's own error, explained when an image vanished."""
    step: str | None = None
    step_lines: deque[str] = deque(maxlen=STEP_LINES_KEPT)
    # The adapter ends a failed build's log with the engine's error (which may span lines); it is the
    # fallback, not the step's output.
    marker = f"ERROR: {engine_error}\n" if engine_error is not None else None
    if marker is not None and marker in log:
        log = log[: log.rindex(marker)]
    for line in log.splitlines():
        match = STEP_LINE.match(line)
        if match:
            step, step_lines = match.group("instruction"), deque(maxlen=STEP_LINES_KEPT)
        else:
            step_lines.append(line[:STEP_LINE_CHARS])
    fallback = explain_removed_image(engine_error) if engine_error else "the build failed"
    return BuildFailure(step=step, first_error=first_error(step_lines) or fallback)


def explain_removed_image(error: str) -> str:
    """An engine error, with what happened when the image vanished under orch: someone else removed it."""
    if not _REMOVED_IMAGE.search(error):
        return error
    return (
        f"{error} — an image this run used was removed by another user or process (docker rmi or a prune on "
        "the shared engine) while it ran; nothing is wrong with the dossier: run the build again"
    )
