"""Integration tests run against a real Docker engine.

On a laptop without one they are skipped; under CI=true a missing engine is a failure, never a skip
(`make test` starts one first with scripts/ensure-engine.sh).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import docker
import pytest

from orchestrator.base_image import LABEL as BASE_LABEL
from orchestrator.base_image import BaseOutcome, BaseRecipe, ensure_base_image
from orchestrator.engine import MANAGED_LABEL, Engine, connect
from orchestrator.errors import EngineUnavailable
from orchestrator.plan import LABEL_PREFIX


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


#: What the integration suite needs free at its start, measured with a disk monitor over a full run
#: (docs/benchmarks.md, "Disk"): images of torch builds share their layers, hand-over copies are hard
#: links, and passed tests' temporary folders are deleted as they end (tmp_path_retention_policy).
NEEDED_FREE_GIB = 8
IDENTITY_LABEL = f"{LABEL_PREFIX}.dossier.identity"


def _free_gib(path: str) -> float:
    return shutil.disk_usage(path).free / 2**30


def _check_free_space(docker_root: str) -> None:
    """Fail at once, saying where and how much, instead of a cascade of ENOSPC errors mid-run.

    The machines this runs on share their disk with others, and its free space varies (seen: 287 MB).
    """
    places = {"the temporary folder": tempfile.gettempdir()}
    if os.path.isdir(docker_root):  # a local engine: its images land on this machine's disk
        places["the engine's data root"] = docker_root
    short = [f"{name} {path} has {_free_gib(path):.1f} GiB free" for name, path in places.items()]
    if any(_free_gib(path) < NEEDED_FREE_GIB for path in places.values()):
        message = (
            f"the integration tests need {NEEDED_FREE_GIB} GiB free and {'; '.join(short)}; "
            "free some (`docker image prune`, old test folders) and run again"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _image_ids(client: docker.DockerClient) -> set[str]:
    return {str(image.id) for image in client.images.list()}


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    try:
        connected = connect()
    except EngineUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no Docker engine answers: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    client = docker.from_env()
    _check_free_space(str(client.info().get("DockerRootDir", "/var/lib/docker")))
    before = _image_ids(client)
    yield connected
    connected.close()
    _remove_images_made_since(client, before)
    client.close()


def _remove_images_made_since(client: docker.DockerClient, before: set[str]) -> None:
    """Remove the images this session built (never the base image, never what was there before).

    Every integration build makes a new image of torch's size; left behind they fill a shared disk
    from one run to the next. Removing a top-level image removes its untagged build steps with it.
    An image still in use is left for the next run.
    """
    for image in client.images.list():
        labels = image.labels or {}
        if str(image.id) in before or (BASE_LABEL in labels and IDENTITY_LABEL not in labels):
            continue
        try:
            client.images.remove(str(image.id), force=True)
        except docker.errors.APIError:
            continue
    client.images.prune(filters={"dangling": True})


@pytest.fixture(scope="session")
def base_image(engine: Engine) -> BaseOutcome:
    """The local Debian base every example builds on; made once (about a minute) and then reused."""
    return ensure_base_image(engine, BaseRecipe())


@pytest.fixture
def no_leftover_containers(engine: Engine) -> Iterator[None]:
    before = set(engine.containers(MANAGED_LABEL))
    yield
    assert set(engine.containers(MANAGED_LABEL)) == before, "orch left containers behind"
