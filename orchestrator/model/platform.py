"""Closed vocabularies shared by every layer: the platform a dossier targets, how its Python installs, orch's labels.

Defined once here (the lowest layer) so the dossier schema, the plan, the vendor tables, the reports and
`orch compare` all spell them the same way.
"""

from __future__ import annotations

from typing import Literal

#: The accelerator stack a dossier (or one of its variants) targets.
Platform = Literal["cpu", "cuda", "rocm"]
#: How the image's Python packages install: from the index at build time, or from wheels the host collected.
InstallMode = Literal["online", "wheelhouse"]
#: What installs the lock in the builder stage: uv (from its own pinned wheel) or the venv's pip.
Installer = Literal["uv", "pip"]
#: The prefix of every label orch puts on images and containers (`io.orch.dossier.identity`, …).
LABEL_PREFIX = "io.orch"
