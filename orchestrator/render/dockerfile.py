"""Rendering: a `BuildPlan` becomes Dockerfile text through the Jinja2 templates. Pure and deterministic.

`StrictUndefined` turns a template typo into an error instead of an empty string; `keep_trailing_newline`
and a fixed environment make the same plan give byte-identical output.
"""

from __future__ import annotations

import hashlib

from orchestrator import __version__
from orchestrator.plan.build import (
    CUDA_WHEELS,
    EXT_OUT,
    EXT_SOURCES,
    FEED_FETCH,
    FEED_URL,
    BuildPlan,
)
from orchestrator.plan.builder import INSTALL_SCRIPT
from orchestrator.resources import probe_source, render_template, templates_root


def feed_fetch_source() -> bytes:
    """The feed build's wheel copier, as written into the context and checked by the install step."""
    return probe_source(FEED_FETCH).encode("utf-8")


def render_dockerfile(plan: BuildPlan) -> str:
    text = render_template(
        templates_root(),
        plan.template,
        autoescape=False,
        trim=False,
        plan=plan,
        orch_version=__version__,
        ext_sources=EXT_SOURCES,
        ext_out=EXT_OUT,
        cuda_wheels=CUDA_WHEELS,
        feed_url=FEED_URL,
        feed_fetch=FEED_FETCH,
        install_script=INSTALL_SCRIPT,
        feed_fetch_sha256=hashlib.sha256(feed_fetch_source()).hexdigest() if plan.wheel_feed else "",
    )
    return text.rstrip("\n") + "\n"
