"""The built image's layers and their sizes, mapped to the Dockerfile steps orch rendered (build.json `layers`).

Pure: the engine's history (oldest first) of the image and of its base, and the rendered Dockerfile, in; typed
rows out. The first entries of the image's history are its base's (as many as the base's own history has);
each later one is an instruction of the final stage, in order. When the counts agree, each such layer is named
by the rendered instruction (orch's own text); otherwise by the engine's `created_by`.

The engine's text is not written as it is: the classic builder prefixes a RUN with the build args it saw and
their values (`|1 KEY=value /bin/sh -c …`), BuildKit likewise (`RUN |1 KEY=value …`). Those are cut before
anything else, then URLs are redacted and the line is cut short.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.engine import LayerEntry
from orchestrator.model.build_record import ImageLayer
from orchestrator.redact import redact
from orchestrator.text import one_line

BASE_STEP = "base image"
#: Characters kept of a step or created_by: a table cell, not the whole RUN script.
MAX_STEP_CHARS = 160
_BUILD_ARGS = re.compile(r"^(?P<run>RUN )?\|\d+ .*?(?=/bin/sh -c |$)", re.DOTALL)
_SHELL = "/bin/sh -c "
_NOP = "#(nop) "


def public_created_by(created_by: str) -> str:
    """`created_by` without build-arg values, with the shell wrapper read as the instruction, redacted, cut."""
    text = created_by.strip()
    match = _BUILD_ARGS.match(text)
    if match is not None:
        rest = text[match.end() :]
        text = ("RUN " + rest.removeprefix(_SHELL)) if rest else "RUN (build args left out)"
    elif text.startswith(_SHELL):
        command = text.removeprefix(_SHELL).lstrip()
        text = command.removeprefix(_NOP).strip() if command.startswith(_NOP) else "RUN " + command
    text = text.removesuffix("# buildkit").strip()
    return one_line(redact(text), MAX_STEP_CHARS)


def final_stage_instructions(dockerfile: str) -> list[str]:
    """The instructions after the last FROM, continuations joined, comments and blank lines left out."""
    instructions: list[str] = []
    pending = ""
    for raw in dockerfile.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        whole, pending = (pending + line).strip(), ""
        if whole.split(" ", 1)[0].upper() == "FROM":
            instructions = []
        else:
            instructions.append(whole)
    return instructions


def map_layers(entries: Sequence[LayerEntry], base_entries: int, dockerfile: str) -> list[ImageLayer]:
    """Each history entry (oldest first) as an `ImageLayer`; the first `base_entries` are the base's."""
    base_entries = min(base_entries, len(entries))
    own = entries[base_entries:]
    steps = final_stage_instructions(dockerfile)
    named = len(steps) == len(own)
    layers = [
        ImageLayer(step=BASE_STEP, created_by=public_created_by(entry.created_by), size_bytes=max(entry.size, 0))
        for entry in entries[:base_entries]
    ]
    for position, entry in enumerate(own):
        created_by = public_created_by(entry.created_by)
        step = one_line(redact(steps[position]), MAX_STEP_CHARS) if named else created_by
        layers.append(ImageLayer(step=step, created_by=created_by, size_bytes=max(entry.size, 0)))
    return layers
