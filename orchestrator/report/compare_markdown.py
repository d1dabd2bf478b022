"""`orch compare` as text for people: the Markdown rendering (a CI job summary, a PR comment).

Also the labels the terminal view shares (`verdict_label`, `short`, `side_summary`), so both say the
same words. Pure and deterministic; the comparison itself is `orchestrator.compare`.
"""

from __future__ import annotations

import re

from orchestrator.model.comparison import Comparison, Difference, Overall, SideInfo, Verdict
from orchestrator.text import markdown_code, markdown_text, one_line

VERDICT_TEXT: dict[Verdict, str] = {
    "same": "same",
    "within_tolerance": "same within tolerance",
    "intended": "intended",
    "improved": "improved",
    "host": "differs by host",
    "changed": "changed",
    "regression": "regression",
}

OVERALL_TEXT: dict[Overall, str] = {
    "identical": "identical: nothing differs",
    "equivalent": "equivalent: only intended differences, host differences, improvements and numbers within tolerance",
    "regressed": "regressed: B differs from A in ways no declared variant explains",
}


def verdict_label(verdict: Verdict, note: str | None = None, *, intent: str | None = None) -> str:
    """`intended (variant cpu: description)` for an intended row, the plain verdict otherwise.

    Given the comparison's `intent`, an intended row names the variant only (`intended (variant cpu)`):
    the renderings state the description once, at the top, instead of on every row.
    """
    if verdict != "intended" or not note:
        return VERDICT_TEXT[verdict]
    if intent and note.startswith(intent):
        note = intent.split(": ", 1)[0] + note[len(intent) :]
    return f"intended ({note})"


def short(value: str | None) -> str:
    """Identities and image ids shortened for people (`sha256:` kept); the JSON keeps them whole."""
    if value is None:
        return "—"
    if value.startswith("sha256:"):
        return value[:19]
    return value[:12] if re.fullmatch(r"[0-9a-f]{64}", value) else value


def side_summary(side: SideInfo) -> list[tuple[str, str]]:
    """(label, value) rows that describe one side, shared by the Markdown and terminal renderings."""
    variant = "none (reference)"
    if side.variant is not None:
        variant = side.variant.name + ("" if side.variant.declared else " (not declared)")
    results = []
    if side.build_status:
        results.append(f"build {side.build_status}")
    if side.report_verdict:
        results.append(f"report {side.report_verdict}")
    return [
        ("read", ", ".join(side.files)),
        ("dossier", f"{side.dossier} ({short(side.identity)})"),
        ("variant", variant),
        ("platform", side.platform or "—"),
        ("image", short(side.image)),
        ("result", ", ".join(results)),
    ]


def _md(value: str) -> str:
    """Prose, escaped so it renders as written; one line (a newline would end a table row)."""
    return markdown_text(one_line(value, 10_000))


def _md_code(value: str | None) -> str:
    """A literal value in a code span, `|` escaped for table cells (GFM splits cells first)."""
    if value is None:
        return "—"
    return markdown_code(one_line(value, 10_000), cell=True)


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _md_differences(title: str, rows: list[Difference], c: Comparison) -> list[str]:
    lines = [f"## {title}", ""]
    differing = [row for row in rows if row.verdict != "same"]
    if differing:
        lines += [_md_row(["", "A", "B", "Verdict"]), _md_row(["---", "---", "---", "---"])]
        for row in differing:
            a, b = (short(row.a), short(row.b)) if row.field == "identity" else (row.a, row.b)
            lines.append(
                _md_row(
                    [
                        _md(row.field),
                        _md_code(a),
                        _md_code(b),
                        _md(verdict_label(row.verdict, row.note, intent=c.intent)),
                    ]
                )
            )
        lines.append("")
    same = [row.field for row in rows if row.verdict == "same"]
    if same:
        lines += ["Same on both sides: " + ", ".join(_md(field) for field in same) + ".", ""]
    if not rows:
        lines += ["Nothing recorded on both sides.", ""]
    return lines


