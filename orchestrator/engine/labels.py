"""Extra labels an operator asks orch to put on everything it creates on an engine (`ORCH_LABELS`).

A Docker engine is often shared: by the users of one GPU server, by a nightly matrix and a developer,
by two test runs. Whoever cleans up must be able to find *their own* objects and nothing else, without
a global prune. `ORCH_LABELS=key=value[,key=value...]` adds labels to every container orch starts and
to every image layer its builds create: they are rendered as the first instruction of each build stage,
so the intermediate images of a failed build carry them too (image labels are inherited by the layers
above). Cleaning up is then `docker image rm $(docker image ls -aq --filter label=key=value)`.

A stage-opening label changes the parent of every later layer: a build with other extra labels does not
reuse the layers of a build without them. That is the point for a test session or a nightly run (each
is cold and self-contained); leave `ORCH_LABELS` unset for a workstation's warm cache.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from orchestrator.errors import BadInput

ENV_VAR = "ORCH_LABELS"
# Docker's own recommendation for label keys: lower-case alphanumerics, dots and dashes, reverse-DNS style.
# https://docs.docker.com/engine/manage-resources/labels/#key-format-recommendations
_KEY = re.compile(r"^[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?$")
_VALUE = re.compile(r"^[A-Za-z0-9_.:/@+-]*$")
#: Keys orch sets itself: an extra label must not change what orch's own labels mean.
_RESERVED_PREFIX = "io.orch."
#: `io.orch.cell`: one nightly cell's objects, which its target removes after stopping it (nightly/targets).
_ALLOWED_RESERVED = ("io.orch.session", "io.orch.test-session", "io.orch.night", "io.orch.cell")


def parse_extra_labels(text: str | None) -> dict[str, str]:
    """`key=value,key=value` → a dict; raises BadInput naming the variable and the bad item."""
    labels: dict[str, str] = {}
    for raw in (text or "").split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not _KEY.match(key) or not _VALUE.match(value):
            raise BadInput(
                f"{ENV_VAR}: {item!r} is not a label of the form key=value",
                hint="Keys: lower-case letters, digits, dots and dashes (e.g. com.example.night=2026-12-01); "
                "values: letters, digits and _.:/@+- ; items separated by commas.",
            )
        if key.startswith(_RESERVED_PREFIX) and key not in _ALLOWED_RESERVED:
            raise BadInput(
                f"{ENV_VAR}: {key!r} is one of orch's own labels",
                hint=f"Use a key of your own namespace, or one of {', '.join(_ALLOWED_RESERVED)}.",
            )
        labels[key] = value
    return labels


def extra_labels_from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    return parse_extra_labels(environ.get(ENV_VAR))


TAG_NAMESPACE_VAR = "ORCH_TAG_NAMESPACE"
DEFAULT_TAG_NAMESPACE = "orch"
# A repository path as Docker accepts it: lower-case components joined by `/`, each made of alphanumerics
# separated by `.`, `_`, `__` or dashes (distribution/reference's grammar, without a registry host).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAMESPACE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")


def parse_tag_namespace(text: str | None) -> str:
    """The repository prefix of orch's default tags (`<namespace>/<dossier name>:<identity>`).

    Two users of one engine who rebuild the same dossier would otherwise share one tag, and one's build
    would re-point (and one's clean-up remove) the other's: give each its own namespace
    (`ORCH_TAG_NAMESPACE=orch-alice`); the test suite uses one per session.
    """
    value = (text or "").strip()
    if not value:
        return DEFAULT_TAG_NAMESPACE
    if not _NAMESPACE.match(value):
        raise BadInput(
            f"{TAG_NAMESPACE_VAR}: {value!r} is not a repository prefix Docker accepts",
            hint="Lower-case letters and digits, separated by '.', '_', '-' or '/', e.g. orch-alice or team/orch.",
        )
    return value


def tag_namespace_from_environment(environ: Mapping[str, str]) -> str:
    return parse_tag_namespace(environ.get(TAG_NAMESPACE_VAR))
