"""The verdict of a comparison: every row's verdict folded into one, and the unintended differences named.

`regressed` when any row is `changed` or `regression`; `identical` when every row is `same`;
`equivalent` otherwise. `unintended` lists every regression first (stages, then numbers), then every
unintended change (packages, the environment's differing files, system, stages, numbers, dossier), one
line each.
"""

from __future__ import annotations

from orchestrator.compare.diff import (
    dossier_rows,
    intent_of,
    package_rows,
    platform_of,
    system_rows,
    variant_of,
)
from orchestrator.compare.environment import environment_rows
from orchestrator.compare.layers import compare_layers
from orchestrator.compare.read import Side
from orchestrator.model.comparison import (
    UNINTENDED,
    Comparison,
    Difference,
    NumberComparison,
    Overall,
    SideInfo,
    StageComparison,
    Verdict,
)
from orchestrator.model.environment import EnvironmentDiff
from orchestrator.model.inventory import InventoryDiff
from orchestrator.report.view import one_line


def overall(verdicts: list[Verdict]) -> Overall:
    if any(verdict in UNINTENDED for verdict in verdicts):
        return "regressed"
    if all(verdict == "same" for verdict in verdicts):
        return "identical"
    return "equivalent"


def unintended_lines(
    dossier: list[Difference],
    packages: InventoryDiff | None,
    packages_verdict: Verdict | None,
    system: list[Difference],
    stages: list[StageComparison],
    numbers: list[NumberComparison],
    environment: EnvironmentDiff | None = None,
    environment_verdict: Verdict | None = None,
) -> list[str]:
    def stage_line(row: StageComparison) -> str:
        return f"{row.stage} stage {row.a} in A, {row.b} in B" + (f" ({row.note})" if row.note else "")

    def number_line(row: NumberComparison) -> str:
        def side(observed: str | None, passed: bool | None) -> str:
            return "not checked" if observed is None else f"{observed} ({'held' if passed else 'failed'})"

        return (
            f"{row.stage} check {row.name!r}: A {side(row.a_observed, row.a_passed)}, "
            f"B {side(row.b_observed, row.b_passed)}; expected {row.expected}"
        )

    def difference_line(row: Difference) -> str:
        return f"{row.field} changed: {row.a} → {row.b}" + (f" ({row.note})" if row.note else "")

    lines = [stage_line(row) for row in stages if row.verdict == "regression"]
    lines += [number_line(row) for row in numbers if row.verdict == "regression"]
    if packages is not None and packages_verdict == "changed":
        lines += [
            f"package {change.name} changed: {change.reference} → {change.observed}" for change in packages.changed
        ]
        lines += [f"package added: {line}" for line in packages.added]
        lines += [f"package removed: {line}" for line in packages.removed]
    if environment is not None and environment_verdict == "changed":
        lines += environment.lines()
    lines += [difference_line(row) for row in system if row.verdict == "changed"]
    lines += [stage_line(row) for row in stages if row.verdict == "changed"]
    lines += [number_line(row) for row in numbers if row.verdict == "changed"]
    lines += [difference_line(row) for row in dossier if row.verdict == "changed"]
    return [one_line(line, 1000) for line in lines]


def _side_info(side: Side) -> SideInfo:
    return SideInfo(
        files=side.files,
        dossier=side.dossier_name,
        dossier_path=side.dossier_path,
        identity=side.identity,
        variant=variant_of(side),
        platform=platform_of(side),
        image=side.image_id,
        report_verdict=side.report.verdict if side.report else None,
        build_status=side.record.status if side.record else None,
    )


def compare_sides(a: Side, b: Side) -> Comparison:
    """Compare B (the rebuild) with A (the reference). Pure: reads nothing beyond the two sides."""
    notes = [*a.notes, *b.notes]
    not_compared: list[str] = []
    intent = intent_of(a, b, notes)
    dossier = dossier_rows(a, b, intent)
    packages, packages_verdict, packages_note = package_rows(a, b, intent, not_compared)
    system = system_rows(a, b, intent, not_compared)
    environment, environment_verdict, environment_note = environment_rows(a, b, intent, not_compared)
    layers = compare_layers(a, b, intent)
    not_compared += layers.not_compared

    verdicts: list[Verdict] = [row.verdict for row in [*dossier, *system]]
    verdicts += [row.verdict for row in layers.stages] + [row.verdict for row in layers.numbers]
    if packages_verdict is not None:
        verdicts.append(packages_verdict)
    if environment_verdict is not None:
        verdicts.append(environment_verdict)
    return Comparison(
        a=_side_info(a),
        b=_side_info(b),
        intent=intent.label if intent else None,
        dossier=dossier,
        packages=packages,
        packages_verdict=packages_verdict,
        packages_note=packages_note,
        system=system,
        environment=environment,
        environment_verdict=environment_verdict,
        environment_note=environment_note,
        stages=layers.stages,
        numbers=layers.numbers,
        not_compared=not_compared,
        notes=notes,
        unintended=unintended_lines(
            dossier, packages, packages_verdict, system, layers.stages, layers.numbers, environment, environment_verdict
        ),
        verdict=overall(verdicts),
    )
