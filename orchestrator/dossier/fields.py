"""The dossier's building blocks shared by its sections: the strict base model and the path type.

Kept apart from `models` so that a section living in its own module (`extensions`) and the schema's
main module use the same definitions without importing each other.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


RelativePath = Annotated[
    str,
    StringConstraints(min_length=1, max_length=4096),
    Field(description="A path; relative paths resolve against the dossier's folder."),
]
