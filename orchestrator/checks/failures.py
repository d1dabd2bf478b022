"""The failure catalogue (data/failures.json): which known cause a failure message shows, and what to do.

Every GPU failure orch meets — from the daemon, the NVIDIA container toolkit, the driver, NVML, torch/CUDA and
HIP/ROCm — arrives as text. The catalogue maps it to the layer that failed (host / device / sample), the cause
in one sentence and the next step. Pure: the matcher reads text, never the machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Literal

from orchestrator.vendor import failure_rows

Layer = Literal["host", "device", "sample"]


@dataclass(frozen=True)
class Example:
    message: str
    source: str


@dataclass(frozen=True)
class FailureCause:
    id: str
    layer: Layer
    patterns: tuple[re.Pattern[str], ...]
    cause: str
    next_step: str
    examples: tuple[Example, ...]


@dataclass(frozen=True)
class Explanation:
    cause: FailureCause
    #: The matched text, as it appeared in the message.
    excerpt: str
    #: A detail read from the message, e.g. "found version 11040 = CUDA 11.4"; "" when none.
    detail: str = ""

    def sentence(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        return f"[{self.cause.layer}] {self.cause.cause}{detail} Next: {self.cause.next_step}"


@cache
def catalogue() -> tuple[FailureCause, ...]:
    return tuple(
        FailureCause(
            id=entry.id,
            layer=entry.layer,
            patterns=tuple(re.compile(pattern) for pattern in entry.patterns),
            cause=entry.cause,
            next_step=entry.next_step,
            examples=tuple(Example(example.message, example.source) for example in entry.examples),
        )
        for entry in failure_rows()
    )


def explain(text: str) -> list[Explanation]:
    """Every catalogued cause the text shows, in catalogue order (each cause once)."""
    # Messages arrive wrapped by terminals and log collectors ("unsatisfied condi\ntion"), or with their
    # lines re-indented: try the text as given, then unwrapped, then with runs of whitespace collapsed.
    variants = (text, text.replace("\n", ""), " ".join(text.split()))
    found: list[Explanation] = []
    for cause in catalogue():
        match = next((m for variant in variants for p in cause.patterns if (m := p.search(variant))), None)
        if match is not None:
            found.append(Explanation(cause, match.group(0), _detail(cause.id, match)))
    return found


def explain_first(text: str) -> Explanation | None:
    found = explain(text)
    return found[0] if found else None


def _detail(cause_id: str, match: re.Match[str]) -> str:
    if cause_id == "torch-driver-too-old" and match.groups():
        value = int(match.group(1))
        return f"found version {value} = CUDA {value // 1000}.{(value % 1000) // 10}"
    return ""


def troubleshooting_section() -> str:
    """The generated catalogue section of docs/troubleshooting.md (a test keeps the file in step)."""
    lines = [
        "<!-- generated from orchestrator/data/failures.json by orchestrator.checks.failures; do not edit by hand -->",
        "",
    ]
    for cause in catalogue():
        lines += [
            f"### `{cause.id}` ({cause.layer})",
            "",
            f"**Cause.** {cause.cause}",
            "",
            f"**Next step.** {cause.next_step}",
            "",
        ]
        lines.append("Seen as:")
        lines.append("")
        for example in cause.examples:
            lines.append(f"- `{example.message}` — <{example.source}>")
        lines.append("")
    return "\n".join(lines)


def explanations_for_report(sources: dict[str, str | None]) -> list[dict[str, str]]:
    """Catalogue explanations of several texts (a start error, a probe's stderr, its warnings), as report facts:
    one entry per cause found, naming where it was seen. Empty texts are skipped."""
    found: list[dict[str, str]] = []
    seen: set[str] = set()
    for where, text in sources.items():
        if not text:
            continue
        for explanation in explain(text):
            if explanation.cause.id in seen:
                continue
            seen.add(explanation.cause.id)
            found.append(
                {
                    "id": explanation.cause.id,
                    "layer": explanation.cause.layer,
                    "seen_in": where,
                    "message": explanation.excerpt,
                    "cause": explanation.cause.cause + (f" ({explanation.detail})" if explanation.detail else ""),
                    "next_step": explanation.cause.next_step,
                }
            )
    return found
