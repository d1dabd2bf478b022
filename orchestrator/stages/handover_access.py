"""ACCESS.md of a hand-over folder: the credentials the dossier needs, by the names of their variables only."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.dossier.load import LoadedDossier
from orchestrator.remote.fetch import CREDENTIAL_FORM
from orchestrator.resources import handover_templates_root, render_template


@dataclass(frozen=True)
class Credential:
    """One credential a dossier needs, by name: for a package index, or for a data set or weights file."""

    variable: str
    kind: str  # "index", "data" or "weights"
    name: str
    where: str
    #: What the value looks like (a remote item's, by its scheme: remote/fetch.py CREDENTIAL_FORM).
    form: str = "whatever the provider issues"


def access_md(loaded: LoadedDossier) -> str:
    model = loaded.model
    credentials = [
        Credential(variable=index.access, kind="index", name=index.url, where=index.url)
        for index in model.python.indexes
        if index.access
    ]
    for kind, items in (("data", model.data), ("weights", model.weights)):
        credentials += [
            Credential(
                variable=item.access,
                kind=kind,
                name=item.name,
                where=item.uri or item.path or "",
                form=CREDENTIAL_FORM.get(item.uri.partition("://")[0], "")
                if item.uri
                else "whatever the provider issues",
            )
            for item in items
            if item.access
        ]
    return render_template(
        handover_templates_root(), "ACCESS.md.j2", autoescape=False, name=model.name, credentials=credentials
    )
