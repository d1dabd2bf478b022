"""The one place that finds files shipped inside the package: templates, probes and vendor data.

Never a path relative to the working directory: `importlib.resources` works the same from a
checkout (editable install), an installed wheel or a zipapp.
"""

from __future__ import annotations

import json
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2


def templates_root() -> Traversable:
    return resources.files("orchestrator.templates").joinpath("dockerfiles")


def report_templates_root() -> Traversable:
    """The HTML report's templates (`templates/report/`), shipped beside the Dockerfile templates."""
    return resources.files("orchestrator.templates").joinpath("report")


def probes_root() -> Traversable:
    return resources.files("orchestrator.probes")


def probe_source(name: str) -> str:
    return probes_root().joinpath(name).read_text(encoding="utf-8")


def data_json(name: str) -> Any:
    """A vendor data table (`orchestrator/data/NAME`), parsed."""
    return json.loads(resources.files("orchestrator.data").joinpath(name).read_text(encoding="utf-8"))


def jinja_environment(root: Traversable, *, autoescape: bool, trim: bool = False) -> jinja2.Environment:
    """A Jinja2 environment over one of the packaged template folders: templates are files, never
    Python strings, and `StrictUndefined` turns a typo into an error instead of an empty string."""
    import jinja2

    def load(name: str) -> str:
        return root.joinpath(name).read_text(encoding="utf-8")

    return jinja2.Environment(
        loader=jinja2.FunctionLoader(load),
        undefined=jinja2.StrictUndefined,
        autoescape=autoescape,
        keep_trailing_newline=True,
        trim_blocks=trim,
        lstrip_blocks=trim,
    )
