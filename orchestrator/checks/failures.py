"""The failure catalogue (data/failures.json): which known cause a failure message shows, and what to do.

Every GPU failure orch meets — from the daemon, the NVIDIA container toolkit, CDI, the driver, NVML, the CUDA
runtime, torch and HIP/ROCm — arrives as text, in whatever words the tool that met it chose. Each catalogue entry
is keyed on what identifies its cause across those wordings: the vendor's error codes (a `cudaError_t` or
`hipError_t` name, its number printed next to the vendor's word, its error string; NVML return codes; the toolkit's,
CDI's and the daemon's start-error strings), with further wordings as regular expressions only where a tool words
the cause its own way. Some entries also carry broad patterns, the cause's idea in broad words ("cuDNN … version …
but"), read only when nothing narrower matched, so a wording nobody collected yet still finds its cause. The same
matcher reads a container's start error, a probe's stderr and exception, and a captured command's output. A
failure no entry explains is still named by the layer where it was seen, with its raw text and the next diagnostic
step, never with a guessed cause. Pure: the matcher reads text, never the machine.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Literal

from orchestrator.vendor import FailureCodeRow, failure_rows

Layer = Literal["host", "image", "device", "sample"]
#: Where a failure was seen, and so the layer an unexplained one is named by.
Seen = Literal["container-start", "probe", "captured-command"]
SEEN_LAYER: dict[Seen, Layer] = {"container-start": "host", "probe": "device", "captured-command": "host"}
#: The next diagnostic step for a failure orch does not know.
UNKNOWN_NEXT_STEP = (
    "Run `orch doctor --capture DIR` on this host and read the capture with `orch doctor --from DIR`; the host's "
    "`dmesg` (NVRM/Xid or amdgpu lines) and the daemon's log usually name the failing part."
)


@dataclass(frozen=True)
class Example:
    message: str
    source: str


@dataclass(frozen=True)
class FailureCause:
    id: str
    layer: Layer
    appears_in: tuple[Seen, ...]
    patterns: tuple[re.Pattern[str], ...]
    cause: str
    next_step: str
    vendor_sources: tuple[str, ...]
    examples: tuple[Example, ...]
    #: The vendor codes' names ("cudaErrorInsufficientDriver = 35"), for the docs.
    codes: tuple[str, ...] = ()
    #: A mismatch between two layers (a driver older than the image's CUDA), or a symptom whose cause lies in one of
    #: two ("no CUDA-capable device": nothing mapped, or the driver not working), may be fixed on either side: the
    #: other one, or None.
    other_layer: Layer | None = None
    #: The cause's idea in broad words, tried only when nothing in the catalogue matched (see `explain`).
    broad_patterns: tuple[re.Pattern[str], ...] = ()

    @property
    def layers(self) -> str:
        """The layer, or both layers of a two-sided cause ("host or image")."""
        return f"{self.layer} or {self.other_layer}" if self.other_layer else self.layer


@dataclass(frozen=True)
class Explanation:
    cause: FailureCause
    #: The matched text, as it appeared in the message.
    excerpt: str
    #: A detail read from the message, e.g. "found version 11040 = CUDA 11.4"; "" when none.
    detail: str = ""

    def sentence(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        return f"[{self.cause.layers}] {self.cause.cause}{detail} Next: {self.cause.next_step}"


# The vendor's word printed before an error number, per numbered kind: "CUDA error 35", "cuda runtime error (35)",
# "CUDA failure 35", "CUDA_ERROR 803", "CUDA error: 35 (0x23)", "cudaGetDeviceCount returned 35", "HIP error 98".
_NUMBER_CONTEXT = {
    "cudaError_t": r"\bcuda(?:[ _-]?(?:runtime|driver|rt))?(?:[ _-]?initiali[sz]ation)?[ _-]?(?:api[ _-]?)?(?:error|failure|err|status)\b",
    "CUresult": r"\bcu(?:da)?(?:[ _-]?driver)?(?:[ _-]?library)?(?:[ _-]?init)?[ _-]?(?:api[ _-]?)?(?:error|failure|result|status)\b",
    "hipError_t": r"\bhip(?:[ _-]?runtime)?[ _-]?(?:api[ _-]?)?(?:error|failure|status)\b",
    # "nvmlInit_v2 err: 18", "nvml vram init failure: 18" (ollama), "NVML error 9".
    "nvmlReturn_t": r"\bnvml\w*(?:[ _-]+\w+){0,2}?[ _-]+(?:err(?:or)?|failure)\b",
}
_RETURNED = {"cudaError_t": r"\bcu\w*", "CUresult": r"\bcu\w*", "hipError_t": r"\bhip\w*", "nvmlReturn_t": r"\bnvml\w*"}


def code_patterns(code: FailureCodeRow) -> list[re.Pattern[str]]:
    """The regular expressions one vendor code is recognised by: its name as a word, its error string (any case,
    any spacing), its number next to the vendor's word (numbered kinds only)."""
    found: list[re.Pattern[str]] = []
    if code.name:
        found.append(re.compile(rf"\b{re.escape(code.name)}\b"))
        if code.kind == "hipError_t" and code.name.startswith("hipError"):
            # TensorFlow's ROCm backend prints HIP's names as HIP_ERROR_<Name> ("HIP_ERROR_NoDevice").
            found.append(re.compile(rf"\bHIP_ERROR_{re.escape(code.name.removeprefix('hipError'))}\b"))
        if code.kind == "nvmlReturn_t" and code.name.startswith("NVML_"):
            # Go's NVML bindings (the device plugin, the toolkit) print the name without its prefix.
            found.append(re.compile(rf"\b{re.escape(code.name.removeprefix('NVML_'))}\b"))
    if code.text:
        words = [re.escape(word) for word in code.text.split()]
        found.append(re.compile(r"\s+".join(words), re.IGNORECASE))
    if code.number is not None and code.kind in _NUMBER_CONTEXT:
        number = rf"\(?{code.number}\)?(?!\d|\.\d)"
        # Up to 16 non-digits between the word and the number: ": ", " (", "=", ": error code ", ": [".
        found.append(re.compile(rf"{_NUMBER_CONTEXT[code.kind]}[^\n\d]{{0,16}}?{number}", re.IGNORECASE))
        # "cudaGetDeviceCount returned 35", and with the call's arguments: "cuInit(0) returned 804".
        found.append(re.compile(rf"{_RETURNED[code.kind]}(?:\([^)\n]*\))?\s+returned\s+{number}", re.IGNORECASE))
        # The number as a call's result: "Return value 46 from 'cudaStreamCreate(…)'", "cudaMalloc() failed with
        # error #2", "cuda driver library init failure: 3".
        found.append(
            re.compile(rf"\breturn(?:ed)?\s+(?:value|code)\s+{number}\s+from\s+'?{_RETURNED[code.kind]}", re.IGNORECASE)
        )
        found.append(re.compile(rf"{_RETURNED[code.kind]}\(\)\s+failed with error\s+#?{number}", re.IGNORECASE))
        if code.kind == "cudaError_t":
            # A runtime call or the runtime itself named with its result: "cudaSetDevice err: 999", "cudart init
            # failure: 999" (ollama).
            found.append(
                re.compile(rf"\bcuda(?:rt|[A-Z]\w*)(?:\s+init)?\s+(?:err(?:or)?|failure)\b[^\n\d]{{0,16}}?{number}")
            )
        if code.kind == "CUresult":
            # A driver call named with its result: "failed call to cuInit: UNKNOWN ERROR (34)".
            found.append(re.compile(rf"\bcu[A-Z]\w*\b[^\n\d]{{0,40}}?{number}"))
        if code.kind in ("cudaError_t", "CUresult"):
            # A check of a call against success, as TensorFlow and glog print it: "Check failed: CUDA_SUCCESS ==
            # dynload::cuCtxSetCurrent(context) (0 vs. 216)", "cudaSuccess (0 vs. 35)".
            success = "CUDA_SUCCESS" if code.kind == "CUresult" else "cudaSuccess"
            plain = rf"{code.number}(?!\d)"
            found.append(re.compile(rf"\b{success}\b[^\n]{{0,80}}?\((?:0 vs\.\s*{plain}|{plain} vs\.\s*0)\)"))
    return found


