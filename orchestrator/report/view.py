"""What every rendering of a report shows the same way: stage order, statuses, durations, one-line
summaries and flattened facts. Pure and deterministic, so Markdown, HTML and JUnit never disagree.

Nothing here escapes for a format: each renderer escapes for its own syntax. What happens here is
only what no format can carry: control characters (invalid in XML, noise in a terminal) are made
visible, and lone surrogates become U+FFFD so the text can always be written as UTF-8.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.model.checks import Check
from orchestrator.model.recorded import Recorded
from orchestrator.model.report import STAGES, Report, StageName, StageResult

#: A list longer than this shows its first items and a count of the rest.
MAX_LIST_ITEMS = 8
#: A fact string longer than this is cut, with a count; report.json keeps the whole value.
MAX_FACT_CHARS = 300
#: The one-line summary under a stage name (HTML card, Markdown summary table).
MAX_LINE_CHARS = 200

#: `STAGES`, typed as stage names: the order every rendering shows, whatever the order in `report.stages`.
STAGE_ORDER: tuple[StageName, ...] = STAGES

STATUS_LABEL = {"passed": "passed", "failed": "failed", "skipped": "skipped", "not_run": "not run"}

# C0 controls except tab/newline/carriage return, DEL and C1 controls: invalid in XML 1.0 or HTML,
# and escape sequences (ANSI colours from a log) would drive a terminal showing report.md.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Lone surrogates (from bytes decoded with surrogateescape) cannot be encoded as UTF-8 at all;
# U+FFFE/U+FFFF are not XML characters.
_UNENCODABLE = re.compile("[\ud800-\udfff\ufffe\uffff]")
_WHITESPACE = re.compile(r"\s+")


def clean(text: str) -> str:
    """Text that every format can carry: control characters shown as `\\xNN`, never dropped silently."""
    text = _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)
    return _UNENCODABLE.sub("\ufffd", text)


def one_line(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """Whitespace runs (newlines included) collapsed, cut at `limit` with an ellipsis."""
    text = _WHITESPACE.sub(" ", clean(text)).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def ordered_stages(report: Report) -> list[StageResult]:
    """The four stages, always in `STAGES` order.

    A stage missing from `report.stages` (a report written by a run that stopped early) is shown as
    `not_run` rather than silently dropped: every rendering always has four layers.
    """
    return [report.stages.get(name) or _missing(name) for name in STAGE_ORDER]


def _missing(name: StageName) -> StageResult:
    return StageResult(name=name, status="not_run", reason="not recorded in this report")


def format_duration(stage: StageResult) -> str:
    """`0.21 s`, `7.9 s`, `2 min 05 s`; a dash for a stage that never ran (it has no duration)."""
    seconds = stage.duration_s
    if stage.status in ("skipped", "not_run") and seconds == 0:
        return "—"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def format_seconds(seconds: float) -> str:
    """A JUnit `time` attribute: plain seconds, three decimals, so the same report gives the same file."""
    return f"{seconds:.3f}"


def checks_summary(stage: StageResult) -> str:
    if not stage.checks:
        return "no checks"
    held = sum(check.passed for check in stage.checks)
    return f"{held}/{len(stage.checks)} checks held"


def first_failed_check(stage: StageResult) -> Check | None:
    return next((check for check in stage.checks if not check.passed), None)


def headline(stage: StageResult) -> tuple[str | None, str]:
    """The one line that says why a stage has its status: `(step, text)`; `step` is None when there is none.

    Failed: the first error, else the first failed check. Skipped / not run: the reason. Passed: the
    count of checks that held. A reader scanning the four layers needs nothing else to know where to look.
    """
    if stage.status == "failed":
        if stage.first_error is not None:
            return one_line(stage.first_error.step, 60), one_line(stage.first_error.message)
        failed = first_failed_check(stage)
        if failed is not None:
            return one_line(failed.name, 60), one_line(f"expected {failed.expected}, observed {failed.observed}")
        return None, "failed (no error recorded)"
    if stage.status in ("skipped", "not_run"):
        return None, one_line(stage.reason) if stage.reason else "no reason recorded"
    return None, checks_summary(stage)


def scalar_text(value: Any) -> str:
    """A fact value as its JSON spelling (`null`, `true`, `3.12`), strings as they are."""
    if isinstance(value, str):
        return clean(value) if value else '""'
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    return clean(str(value))


def _cut(text: str) -> str:
    if len(text) <= MAX_FACT_CHARS:
        return text
    return f"{text[:MAX_FACT_CHARS]}… (+{len(text) - MAX_FACT_CHARS} chars)"


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, Mapping | list | tuple)


def flatten_facts(facts: Mapping[str, Any] | Recorded) -> list[tuple[str, str]]:
    """Nested facts as `(dotted.key, value)` rows, in the order the probe reported them.

    Dicts become dotted keys, lists of scalars one comma-separated value, lists of objects indexed
    keys (`gpus[0].name`); a list longer than `MAX_LIST_ITEMS` shows its head and `(+N more)`.
    """
    rows: list[tuple[str, str]] = []
    if isinstance(facts, Recorded):
        facts = facts.recorded()
    for key, value in facts.items():
        _flatten(clean(str(key)), value, rows)
    return rows


def _flatten(key: str, value: Any, rows: list[tuple[str, str]]) -> None:
    if isinstance(value, Mapping):
        if not value:
            rows.append((key, "{}"))
        for sub, item in value.items():
            _flatten(f"{key}.{clean(str(sub))}", item, rows)
        return
    if isinstance(value, list | tuple):
        _flatten_list(key, value, rows)
        return
    rows.append((key, _cut(scalar_text(value))))


def _flatten_list(key: str, items: Sequence[Any], rows: list[tuple[str, str]]) -> None:
    if not items:
        rows.append((key, "[]"))
        return
    shown, hidden = items[:MAX_LIST_ITEMS], len(items) - MAX_LIST_ITEMS
    more = f" … (+{hidden} more)" if hidden > 0 else ""
    if all(_is_scalar(item) for item in items):
        rows.append((key, _cut(", ".join(scalar_text(item) for item in shown)) + more))
        return
    for index, item in enumerate(shown):
        _flatten(f"{key}[{index}]", item, rows)
    if hidden > 0:
        rows.append((f"{key}[…]", f"+{hidden} more"))


def short_image_id(image_id: str) -> str:
    """`sha256:` and 12 hex digits, as `docker images` shows it."""
    algorithm, _, digest = image_id.rpartition(":")
    return f"{algorithm}:{digest[:12]}" if algorithm else image_id[:12]
