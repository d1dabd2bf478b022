"""Safe YAML reading for dossiers: size cap, no anchors/aliases, no duplicate keys, line numbers kept.

PyYAML's safe loader already refuses arbitrary objects. What it does not do: refuse aliases (an alias
bomb expands exponentially as soon as anything walks the data), refuse duplicate keys (it keeps the
last one silently), or tell which line a value came from. This module does those three things and
returns plain Python data plus a map from field path to line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from orchestrator.errors import YamlSourceError

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 32

FieldPath = tuple[str | int, ...]


@dataclass(frozen=True)
class YamlDocument:
    data: Any
    lines: dict[FieldPath, int]

    def line_of(self, path: FieldPath) -> int | None:
        """The line of the deepest known prefix of `path` (pydantic paths may add union tags)."""
        best: int | None = None
        current: FieldPath = ()
        for part in path:
            candidate = (*current, part)
            if candidate in self.lines:
                current = candidate
                best = self.lines[candidate]
        return best if best is not None else self.lines.get(())

    @property
    def keys_seen(self) -> set[str]:
        return {part for path in self.lines for part in path if isinstance(part, str)}


def _line(mark: Any) -> int | None:
    return None if mark is None else int(mark.line) + 1


def _refuse_aliases_and_depth(text: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise YamlSourceError(
                "YAML anchors and aliases (&name / *name) are not allowed in a dossier: write values out",
                _line(event.start_mark),
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlSourceError(f"nesting deeper than {MAX_DEPTH} levels", _line(event.start_mark))
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _map_lines(node: yaml.Node, path: FieldPath, lines: dict[FieldPath, int]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            plain = isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:str"
            key = key_node.value if plain else None
            if not isinstance(key, str):
                raise YamlSourceError("mapping keys must be plain strings", _line(key_node.start_mark))
            if key in seen:
                raise YamlSourceError(f"key {key!r} appears twice in the same mapping", _line(key_node.start_mark))
            seen.add(key)
            _map_lines(value_node, (*path, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _map_lines(item, (*path, index), lines)


def read_yaml(raw: bytes) -> YamlDocument:
    if len(raw) > MAX_BYTES:
        raise YamlSourceError(f"the file is {len(raw):,} bytes; a dossier is at most {MAX_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlSourceError(f"not UTF-8 text (byte {exc.start})") from None
    try:
        _refuse_aliases_and_depth(text)
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise YamlSourceError("the file is empty")
            lines: dict[FieldPath, int] = {}
            _map_lines(node, (), lines)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise YamlSourceError(f"invalid YAML: {problem}", _line(mark)) from None
    except yaml.YAMLError as exc:
        raise YamlSourceError(f"invalid YAML: {exc}") from None
    return YamlDocument(data=data, lines=lines)
