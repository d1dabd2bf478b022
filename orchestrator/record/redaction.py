"""Review of every path and URL `orch record` observed: credentials and local paths never reach its output.

A draft dossier travels (to a repository, to another team): a token in an index URL or a `file:///home/…`
direct URL would leak a secret or a person's machine layout. Each value replaced is listed as a
`Redaction` (where, and the value as redacted), which the command prints; the original is written nowhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from orchestrator.redact import redact

LOCAL = "<local path>"
# Absolute paths under a person's or a machine's own folders; a path inside an image (/usr/lib…) is kept.
_LOCAL_ROOTS = ("/home/", "/root/", "/Users/", "/tmp/", "/mnt/", "/media/", "/scratch/", "/srv/", "/work/")
_FILE_URL = re.compile(r"file://[^\s\"',;]+")


@dataclass(frozen=True)
class Redaction:
    where: str
    kind: str  # "credential" | "local path"
    shown: str  # the value as redacted: safe to print


class Redactor:
    def __init__(self, extra_roots: Iterable[str] = ()) -> None:
        roots = {root.rstrip("/") + "/" for root in extra_roots if root and root != "/"}
        self._roots = tuple(sorted(set(_LOCAL_ROOTS) | roots, key=len, reverse=True))
        self._path = re.compile(
            r"(?<![\w:/.])(?:" + "|".join(re.escape(root) for root in self._roots) + r")[^\s\"',;]*"
        )
        self.found: list[Redaction] = []

    def text(self, value: str, where: str) -> str:
        cleaned = redact(value)
        if cleaned != value:
            self.found.append(Redaction(where, "credential", cleaned))
        before = cleaned
        cleaned = _FILE_URL.sub(lambda m: "file://" + LOCAL if self._local(m.group(0)) else m.group(0), cleaned)
        cleaned = self._path.sub(LOCAL, cleaned)
        if cleaned != before:
            self.found.append(Redaction(where, "local path", cleaned))
        return cleaned

    def _local(self, url: str) -> bool:
        path = url.removeprefix("file://")
        return path.startswith("/")

    def value(self, value: Any, where: str) -> Any:
        """A JSON-like document with every string reviewed; `where` names each value's place."""
        if isinstance(value, str):
            return self.text(value, where)
        if isinstance(value, dict):
            return {key: self.value(item, f"{where} > {key}") for key, item in value.items()}
        if isinstance(value, list):
            return [self.value(item, f"{where} > {_label(item, i)}") for i, item in enumerate(value)]
        return value


def _label(item: Any, index: int) -> str:
    if isinstance(item, dict) and isinstance(item.get("name"), str):
        return str(item["name"])
    return str(index)
