"""`Recorded`: a frozen model of a document another program wrote, which serialises back as it was read.

Probe outputs and stage facts have optional keys: a device entry either describes the GPU or carries
only `error`; a failed stage records two facts, not twenty. Dumping such a model the usual way would
add every absent key as `null` and re-order the rest, so `report.json` (and the renderings and golden
files made from it) would change. A `Recorded` model dumps only the keys it was given, in the order it
was given them — and, unlike a dict, every key it can hold is a declared, typed field.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)


class Recorded(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_order(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        model = handler(data)
        if isinstance(data, dict) and isinstance(model, Recorded):
            model._order = tuple(key for key in data if isinstance(key, str))
        return model

    @model_serializer(mode="wrap")
    def _as_recorded(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        full: dict[str, Any] = handler(self)
        # Keys given at validation first, in their order; then fields set since (model_copy(update=…)).
        given = self._order + tuple(
            name for name in type(self).model_fields if name in self.model_fields_set and name not in self._order
        )
        return {key: full[key] for key in given if key in full}

    def recorded(self) -> dict[str, Any]:
        """The keys this value holds, in their order, as plain data (what report.json shows)."""
        return self.model_dump()


def mismatch_line(exc: ValidationError, probe: str) -> str:
    """One line naming the probe and the first field of its report that does not match the contract."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(the document)"
    count = exc.error_count()
    more = f" (and {count - 1} more)" if count > 1 else ""
    return f"{probe} printed a report that does not match its contract: field {field!r}: {first['msg']}{more}"
