"""The dossier's JSON Schema, as `orch schema` prints it and docs/dossier-schema.json stores it."""

from __future__ import annotations

from typing import Any

from orchestrator.dossier.models import SCHEMA_VERSION, Dossier

SCHEMA_ID = f"https://orch.invalid/schema/dossier-v{SCHEMA_VERSION}.json"


def dossier_json_schema() -> dict[str, Any]:
    schema = Dossier.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