def _code_label(code: FailureCodeRow) -> str:
    name = code.name or code.text or code.kind
    return f"{name} = {code.number}" if code.number is not None else name


@cache
def catalogue() -> tuple[FailureCause, ...]:
    return tuple(
        FailureCause(
            id=entry.id,
            layer=entry.layer,
            appears_in=entry.appears_in,
            patterns=tuple(pattern for code in entry.codes for pattern in code_patterns(code))
            + tuple(re.compile(pattern) for pattern in entry.patterns),
            cause=entry.cause,
            next_step=entry.next_step,
            vendor_sources=entry.vendor_sources,
            examples=tuple(Example(example.message, example.source) for example in entry.examples),
            codes=tuple(_code_label(code) for code in entry.codes),
            other_layer=entry.other_layer,
            broad_patterns=tuple(re.compile(pattern) for pattern in entry.broad_patterns),
        )
        for entry in failure_rows()
    )


def explain(text: str) -> list[Explanation]:
    """Every catalogued cause the text shows, in catalogue order (each cause once). Only when no cause's codes or
    patterns match are the broad patterns tried: a wording no one collected yet still gets its cause, and a known
    wording is never given a second, vaguer one."""
    # Messages arrive wrapped by terminals and log collectors ("unsatisfied condi\ntion"), or with their
    # lines re-indented: try the text as given, then unwrapped, then with runs of whitespace collapsed.
    collapsed = " ".join(text.split())
    # Some front ends print a space before each colon ("capabilities : [[gpu]]"): read that form too.
    # A message copied out of JSON (a daemon's or a pod's log) carries its quotes escaped: read it unescaped too.
    variants = (text, text.replace("\n", ""), collapsed, re.sub(r"\s+:", ":", collapsed), collapsed.replace('\\"', '"'))
    found = _matching(variants, lambda cause: cause.patterns)
    return found or _matching(variants, lambda cause: cause.broad_patterns)


