"""The history folder: one folder per night, its state file, the `latest` pointer, retention.

Layout (docs/nightly.md, "History"):

    <history>/nights/<date>[.N]/night.json        the night's state, rewritten atomically per cell
    <history>/nights/<date>[.N]/<cell_id>/        build.json, report.*, logs (written by the target)
                                       outcome.json  the cell's outcome (written by the runner)
    <history>/nights/<date>[.N]/summary.{json,md,html} + junit.xml
    <history>/latest -> nights/<date>[.N]         a symlink, replaced atomically when a night ends

Rules: a night's folder is created with `mkdir` (never reused): a second run on the same date gets
`<date>.2`, `<date>.3`… so one night never overwrites another. `night.json` says `running` while a
runner holds the night's lock, `complete` once the summary is written, `incomplete` after Ctrl-C or a
failure; a `running` night whose lock is free (its runner was killed) reads as `incomplete`.
Retention removes whole nights only — first renamed out of the `nights/` listing, then deleted — and
never the current night, the night `latest` points to, or a night holding a file named `KEEP`.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.errors import NightBusy
from orchestrator.fsutil import atomic_write_text
from orchestrator.nightly.cell import CellOutcome

NIGHT_FORMAT = "orch.night/1"
NIGHTS = "nights"
LATEST = "latest"
STATE_FILE = "night.json"
LOCK_FILE = ".night.lock"
OUTCOME_FILE = "outcome.json"
KEEP_FILE = "KEEP"
_NIGHT_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:\.(\d+))?$")

NightStatus = Literal["running", "complete", "incomplete"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CellState(_Frozen):
    cell_id: str
    dossier: str  # the dossier file, absolute
    dossier_name: str
    variant: str | None
    target: str
    reference_run: str | None = None
    state: Literal["pending", "running", "done"]
    outcome: CellOutcome | None = None


class PublishState(_Frozen):
    status: Literal["passed", "failed", "skipped"]
    detail: str


class NightState(_Frozen):
    format: Literal["orch.night/1"] = "orch.night/1"
    night: str
    date: str
    plan: str
    started: str
    finished: str | None = None
    status: NightStatus
    #: Why a night is incomplete (interrupted, a crash's one line), for the morning's reader.
    reason: str | None = None
    cells: tuple[CellState, ...]
    publish: PublishState | None = None

    def cell(self, cell_id: str) -> CellState | None:
        return next((cell for cell in self.cells if cell.cell_id == cell_id), None)


def nights_dir(history: Path) -> Path:
    return history / NIGHTS


def night_sort_key(name: str) -> tuple[str, int]:
    match = _NIGHT_NAME.match(name)
    return (match.group(1), int(match.group(2) or 1)) if match else ("", 0)


def list_nights(history: Path) -> list[Path]:
    """Every night folder (holding a night.json), oldest first: by date, then by its `.N`."""
    root = nights_dir(history)
    if not root.is_dir():
        return []
    found = [
        entry
        for entry in root.iterdir()
        if _NIGHT_NAME.match(entry.name)
        and entry.is_dir()
        and not entry.is_symlink()
        and (entry / STATE_FILE).is_file()
    ]
    return sorted(found, key=lambda entry: night_sort_key(entry.name))


def read_state(night_dir: Path) -> NightState:
    file = night_dir / STATE_FILE
    try:
        return NightState.model_validate_json(file.read_text(encoding="utf-8"))
    except (OSError, ValidationError, ValueError) as exc:
        raise NightBusy(f"{file}: not a readable night state ({type(exc).__name__}); is this a night folder?") from None


def write_state(night_dir: Path, state: NightState) -> None:
    atomic_write_text(night_dir / STATE_FILE, state.model_dump_json(indent=2) + "\n")


def create_night_dir(history: Path, date: str) -> Path:
    """A new, empty folder for tonight: `<date>`, else `<date>.2`, `.3`… (`mkdir` is the claim: never reused)."""
    root = nights_dir(history)
    root.mkdir(parents=True, exist_ok=True)
    for seq in range(1, 1000):
        candidate = root / (date if seq == 1 else f"{date}.{seq}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise NightBusy(f"{root}: a thousand nights on {date} already; remove some")


@contextmanager
def night_lock(night_dir: Path) -> Iterator[None]:
    """Hold the night's lock (flock) while writing it; a second runner on the same night is refused."""
    handle = open(night_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held for the whole block
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise NightBusy(f"{night_dir}: another `orch nightly run` is writing this night; let it finish") from None
        yield
    finally:
        handle.close()


def is_locked(night_dir: Path) -> bool:
    lock = night_dir / LOCK_FILE
    if not lock.exists():
        return False
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    return False


def effective_status(night_dir: Path, state: NightState) -> NightStatus:
    """`running` only while a runner holds the lock; a killed runner's night is `incomplete`."""
    if state.status == "running" and not is_locked(night_dir):
        return "incomplete"
    return state.status


def night_to_resume(history: Path) -> Path:
    """The newest night that did not complete; `NightBusy` when there is none or it is being written."""
    for night in reversed(list_nights(history)):
        state = read_state(night)
        status = effective_status(night, state)
        if status == "complete":
            break
        if status == "running":
            raise NightBusy(f"{night}: another `orch nightly run` is writing this night; let it finish")
        return night
    raise NightBusy(
        f"{nights_dir(history)}: no incomplete night to resume (the newest one completed); run without --resume"
    )


def point_latest(history: Path, night_dir: Path) -> None:
    """`<history>/latest` → `nights/<name>`, replaced atomically (a reader sees the old or the new night)."""
    link = history / LATEST
    temporary = history / f".{LATEST}.{os.getpid()}.{threading.get_ident()}"
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(Path(NIGHTS) / night_dir.name)
    os.replace(temporary, link)


def latest_night(history: Path) -> Path | None:
    link = history / LATEST
    if not link.is_symlink():
        return None
    target = (history / os.readlink(link)).resolve()
    return target if target.parent == nights_dir(history).resolve() and target.is_dir() else None


def previous_nights(history: Path, current: Path) -> list[Path]:
    """The nights before `current`, newest first."""
    key = night_sort_key(current.name)
    return [night for night in reversed(list_nights(history)) if night_sort_key(night.name) < key]


def apply_retention(history: Path, keep: int, current: Path, protected: set[Path] | None = None) -> list[str]:
    """Remove whole nights beyond the newest `keep`; never `current`, `latest`, a `KEEP` night or `protected`.

    Returns the names removed. Each night is renamed out of `nights/` first (so a reader never lists a
    half-deleted night), then deleted.
    """
    spared = {current.resolve(), *(path.resolve() for path in protected or set())}
    latest = latest_night(history)
    if latest is not None:
        spared.add(latest)
    nights = list_nights(history)
    removed: list[str] = []
    for night in nights[: max(0, len(nights) - keep)]:
        if night.resolve() in spared or (night / KEEP_FILE).exists() or is_locked(night):
            continue
        doomed = history / f".removing-{night.name}"
        os.replace(night, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(night.name)
    return removed


def write_outcome(cell_dir: Path, outcome: CellOutcome) -> None:
    cell_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cell_dir / OUTCOME_FILE, outcome.model_dump_json(indent=2) + "\n")


def clear_unfinished(cell_dir: Path, night_dir: Path) -> None:
    """An unfinished cell's folder, removed before it runs again (a resumed night never mixes two attempts)."""
    if cell_dir.is_dir() and not cell_dir.is_symlink() and cell_dir.parent == night_dir:
        doomed = night_dir / f".retry-{cell_dir.name}"
        shutil.rmtree(doomed, ignore_errors=True)
        os.replace(cell_dir, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
