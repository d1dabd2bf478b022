"""How far a dossier travels through the code: the module walk of one `orch` command, traced in-process.

Runs one orch command (by default `orch rebuild` of the tiny-embeddings example, which needs the Docker
engine) under `sys.setprofile` and follows every call from one orch module into another. It prints:

- modules visited: distinct `orchestrator.*` modules that ran code;
- calls up the layers: a call from a module into a module of a HIGHER layer (a callback or a back edge;
  the layers are docs/architecture.md's, utilities count as the lowest);
- re-entries: a call into a layered package (cli, pipeline, stages, ..., model; utilities left out) that
  had already been entered and left (not one still on the stack): the walk came back to a package it
  had left, the "ping-pong" of a pipeline whose steps live in several places.

The same layer table applies to the code before and after the architecture step (the modules' contents
did not change when they moved into packages), so the figures compare. Not a timing: the numbers are
counts and do not depend on the machine.

    .venv/bin/python benchmarks/module_walk.py [-- orch arguments]
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

# Highest first; a module's layer is the first prefix that matches. Everything else under orchestrator.
# (errors, fsutil, redact, untrusted, resources, vendor, ...) is a utility: the lowest layer.
LAYERS = (
    "orchestrator.cli",
    "orchestrator.pipeline",
    "orchestrator.stages|orchestrator.record|orchestrator.lock",
    "orchestrator.compare",
    "orchestrator.host",
    "orchestrator.engine",
    "orchestrator.checks",
    "orchestrator.report|orchestrator.render",
    "orchestrator.plan",
    "orchestrator.dossier",
    "orchestrator.model",
)


def layer_of(module: str) -> int:
    for rank, names in enumerate(LAYERS):
        for name in names.split("|"):
            if module == name or module.startswith(name + "."):
                return len(LAYERS) - rank
    return 0


class Walk:
    def __init__(self) -> None:
        self.stack: list[str] = []
        self.packages: list[str] = []
        self.entered_packages: set[str] = set()
        self.entered: set[str] = set()
        self.up = 0
        self.reentries = 0
        self.reentries_above_model = 0
        self.up_edges: dict[tuple[str, str], int] = {}

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        module = frame.f_globals.get("__name__", "")
        # Import-time module bodies are not part of the walk: only functions that ran count.
        if not isinstance(module, str) or not module.startswith("orchestrator") or frame.f_code.co_name == "<module>":
            module = ""
        if event == "call":
            caller = next((m for m in reversed(self.stack) if m), "")
            if module and caller and module != caller and layer_of(module) > layer_of(caller):
                self.up += 1
                self.up_edges[(caller, module)] = self.up_edges.get((caller, module), 0) + 1
            package = ".".join(module.split(".")[:2]) if module and layer_of(module) else ""
            caller_package = next((m for m in reversed(self.packages) if m), "")
            if package and package != caller_package:
                if package in self.entered_packages and package not in self.packages:
                    self.reentries += 1
                    # model/ is where values are made and validated at every boundary: coming back to
                    # it is the design, not ping-pong, so it is also counted without it.
                    if package != "orchestrator.model":
                        self.reentries_above_model += 1
                self.entered_packages.add(package)
            if module:
                self.entered.add(module)
            self.stack.append(module)
            self.packages.append(package)
        elif self.stack:
            self.stack.pop()
            self.packages.pop()


def main(argv: list[str]) -> int:
    from orchestrator.cli.main import cli

    with tempfile.TemporaryDirectory(prefix="orch-walk-") as scratch:
        args = argv or ["rebuild", "examples/tiny-embeddings/dossier.yaml", "--out", str(Path(scratch) / "out")]
        walk = Walk()
        run: Callable[..., Any] = cli.main
        sys.setprofile(walk.profile)
        try:
            run(args=args, standalone_mode=False)
        except SystemExit:
            pass
        finally:
            sys.setprofile(None)
    print(f"command: orch {' '.join(args)}")
    print(f"modules visited: {len(walk.entered)}")
    print(f"calls up the layers: {walk.up} over {len(walk.up_edges)} distinct module pairs")
    print(f"re-entries into a layered package already left: {walk.reentries}")
    print(f"  of which into a package other than model/: {walk.reentries_above_model}")
    for (caller, callee), count in sorted(walk.up_edges.items(), key=lambda item: -item[1])[:15]:
        print(f"  up: {caller} -> {callee} x{count}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