def _matching(
    variants: tuple[str, ...], patterns_of: Callable[[FailureCause], tuple[re.Pattern[str], ...]]
) -> list[Explanation]:
    found: list[Explanation] = []
    for cause in catalogue():
        match = next((m for variant in variants for p in patterns_of(cause) if (m := p.search(variant))), None)
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


def failure_lines(text: str, limit: int = 3) -> str:
    """The lines of a failure worth quoting: those that look like the error, else the last ones, cut short."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    marked = [line for line in lines if re.search(r"(?i)error|fail|unable|cannot|could not|denied|no such", line)]
    chosen = (marked or lines)[-limit:]
    return " / ".join(line[:300] for line in chosen) or "no output"


def unexplained(seen: Seen, text: str, where: str | None = None) -> dict[str, str]:
    """A failure no catalogue entry explains, as a report entry: the layer where it was seen, orch's plain
    admission that it does not know the message, the raw text, and the next diagnostic step. `where`: the
    report's name for the text ("command nvidia-smi"), by default the place it was seen."""
    layer = SEEN_LAYER[seen]
    return {
        "id": "unknown",
        "layer": layer,
        "seen_in": where or seen.replace("-", " "),
        "message": failure_lines(text),
        "cause": f"orch does not know this message (seen at {seen.replace('-', ' ')}, layer {layer}).",
        "next_step": UNKNOWN_NEXT_STEP,
    }


def explain_failure(seen: Seen, text: str) -> tuple[str, str]:
    """(what failed and why, what to do) for one failure text: the first catalogued cause, or the plain
    admission that orch does not know it, with its raw lines and the next diagnostic step."""
    first = explain_first(text)
    if first is None:
        entry = unexplained(seen, text)
        return f"{entry['cause']} It said: {entry['message']}", entry["next_step"]
    detail = f" ({first.detail})" if first.detail else ""
    return f"[{first.cause.layers}] {first.cause.cause}{detail}", first.cause.next_step


def troubleshooting_section() -> str:
    """The generated catalogue section of docs/troubleshooting.md (a test keeps the file in step)."""
    lines = [
        "<!-- generated from orchestrator/data/failures.json by orchestrator.checks.failures; do not edit by hand -->",
        "",
    ]
    for cause in catalogue():
        lines += [
            f"### `{cause.id}` ({cause.layers})",
            "",
            f"**Cause.** {cause.cause}",
            "",
            f"**Next step.** {cause.next_step}",
            "",
            f"**Appears at.** {', '.join(seen.replace('-', ' ') for seen in cause.appears_in)}.",
            "",
        ]
        if cause.codes:
            lines += [f"**Keyed on.** {', '.join(f'`{code}`' for code in cause.codes)}.", ""]
        if cause.broad_patterns:
            broad = ", ".join(f"`{pattern.pattern}`" for pattern in cause.broad_patterns)
            lines += [f"**Also read, when nothing narrower matches.** {broad}", ""]
        lines += [f"**Defined in.** {', '.join(f'<{source}>' for source in cause.vendor_sources)}", ""]
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
            entry = {
                "id": explanation.cause.id,
                "layer": explanation.cause.layer,
                "seen_in": where,
                "message": explanation.excerpt,
                "cause": explanation.cause.cause + (f" ({explanation.detail})" if explanation.detail else ""),
                "next_step": explanation.cause.next_step,
            }
            if explanation.cause.other_layer:
                entry["other_layer"] = explanation.cause.other_layer
            found.append(entry)
    return found
