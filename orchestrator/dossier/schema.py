"""The dossier's JSON Schema, as `orch schema` prints it and docs/dossier-schema.json stores it."""

from __future__ import annotations

from typing import Any

from orchestrator.dossier.doc_sections import extra_sections
from orchestrator.dossier.models import SCHEMA_VERSION, Dossier

SCHEMA_ID = f"https://orch.invalid/schema/dossier-v{SCHEMA_VERSION}.json"


def dossier_json_schema() -> dict[str, Any]:
    schema = Dossier.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


#: The dossier-folder rule (orchestrator/dossier/paths.py), as docs/dossier.md states it.
PATH_RULES = [
    "## Paths and links",
    "",
    "The dossier's folder is untrusted: a symlink there may point anywhere on the host. One rule holds for every",
    "path the dossier names (`code.source`, `code.entrypoint`, `python.requirements`,",
    "`python.reference_inventory`, local `python.find_links` folders, `data`/`weights` paths, `expect.inputs`,",
    "`ids.expected`, `compare.reference`,",
    "business-check files, and the same fields in variants), and for every file under the code folder:",
    "",
    "- A path is **relative to the dossier's folder and stays inside it**: no absolute path, no `..`, no NUL",
    "  byte. There is no option to widen this: keep (or hard-link) big weights inside the folder. A site-wide",
    "  wheel folder is the operator's to give, not the dossier's: the host's pip configuration",
    "  (`PIP_FIND_LINKS`, pip.conf) applies to the wheelhouse download as usual.",
    "- A **symlink is followed only when its target, fully resolved, lies inside the dossier's folder**. It is",
    "  then read as the file or folder it points to: the build context, the image and the hand-over receive",
    "  the content as a regular file, never the link. Followed links are recorded (`orch validate` lists",
    "  them; `.orch-render.json` in a rendered context has them under `links`) and their content is part",
    "  of the dossier's identity.",
    "- Any other link is refused, naming the link and its target: one leaving the folder, a dangling one, a",
    "  loop, or a folder link back into a folder that contains it.",
    "- Only regular files and folders are read. A FIFO, socket or device is refused by its kind without being",
    "  opened; a folder where a file is expected (or the reverse) is said as such.",
    "- Code taken from git (`code.revision`, a git URL) follows the same rule inside the exported tree: a",
    "  committed link leaving the tree is refused, one inside it becomes the file it names.",
    "",
    "The rule is checked when the dossier is loaded (`orch validate` refuses with exit code 2) and again",
    "whenever files are copied or mounted, since the folder may change in between. `orch validate` also",
    "hashes every file whose sha256 the dossier declares and stops at the first mismatch, showing both",
    "hashes in full.",
    "",
]


def _type_of(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return f"[{prop['$ref'].rsplit('/', 1)[-1]}](#{prop['$ref'].rsplit('/', 1)[-1].lower()})"
    if "const" in prop:
        return f"`{prop['const']!r}`"
    if "enum" in prop:
        return " \\| ".join(f"`{value}`" for value in prop["enum"])
    if "anyOf" in prop or "oneOf" in prop:
        options = [_type_of(option) for option in prop.get("anyOf", prop.get("oneOf", []))]
        return " \\| ".join(option for option in options if option)
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type_of(prop.get('items', {}))}"
    if kind == "object":
        extra = prop.get("additionalProperties")
        return f"mapping to {_type_of(extra)}" if isinstance(extra, dict) else "mapping"
    if kind == "null":
        return "null"
    return f"{kind}" + (f" (`{prop['pattern']}`)" if "pattern" in prop else "") if kind else "any"


def schema_markdown() -> str:
    """The dossier reference (docs/dossier.md), generated from the same schema `orch schema` prints, then the
    sample's mounts, the determinism knobs and the vendor tables (from the data files)."""
    schema = dossier_json_schema()
    sections: list[tuple[str, dict[str, Any]]] = [("Dossier", schema)]
    sections += sorted(schema.get("$defs", {}).items())
    out = [
        "# Dossier reference (schema version 1)",
        "",
        "Generated from the pydantic models by `orch schema --format markdown`; do not edit by hand.",
        "Unknown keys are errors. Relative paths resolve against the dossier's folder.",
        "",
        *PATH_RULES,
    ]
    for name, model in sections:
        out += [f"## {name}", ""]
        if model.get("description"):
            out += [" ".join(model["description"].split()), ""]
        properties = model.get("properties", {})
        if not properties:
            continue
        required = set(model.get("required", []))
        out += ["| key | type | required | default | description |", "| --- | --- | --- | --- | --- |"]
        for key, prop in properties.items():
            default = f"`{prop['default']!r}`" if "default" in prop else ""
            description = " ".join(str(prop.get("description", "")).split()).replace("|", "\\|")
            out.append(
                f"| `{key}` | {_type_of(prop)} | {'yes' if key in required else ''} | {default} | {description} |"
            )
        out.append("")
    out += extra_sections()
    return "\n".join(out).rstrip() + "\n"
