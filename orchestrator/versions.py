"""Version text from tools, tables and images, read one way: `packaging`'s PEP 440 parser, None when unreadable.

A utility at the bottom of the house (it imports nothing of orch): driver versions (`535.183.01`), CUDA
releases (`12.4`), ROCm releases (`6.4.0`) and package pins are all compared as `packaging` versions, so
`12.10` is newer than `12.9` wherever orch compares them.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version


def parse_version(text: str | None) -> Version | None:
    """The version `text` spells (surrounding blanks ignored), or None when it is empty or not a version."""
    if not text:
        return None
    try:
        return Version(text.strip())
    except InvalidVersion:
        return None


def same_version(a: str, b: str) -> bool:
    """Whether two spellings name one version (`2.4` and `2.4.0`); text that is not a version must match as is."""
    left, right = parse_version(a), parse_version(b)
    return left == right if left is not None and right is not None else a == b
