"""Progress on the long steps: a bar over the Dockerfile's steps while an image builds, a spinner for
the other stages. Rich renders it only on a terminal; in logs and CI the step lines print as they come."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


@dataclass
class StageProgress:
    progress: Progress
    task: TaskID
    name: str
    verbose: bool = False

    def stage(self, stage: str) -> None:
        self.progress.update(self.task, description=f"{self.name}: {stage}")

    def line(self, line: str) -> None:
        match = _STEP.match(line)
        if match:
            number, total, instruction = int(match.group(1)), int(match.group(2)), match.group(3)
            self.progress.update(
                self.task, total=total, completed=number - 1, description=f"{self.name}: {instruction[:60]}"
            )
            if not self.progress.console.is_terminal:
                self.progress.console.print(f"  {line}", markup=False, highlight=False)
        elif self.verbose:
            self.progress.console.print(f"  {line}", markup=False, highlight=False)


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
