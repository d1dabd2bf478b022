"""The sample's container started together with the device probe's (plan/program.py `sample_runs_alongside`).

The sample stage runs in one worker thread while the main thread runs the device stage; the sample step then
takes its result, or, when the device stage failed, stops its container (by a label only this run's sample
carries) and leaves its result unread. Whatever stops the program early (an error, Ctrl-C) stops it the same
way, so no container outlives the run. The engine is used from both threads: docker-py's client serves
concurrent requests (its connection pool), and the fake engine only appends to lists.
"""

from __future__ import annotations

import contextlib
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine, RemoveContainers
from orchestrator.model.report import StageResult
from orchestrator.plan.run import RunPlan
from orchestrator.plan.specs import LABEL_PREFIX
from orchestrator.stages.sample_stage import sample_stage

#: The label that names one run's sample container, so that stopping it touches nothing else.
ALONGSIDE_LABEL = f"{LABEL_PREFIX}.alongside"
#: How often a stop is asked again while the worker has not yet created the container it is to stop.
_STOP_POLL_S = 0.2


@dataclass(frozen=True)
class Alongside:
    """A sample stage running in its worker thread, and the label of its container."""

    future: Future[StageResult]
    label: str


def start_alongside(engine: Engine, loaded: LoadedDossier, plan: RunPlan) -> Alongside:
    """Start the sample stage (fingerprints, then its container) in a worker thread."""
    token = uuid.uuid4().hex
    sample = replace(plan.sample, labels={**plan.sample.labels, ALONGSIDE_LABEL: token})
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="orch-sample")
    try:
        future = executor.submit(sample_stage, engine, loaded, replace(plan, sample=sample))
    finally:
        executor.shutdown(wait=False)  # the thread ends with its one task
    return Alongside(future, f"{ALONGSIDE_LABEL}={token}")


def stop(engine: Engine, alongside: Alongside) -> None:
    """Remove the sample's container (running or not) and wait for the worker; its result or error is dropped.

    The worker may not have created the container yet when asked: the removal is repeated until it ends."""
    while not alongside.future.done():
        with contextlib.suppress(Exception):  # an engine gone away: the worker's own error ends it
            engine.remove(RemoveContainers(alongside.label))
        with contextlib.suppress(Exception):
            alongside.future.result(timeout=_STOP_POLL_S)
            break
    with contextlib.suppress(Exception):
        alongside.future.result()
