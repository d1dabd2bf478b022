"""Integration tests run against a real Docker engine.

On a laptop without one they are skipped; under CI=true a missing engine is a failure, never a skip
(`make test` starts one first with scripts/ensure-engine.sh).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import Engine, connect
from orchestrator.engine.labels import ENV_VAR, TAG_NAMESPACE_VAR
from orchestrator.errors import EngineUnavailable
from orchestrator.model.build_record import BuildRecord
from orchestrator.stages.base_image import BaseOutcome, BaseRecipe, ensure_base_image
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.execute import run_build
from tests.conftest import BESIDE_MAIN
from tests.integration.foreign import ForeignObjects, make_foreign_objects
from tests.integration.helpers import SESSION_FILTER, SESSION_TAG_NAMESPACE, session_containers
from tests.integration.housekeeping import (
    SETTLE_S,
    build_cache_ids,
    prune_build_cache,
    remove_session_containers,
    remove_session_images,
    session_images,
)
from tests.paths import EXAMPLES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


#: What the integration suite needs free at its start. Measured with a disk monitor over a full run
#: (docs/benchmarks.md, "Disk used by make test"): at most 7.5 GiB above the start outside the CUDA 13
#: test, which checks for its own 27.3 GiB (`needs_free_space`). Images are removed as their test ends,
#: hand-over copies are hard links, and a passed test's tmp_path is deleted (tmp_path_retention_policy).
NEEDED_FREE_GIB = 10


def _free_gib(path: str) -> float:
    return shutil.disk_usage(path).free / 2**30


def free_space_short(docker_root: str, needed_gib: float) -> str | None:
    """Why the disk is too small for `needed_gib` more (temporary folder or engine data root), or None."""
    places = {"the temporary folder": tempfile.gettempdir()}
    if os.path.isdir(docker_root):  # a local engine: its images land on this machine's disk
        places["the engine's data root"] = docker_root
    if all(_free_gib(path) >= needed_gib for path in places.values()):
        return None
    free = "; ".join(f"{name} {path} has {_free_gib(path):.1f} GiB free" for name, path in places.items())
    return f"needs {needed_gib:g} GiB free and {free}"


def _check_free_space(docker_root: str) -> None:
    """Fail at once, saying where and how much, instead of a cascade of ENOSPC errors mid-run.

    The machines this runs on share their disk with others, and its free space varies (seen: 287 MB).
    """
    short = free_space_short(docker_root, NEEDED_FREE_GIB)
    if short is not None:
        message = f"the integration tests {short}; free some (`docker image prune`, old test folders) and run again"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _docker_root(client: docker.DockerClient) -> str:
    """Where the engine keeps its images (checked for free space only when it is on this machine)."""
    return str(client.info().get("DockerRootDir", "/var/lib/docker"))


def _removable_made_since(client: docker.DockerClient, before: set[str]) -> None:
    """Remove this session's images made since `before`; never the base image, never anyone else's.

    Every integration build makes new layers of torch's size (a builder stage with the wheels and an
    installed venv, then the final stage's copy): about 2 GB each, 15 GB for the CUDA 13 build. Left
    until the session's end they peaked at 33 GB over a full run on a disk shared with other machines,
    so they go when the test (or module, for a module's fixture) that made them ends. Only images with
    this session's label are considered (housekeeping.py), so another user's images and builds survive.
    """
    remove_session_images(client, keep=before)


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    # Before anything connects: every container and build layer of this session (orch subprocesses
    # included, they inherit the environment) carries the session label; see helpers.py.
    existing = os.environ.get(ENV_VAR, "")
    os.environ[ENV_VAR] = ",".join(filter(None, [existing, SESSION_FILTER]))
    os.environ[TAG_NAMESPACE_VAR] = SESSION_TAG_NAMESPACE
    try:
        connected = connect()
    except EngineUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no Docker engine answers: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    with connected as opened:
        yield opened


@pytest.fixture(scope="session")
def docker_client(engine: Engine) -> Iterator[docker.DockerClient]:
    """A raw SDK client for the suite's own housekeeping; checks free space first."""
    client = docker.from_env()
    _check_free_space(_docker_root(client))
    yield client
    client.close()


@pytest.fixture(scope="session")
def foreign_objects(docker_client: docker.DockerClient, base_image: BaseOutcome) -> Iterator[ForeignObjects]:
    """Another user's images and containers on the same engine, present for the whole session.

    At the end, after the session's own sweep, they must all still be there: the suite touched only
    what it made. Then they are removed by id (they are the suite's stand-ins, made here).
    """
    foreign = make_foreign_objects(docker_client, base_image.ref)
    yield foreign
    missing = foreign.missing(docker_client)
    foreign.remove(docker_client)
    assert not missing, f"the test suite removed or stopped another user's objects: {missing}"


@pytest.fixture(scope="session")
def _session_sweep(docker_client: docker.DockerClient, foreign_objects: ForeignObjects) -> Iterator[None]:
    """At the session's end: remove every container and image this session made, and only those."""
    yield
    remove_session_containers(docker_client, settle_s=SETTLE_S)
    left = remove_session_images(docker_client, settle_s=SETTLE_S)
    assert not left, f"the session could not remove its own images: {sorted(left)}"


@pytest.fixture
def needs_free_space(docker_client: docker.DockerClient) -> Callable[[float], None]:
    """For a test far heavier than the rest: skip it, saying why, when the disk cannot hold it.

    A skip, not a failure, even under CI=true: the shared disk's free space is not the project's to
    set, the rest of the suite still runs, and the reason is printed in the summary (-ra).
    """
    root = _docker_root(docker_client)

    def check(needed_gib: float) -> None:
        short = free_space_short(root, needed_gib)
        if short is not None:
            pytest.skip(f"this test {short}")

    return check


@pytest.fixture(scope="session")
def warm_tiny_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `--out` folder of the session's warm tiny-embeddings build (build.json, environment.json)."""
    return tmp_path_factory.mktemp("warm-tiny")


@pytest.fixture(scope="session", autouse=True)
def _warm_tiny_layers(
    _session_sweep: None,
    engine: Engine,
    base_image: BaseOutcome,
    warm_tiny_out: Path,
) -> BuildRecord:
    """examples/tiny-embeddings built once and kept until the session's end: its layers are the cache.

    Most integration tests build a changed copy of that example: same base, same lock, same wheels,
    so they reuse its OS and torch layers instead of installing torch again. Without this image the
    per-test and per-module removal below would make each of them a cold build (the suite took
    21 minutes instead of about 11). The session's final sweep removes it.
    """
    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    record = run_build(loaded, engine, BuildOptions(out=warm_tiny_out))
    assert record.image is not None, record.failure
    return record


@pytest.fixture(scope="module", autouse=True)
def _module_images_removed(docker_client: docker.DockerClient, request: pytest.FixtureRequest) -> Iterator[None]:
    before = session_images(docker_client)
    # The nightly files run beside the others, in a session of their own: only the main session prunes the
    # build cache, so no record a running test of the other is about to reuse goes under it.
    nightly = request.node.nodeid.startswith(BESIDE_MAIN)
    cache_before = set() if nightly else build_cache_ids(docker_client)
    yield
    _removable_made_since(docker_client, before)
    if not nightly:
        prune_build_cache(docker_client, keep=cache_before)


@pytest.fixture(autouse=True)
def _test_images_removed(docker_client: docker.DockerClient) -> Iterator[None]:
    before = session_images(docker_client)
    yield
    _removable_made_since(docker_client, before)


@pytest.fixture(scope="session")
def base_image(engine: Engine) -> BaseOutcome:
    """The local Debian base every example builds on; made once (about a minute) and then reused."""
    return ensure_base_image(engine, BaseRecipe())


@pytest.fixture
def no_leftover_containers(engine: Engine) -> Iterator[None]:
    before = session_containers()
    yield
    assert session_containers() == before, "orch left containers behind"
