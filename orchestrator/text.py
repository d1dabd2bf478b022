"""Text that any output can carry: control characters made visible, one line, cut with an ellipsis.

A utility at the bottom of the house (it imports nothing of orch): reports, comparisons, documents
and error messages all show user and container strings through these two helpers, so a value is
cleaned the same way wherever it is shown.
"""

from __future__ import annotations

import re

#: The one-line summary under a stage name (HTML card, Markdown summary table), and the default cut.
MAX_LINE_CHARS = 200

# C0 controls except tab/newline/carriage return, DEL and C1 controls: invalid in XML 1.0 or HTML,
# and escape sequences (ANSI colours from a log) would drive a terminal showing report.md.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Lone surrogates (from bytes decoded with surrogateescape) cannot be encoded as UTF-8 at all;
# U+FFFE/U+FFFF are not XML characters.
_UNENCODABLE = re.compile("[\ud800-\udfff\ufffe\uffff]")
_WHITESPACE = re.compile(r"\s+")
# A terminal escape sequence (ECMA-48), as build logs and tools print them: CSI (`ESC [`, parameter bytes 0x30-0x3F,
# intermediate bytes 0x20-0x2F, one final byte 0x40-0x7E: colours, cursor moves, `ESC[?25l`, `ESC[2K`), OSC
# (`ESC ]` … ended by BEL or `ESC \\`: window titles, hyperlinks), else a short escape (`ESC 7`, `ESC M`, `ESC ( B`).
ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-~])")


def clean(text: str) -> str:
    """Text that every format can carry: control characters shown as `\\xNN`, never dropped silently."""
    text = _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)
    return _UNENCODABLE.sub("\ufffd", text)


def strip_ansi(text: str) -> str:
    """Text with its terminal escape sequences removed (a log's colours); any other control character is left
    for `clean` to show."""
    return ANSI_ESCAPE.sub("", text)


def one_line(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """Whitespace runs (newlines included) collapsed, cut at `limit` with an ellipsis."""
    text = _WHITESPACE.sub(" ", clean(text)).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# -- Markdown -----------------------------------------------------------------------------------------
# The one escaping of orch's Markdown (report.md, the hand-over's documents): registered once as the Jinja
# filters `md` and `code` (orchestrator/resources.py), so no template or renderer escapes on its own.

# Characters with a Markdown (or inline HTML / entity) meaning inside a line. `#`, `-`, `+` and `1.`
# only mean something at the start of a line, and prose here never starts one.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>&|~])")
_NEWLINES = re.compile(r"\r\n|\r|\n")
_BACKTICKS = re.compile(r"`+")


def markdown_text(value: str) -> str:
    """Prose, escaped: it renders exactly as written. Line breaks become `<br>` (the only raw HTML emitted)."""
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", clean(value))
    return _NEWLINES.sub("<br>", escaped)


def markdown_code(value: str, cell: bool = False) -> str:
    """A code span: literal text, whatever it contains.

    The fence is one backtick longer than the longest run inside; a value that starts or ends with a
    backtick is padded with spaces (CommonMark strips one on each side). A newline would end a table
    row, so it is shown as ⏎. In a table cell (`cell`) `|` must still be escaped: GFM splits cells first.
    """
    value = _NEWLINES.sub(" ⏎ ", clean(value))
    if not value:
        return "*(empty)*"
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(value)), default=0) + 1)
    padded = f" {value} " if value.startswith("`") or value.endswith("`") else value
    span = f"{fence}{padded}{fence}"
    return span.replace("|", r"\|") if cell else span
