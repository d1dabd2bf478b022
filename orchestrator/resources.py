"""The one place that finds files shipped inside the package: templates, probes and vendor data.

Never a path relative to the working directory: `importlib.resources` works the same from a
checkout (editable install), an installed wheel or a zipapp.
"""

from __future__ import annotations

import json
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Any

from orchestrator.errors import TemplateError
from orchestrator.text import markdown_code, markdown_text

if TYPE_CHECKING:
    import jinja2


def templates_root() -> Traversable:
    return resources.files("orchestrator.templates").joinpath("dockerfiles")


def report_templates_root() -> Traversable:
    """The report's templates (`templates/report/`: HTML and Markdown), shipped beside the Dockerfile templates."""
    return resources.files("orchestrator.templates").joinpath("report")


def handover_templates_root() -> Traversable:
    """The hand-over's documents (`templates/handover/`: PROCEDURE.md, ACCESS.md)."""
    return resources.files("orchestrator.templates").joinpath("handover")


def nightly_templates_root() -> Traversable:
    """The nightly summary's page (`templates/nightly/`)."""
    return resources.files("orchestrator.templates").joinpath("nightly")


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

    environment = jinja2.Environment(
        loader=jinja2.FunctionLoader(load),
        undefined=jinja2.StrictUndefined,
        autoescape=autoescape,
        keep_trailing_newline=True,
        trim_blocks=trim,
        lstrip_blocks=trim,
    )
    # The one place escaping is registered: HTML is autoescaped by Jinja itself; Markdown values go
    # through `md` (prose) or `code` (a code span; `code(cell=True)` inside a table row), from text.py.
    environment.filters["md"] = markdown_text
    environment.filters["code"] = markdown_code
    return environment


def render_template(root: Traversable, template: str, /, *, autoescape: bool, trim: bool = True, **context: Any) -> str:
    """One of orch's templates rendered; a template that fails is orch's bug, said once here as `TemplateError`."""
    import jinja2

    try:
        return jinja_environment(root, autoescape=autoescape, trim=trim).get_template(template).render(**context)
    except jinja2.TemplateError as exc:
        raise TemplateError(f"rendering {template} failed: {exc}") from None
