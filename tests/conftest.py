from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.paths import EXAMPLES

#: The time budget of each test folder, in seconds of test time (setup + call + teardown, summed over its
#: tests; with `-n 2` the folders overlap, so wall time is about the integration folder's). Measured and
#: explained in docs/testing.md; the run prints each folder's total against it (`pytest_terminal_summary`).
FOLDER_BUDGET_S = {
    "tests/unit": 90,
    "tests/golden": 30,
    "tests/system": 90,
    # The share of issue 22's target (pytest ≤ 25 min on the 2-core machine); measured 27.4 min: over.
    "tests/integration": 24 * 60,
}


#: The integration files that form the second engine session under xdist (see `pytest_xdist_make_scheduler`).
NIGHTLY = ("tests/integration/test_nightly_targets_real.py", "tests/integration/test_nightly_two_nights.py")
#: The Podman file: another engine (the test user's rootless Podman), so a scope and a session of its own too.
PODMAN = ("tests/integration/test_podman.py",)
#: The integration files that run beside the main engine session (never pruning its build cache).
BESIDE_MAIN = NIGHTLY + PODMAN


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make test`'s `-n 2 --dist loadgroup`: every integration test on one worker, in file order.

    xdist's own loadgroup reads the `xdist_group` mark by renaming each node id (`item._nodeid`), which
    pytest 9.2 no longer reads (the id is `item._id` now): the mark groups nothing and the integration
    tests were spread over both workers (seen: two sessions on one engine, each with its own warm image and
    sweep). This scheduler keys the scope on the path instead: tests/integration is one scope, every other
    test its own. docs/testing.md says why the integration tests share one worker.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class EngineGroup(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            # The nightly targets' tests wait on the second daemon and on Slurm most of their time: a scope of
            # their own (a session of their own, its own label) lets them wait beside the main engine session.
            if nodeid.startswith(NIGHTLY):
                return "tests/integration (nightly targets)"
            if nodeid.startswith(PODMAN):
                return "tests/integration (podman)"
            return "tests/integration" if nodeid.startswith("tests/integration/") else nodeid

    return EngineGroup(config, log)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each test folder's total time against its budget (docs/testing.md): where a slower suite comes from."""
    totals: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                folder = "/".join(report.nodeid.split("/")[:2])
                totals[folder] = totals.get(folder, 0.0) + report.duration
    if not totals:
        return
    terminalreporter.section("time per test folder (budget: docs/testing.md)")
    for folder, total in sorted(totals.items()):
        budget = FOLDER_BUDGET_S.get(folder)
        verdict = "" if budget is None else (" over budget" if total > budget else "")
        limit = "no budget" if budget is None else f"budget {budget:.0f} s"
        terminalreporter.write_line(f"{folder}: {total:.0f} s ({limit}){verdict}")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="Rewrite golden files instead of comparing.")


@pytest.fixture
def tiny_example(tmp_path: Path) -> Path:
    """A private copy of examples/tiny-embeddings that a test may change."""
    target = tmp_path / "tiny-embeddings"
    shutil.copytree(EXAMPLES / "tiny-embeddings", target)
    return target


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """GPU tests run only where a GPU interpreter is named; CI never needs them."""
    import os

    if os.environ.get("ORCH_GPU_PYTHON"):
        return
    skip = pytest.mark.skip(reason="needs a GPU machine: set ORCH_GPU_PYTHON to an interpreter with CUDA torch")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


_CACHE_BEFORE: dict[str, set[str]] = {}


def _runs_integration(config: pytest.Config) -> bool:
    integration = (config.rootpath / "tests" / "integration").resolve()
    for arg in config.args or [str(config.rootpath)]:
        path = (config.rootpath / arg.split("::")[0]).resolve()
        if path == integration or integration.is_relative_to(path) or path.is_relative_to(integration):
            return True
    return False


def pytest_sessionstart(session: pytest.Session) -> None:
    """The controlling process notes the engine's build-cache records before any worker builds."""
    if hasattr(session.config, "workerinput") or not _runs_integration(session.config):
        return
    try:
        import docker

        from tests.integration.housekeeping import build_cache_ids

        client = docker.from_env()
        _CACHE_BEFORE["ids"] = build_cache_ids(client)
        client.close()
    except Exception:  # no engine: the integration tests say so themselves (they fail under CI=true)
        return


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Once every worker is done: the BuildKit cache records the run made go (housekeeping.prune_build_cache)."""
    before = _CACHE_BEFORE.pop("ids", None)
    if before is None or hasattr(session.config, "workerinput"):
        return
    import docker

    from tests.integration.housekeeping import prune_build_cache

    client = docker.from_env()
    try:
        prune_build_cache(client, keep=before)
    finally:
        client.close()
