"""Step `fetch`: the dossier's remote items in the host's cache before anything is built or started.

Each item is found in the cache (hashed again) or fetched from its source and checked (remote/fetch.py). A
source that cannot be reached or refuses the credential stops the program (exit 3, the item, the source and
the variable named); other bytes than the declared ones stop it as bad input (exit 2, both hashes). The
credential's value is read from this process's environment when the step runs, by the name the item gives.
"""

from __future__ import annotations

import os

from orchestrator.plan.program import FetchSources
from orchestrator.remote.cache import ContentCache, max_bytes_from
from orchestrator.remote.fetch import ensure_item, remote_items
from orchestrator.stages.state import Run, StepOutcome


def do_fetch_sources(step: FetchSources, run: Run) -> StepOutcome:
    run.hooks.on_probe_stage("fetch")
    cache = ContentCache(step.cache, max_bytes_from(os.environ))
    wanted = {item.label for item in step.items}
    done = [ensure_item(item, cache, os.environ) for item in remote_items(run.loaded.model) if item.label in wanted]
    fetched = [entry for entry in done if entry.status != "cached"]
    if not fetched:
        return StepOutcome("reused", f"{len(done)} item(s) already in the cache, hashed again")
    notes = [f"{entry.item.label}: {entry.status}" + (f" ({entry.note})" if entry.note else "") for entry in done]
    return StepOutcome("done", "; ".join(notes))