def environment_summary(c: Comparison) -> list[str]:
    """The environment part of a comparison in words, shared by the Markdown and terminal renderings:
    "same environment" with the digest, or the verdict and one line per differing file."""
    env = c.environment
    if env is None:
        return ["not compared (see below)"]
    if env.same:
        return [f"same environment ({short(env.digest_a)})"]
    assert c.environment_verdict is not None
    verdict = verdict_label(c.environment_verdict, c.environment_note, intent=c.intent)
    head = f"different environment: {short(env.digest_a)} → {short(env.digest_b)} ({verdict})"
    if env.files_unknown is not None:
        return [head, env.files_unknown]
    counts = ", ".join(f"{env.counts.get(kind, 0)} {kind}" for kind in ("changed", "added", "removed"))
    return [f"{head}; files: {counts}", *(line.removeprefix("environment ") for line in env.lines())]


def _md_passed(passed: bool | None) -> str:
    return "" if passed is None else (" ✅" if passed else " ❌")


def render_compare_markdown(comparison: Comparison) -> str:
    """The comparison as GitHub-flavoured Markdown (a CI job summary, a PR comment). Deterministic."""
    c = comparison
    lines = [f"# orch compare: {c.verdict}", "", _md(OVERALL_TEXT[c.verdict]), ""]
    if c.intent:
        lines += [
            f"**{_md(verdict_label('intended', c.intent))}**: the rows marked intended are this declared variant's.",
            "",
        ]
    lines += [_md_row(["", "A (reference)", "B (rebuild)"]), _md_row(["---", "---", "---"])]
    for (label, value_a), (_, value_b) in zip(side_summary(c.a), side_summary(c.b), strict=True):
        lines.append(_md_row([label, _md_code(value_a), _md_code(value_b)]))
    lines.append("")
    if c.unintended:
        lines += ["## Unintended differences", ""]
        lines += [f"- {_md(line)}" for line in c.unintended]
        lines.append("")
    lines += _md_differences("Dossier", c.dossier, c)
    lines += ["## Packages", ""]
    if c.packages is None:
        lines += ["Not compared (see below).", ""]
    elif c.packages.identical:
        lines += ["Identical.", ""]
    else:
        assert c.packages_verdict is not None
        lines += [f"Verdict: {_md(verdict_label(c.packages_verdict, c.packages_note, intent=c.intent))}.", ""]
        lines += [_md_row(["Package", "A", "B"]), _md_row(["---", "---", "---"])]
        for change in c.packages.changed:
            lines.append(_md_row([_md_code(change.name), _md_code(change.reference), _md_code(change.observed)]))
        for line in c.packages.removed:
            name, _, version = line.partition("==")
            lines.append(_md_row([_md_code(name), _md_code(version), "*(absent)*"]))
        for line in c.packages.added:
            name, _, version = line.partition("==")
            lines.append(_md_row([_md_code(name), "*(absent)*", _md_code(version)]))
        lines.append("")
    head, *files = environment_summary(c)
    lines += ["## Environment", "", _md(head[:1].upper() + head[1:]) + ".", ""]
    if files:
        lines += [f"- {_md(line)}" for line in files]
        lines.append("")
    lines += _md_differences("System", c.system, c)
    lines += ["## Stages", ""]
    if c.stages:
        lines += [_md_row(["Stage", "A", "B", "Verdict", "B's first error / reason"]), _md_row(["---"] * 5)]
        for stage in c.stages:
            lines.append(
                _md_row(
                    [
                        stage.stage,
                        _md_code(stage.a),
                        _md_code(stage.b),
                        _md(VERDICT_TEXT[stage.verdict]),
                        _md(stage.note or ""),
                    ]
                )
            )
    else:
        lines.append("Not compared (see below).")
    lines += ["", "## Numbers", ""]
    if c.numbers:
        lines += [_md_row(["Stage", "Check", "A", "B", "Expected (B)", "Verdict"]), _md_row(["---"] * 6)]
        for number in c.numbers:
            verdict = verdict_label(number.verdict, number.note, intent=c.intent)
            if number.note and number.verdict != "intended":
                verdict += f" ({number.note})"
            lines.append(
                _md_row(
                    [
                        number.stage,
                        _md_code(number.name),
                        _md_code(number.a_observed) + _md_passed(number.a_passed),
                        _md_code(number.b_observed) + _md_passed(number.b_passed),
                        _md_code(number.expected),
                        _md(verdict),
                    ]
                )
            )
    else:
        lines.append("No check recorded on both sides.")
    lines.append("")
    if c.not_compared or c.notes:
        lines += ["## Not compared, and notes", ""]
        lines += [f"- {_md(line)}" for line in [*c.not_compared, *c.notes]]
        lines.append("")
    return "\n".join(lines)
