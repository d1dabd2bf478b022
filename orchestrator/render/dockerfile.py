"""Rendering: a `BuildPlan` becomes Dockerfile text through the Jinja2 templates. Pure and deterministic.

`StrictUndefined` turns a template typo into an error instead of an empty string; `keep_trailing_newline`
and a fixed environment make the same plan give byte-identical output.
"""

from __future__ import annotations

import jinja2

from orchestrator import __version__
from orchestrator.errors import TemplateError
from orchestrator.plan.build import BuildPlan
from orchestrator.resources import jinja_environment, templates_root


def render_dockerfile(plan: BuildPlan) -> str:
    try:
        text = (
            jinja_environment(templates_root(), autoescape=False)
            .get_template(plan.template)
            .render(plan=plan, orch_version=__version__)
        )
    except jinja2.TemplateError as exc:
        raise TemplateError(f"rendering {plan.template} failed: {exc}") from None
    return text.rstrip("\n") + "\n"
