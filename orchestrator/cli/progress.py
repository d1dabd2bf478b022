"""Progress on the long steps: a bar over the Dockerfile's steps while an image builds, a spinner for
the other stages, a byte bar while large referenced files are hashed. Rich renders it only on a
terminal; in logs and CI the step lines print as they come."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from orchestrator.engine.build_log import STEP_LINE


@dataclass
class StageProgress:
    progress: Progress
    task: TaskID
    name: str
    verbose: bool = False

    def stage(self, stage: str) -> None:
        self.progress.update(self.task, description=f"{self.name}: {stage}")

    def line(self, line: str) -> None:
        match = STEP_LINE.match(line)
        if match:
            number, total, instruction = int(match["number"]), int(match["total"]), match["instruction"]
            self.progress.update(
                self.task, total=total, completed=number - 1, description=f"{self.name}: {instruction[:60]}"
            )
            if not self.progress.console.is_terminal:
                self.progress.console.print(f"  {short_step(line)}", markup=False, highlight=False)
        elif self.verbose:
            self.progress.console.print(f"  {line}", markup=False, highlight=False)


#: The longest build step shown on the console; the build log (build.log) keeps each in full.
STEP_WIDTH = 160
_MOUNT = re.compile(r"--mount=\S+\s*")


def short_step(line: str) -> str:
    """A build step as the console shows it: its `--mount=` options counted, not spelled out (a wheel feed's
    RUN line runs to hundreds of characters), and cut at STEP_WIDTH; build.log has it in full."""
    mounts = len(_MOUNT.findall(line))
    shown = " ".join(_MOUNT.sub("", line).split())
    if mounts:
        shown = shown.replace(" RUN ", f" RUN [{mounts} mounts] ", 1)
    return shown if len(shown) <= STEP_WIDTH else shown[: STEP_WIDTH - 1] + "…"


@contextmanager
def stage_progress(console: Console, name: str, *, verbose: bool = False) -> Iterator[StageProgress]:
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with progress:
        task = progress.add_task(name, total=None)
        yield StageProgress(progress, task, name, verbose)


#: Below this many bytes hashing takes well under a second (~1 GB/s): a bar would only flicker.
HASH_BAR_BYTES = 256 * 1024 * 1024


class HashProgress:
    """A byte bar over hashing the dossier's files, shown only when there is enough to hash.

    `total` is called once with the bytes to come, `advance` with each chunk hashed (see load_dossier).
    """

    def __init__(self, console: Console, label: str, threshold: int) -> None:
        self.console = console
        self.label = label
        self.threshold = threshold
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def total(self, size: int) -> None:
        if size < self.threshold or self.progress is not None:
            return
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self.progress.start()
        self.task = self.progress.add_task(self.label, total=size)

    def advance(self, size: int) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task, size)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


@contextmanager
def hash_progress(console: Console, label: str, *, threshold: int | None = None) -> Iterator[HashProgress]:
    bar = HashProgress(console, label, HASH_BAR_BYTES if threshold is None else threshold)
    try:
        yield bar
    finally:
        bar.stop()


@contextmanager
def download_progress(console: Console) -> Iterator[Callable[[str], Callable[[int, int | None], None]]]:
    """A byte bar per remote item as it downloads (`orch fetch`, `validate --fetch`); `open(label)` gives the
    item's callback. Transient: what stays on the console is the per-item line the command prints after."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )

    def open_item(label: str) -> Callable[[int, int | None], None]:
        task = progress.add_task(label, total=None)

        def advance(done: int, total: int | None) -> None:
            progress.update(task, completed=done, total=total)

        return advance

    with progress:
        yield open_item
