"""`orch nightly`: one bounded night of a plan (dossiers by targets), and its summary re-rendered."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from orchestrator.nightly.cell import Target
    from orchestrator.nightly.plan import LoadedPlan

#: `module:function` of a stand-in target factory (TargetSpec → Target), for tests and demos on a machine
#: without the real targets; unset, orch's own (`orchestrator.nightly.targets.target_from_spec`).
FACTORY_ENV = "ORCH_NIGHTLY_TARGET_FACTORY"


def _target_factory() -> Callable[[Any], Target]:
    from orchestrator.errors import BadInput, EnvironmentFailure

    named = os.environ.get(FACTORY_ENV)
    if named:
        module_name, _, attribute = named.partition(":")
        try:
            factory: Callable[[Any], Target] = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError, ValueError) as exc:
            raise BadInput(f"{FACTORY_ENV}={named}: not an importable `module:function` ({exc})") from None
        return factory
    try:
        module = importlib.import_module("orchestrator.nightly.targets")
    except ImportError:
        raise EnvironmentFailure(
            "this orch has no nightly targets (orchestrator.nightly.targets)",
            hint=f"Install an orch with them, or name a stand-in factory in {FACTORY_ENV}.",
        ) from None
    found: Callable[[Any], Target] = module.target_from_spec
    return found


def _targets(plan: LoadedPlan) -> dict[str, Target]:
    factory = _target_factory()
    return {spec.name: factory(spec) for spec in plan.model.targets}


@click.group()
def nightly() -> None:
    """Nightly rebuilds: a plan of dossiers by targets, history, drift and one summary page."""


@nightly.command("run")
@click.argument("plan_file", metavar="PLAN", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--resume", is_flag=True, help="Continue the newest incomplete night (its finished cells are kept).")
@click.option("--dry-run", is_flag=True, help="Print the cells and where each would go; run nothing.")
def run(plan_file: Path, resume: bool, dry_run: bool) -> None:
    """Run one night of PLAN: every cell rebuilt on its target, then history, drift and the summary.

    Exit 0 when every cell passed, 1 when a cell failed (a verdict, a timeout, a crash), 3 when only the
    environment failed (an endpoint down, a job cancelled), 2 on a bad plan, 130 when interrupted (the
    night stays incomplete: `--resume` continues it).
    """
    from orchestrator.nightly.plan import load_plan

    plan = load_plan(plan_file)
    if dry_run:
        from orchestrator.nightly.runner import describe_cells

        for line in describe_cells(plan):
            click.echo(line)
        return
    from orchestrator.nightly.runner import run_night

    targets = _targets(plan)
    result = run_night(plan, targets, resume=resume, on_event=lambda line: click.echo(line, err=True))
    counts = ", ".join(f"{count} {status}" for status, count in _counts(result.state).items())
    click.echo(f"night {result.night_dir}: {counts}")
    click.echo(f"summary: {result.night_dir / 'summary.html'}")
    for name in result.removed_nights:
        click.echo(f"retention: removed night {name}")
    if result.exit_code:
        from orchestrator.errors import EXIT_ENVIRONMENT, EnvironmentFailure, VerdictFailed

        failed = [
            cell.cell_id for cell in result.state.cells if cell.outcome is None or cell.outcome.status != "passed"
        ]
        message = (
            f"night {result.night_dir.name}: {len(failed)} of {len(result.state.cells)} cells did not pass ({failed[0]}"
        )
        message += f" and {len(failed) - 1} more)" if len(failed) > 1 else ")"
        hint = f"Read {result.night_dir / 'summary.md'} (or summary.html)."
        if result.exit_code == EXIT_ENVIRONMENT:
            raise EnvironmentFailure(message + "; only the environment failed", hint=hint)
        raise VerdictFailed(message, hint=hint)


def _counts(state: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for cell in state.cells:
        status = cell.outcome.status if cell.outcome is not None else "not run"
        counts[status] = counts.get(status, 0) + 1
    return counts


@nightly.command("summary")
@click.argument("night_dir", metavar="NIGHT_DIR", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option(
    "--trend-nights", default=14, show_default=True, type=click.IntRange(2, 365), help="Nights per trend plot."
)
def summary(night_dir: Path, trend_nights: int) -> None:
    """Render the summary of NIGHT_DIR again (summary.json/.md/.html, junit.xml) from its files."""
    from orchestrator.nightly.summary import resummarise

    for path in resummarise(night_dir.absolute(), trend_nights).values():
        click.echo(str(path))


@nightly.command("schema")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=None, help="Write to FILE.")
def schema(out: Path | None) -> None:
    """Print the plan file's JSON Schema (docs/nightly-plan-schema.json)."""
    import json

    from orchestrator.nightly.plan import nightly_plan_json_schema

    text = json.dumps(nightly_plan_json_schema(), indent=2) + "\n"
    if out is None:
        click.echo(text, nl=False)
        return
    from orchestrator.fsutil import atomic_write_text

    atomic_write_text(out, text)
