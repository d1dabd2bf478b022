"""Reading orch's own JSON documents (report, build record, hand-over manifest) back from disk.

One place says what goes wrong with such a file, so that every reader names the file and the first
problem the same way: missing, a folder, unreadable, not JSON, another format, or an invalid field
(with its dotted location). Each is `BadInput` (exit 2): the user pointed orch at the wrong file, or
the file was damaged after orch wrote it (orch writes them atomically).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from orchestrator.errors import BadInput
from orchestrator.text import one_line

M = TypeVar("M", bound=BaseModel)


def read_json(path: Path, expected: str) -> Any:
    """The parsed JSON of `path`; `expected` says in words what the file should have been."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file; expected {expected}") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a folder; expected {expected}") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot be read ({exc.strerror or exc}); expected {expected}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: not JSON ({one_line(str(exc), 120)}); expected {expected}") from None
    except (ValueError, RecursionError) as exc:
        # Valid JSON that Python refuses: an integer of more than 4300 digits (int_max_str_digits), or
        # nesting deeper than the recursion limit. orch never writes either.
        reason = "nested too deeply" if isinstance(exc, RecursionError) else one_line(str(exc), 120)
        raise BadInput(f"{path}: JSON that orch cannot read ({reason}); expected {expected}") from None


def format_of(data: Any) -> str | None:
    """The `format` a document declares, or None (not an object, or no `format`)."""
    found = data.get("format") if isinstance(data, dict) else None
    return found if isinstance(found, str) else None


def validate(model: type[M], data: Any, path: Path, kind: str) -> M:
    """`model` built from `data`, or `BadInput` naming the file and the first invalid field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise BadInput(f"{path}: invalid {kind} at {where}: {one_line(first['msg'], 160)}") from None


def read_one_of(path: Path, kinds: Mapping[str, tuple[type[BaseModel], str]]) -> BaseModel:
    """A document of one of the formats in `kinds` (format → model and its name in words), validated.

    Why the format is checked before validation: a file of another format (or another orch version)
    would otherwise surface as a validation error on some unrelated field.
    """
    expected = " or ".join(f"{kind} ({document_format})" for document_format, (_, kind) in kinds.items())
    expected = f"an orch {expected}"
    data = read_json(path, expected)
    found = format_of(data)
    if found is None or found not in kinds:
        shown = f"format {found!r}" if found is not None else "a JSON object with no 'format'"
        if not isinstance(data, dict):
            shown = f"a JSON {type(data).__name__}"
        # Only a newer or older version of the same document earns the hint; anything else is simply another file.
        same_kind = found is not None and found.split("/")[0] in {name.split("/")[0] for name in kinds}
        hint = "It was written by another orch version; read it with that version." if same_kind else None
        raise BadInput(f"{path}: {shown}, expected {expected}", hint=hint)
    model, kind = kinds[found]
    return validate(model, data, path, kind)


def read_document(path: Path, model: type[M], document_format: str, kind: str) -> M:
    """A document of exactly `document_format`, validated (see `read_one_of`)."""
    document = read_one_of(path, {document_format: (model, kind)})
    assert isinstance(document, model)  # read_one_of built it with `model`
    return document
