"""The wheel feed on the real engine: a build step reaches the feed and nothing else, and the feed goes away.

`orch build` of the CPU examples installs from the feed (tests/integration/test_build.py checks the result);
here the feed itself: what a step sharing its namespace can and cannot reach, and its failure message.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import docker
import pytest

from orchestrator.engine import BuildRequest, Engine, RemoveImage
from orchestrator.errors import EnvironmentFailure
from orchestrator.plan.build import FEED_PORT, FEED_URL
from orchestrator.plan.specs import ServiceSpec
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build_context import context_tar
from tests.integration.helpers import SESSION_FILTER, SESSION_ID, session_containers

LOCK = b"tiny==1.0 --hash=sha256:00\n"


def _served() -> io.BytesIO:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        folder = tarfile.TarInfo("feed")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        lock = tarfile.TarInfo("feed/requirements.lock")
        lock.size, lock.mode = len(LOCK), 0o644
        tar.addfile(lock, io.BytesIO(LOCK))
    data.seek(0)
    return data


def _spec(image: str, python: str = "python3.11") -> ServiceSpec:
    command = (python, "-m", "http.server", str(FEED_PORT), "--bind", "127.0.0.1", "--directory", "/feed")
    return ServiceSpec(image=image, command=command)


def _feed_containers() -> set[str]:
    client = docker.from_env()
    try:
        found = client.containers.list(all=True, filters={"label": [SESSION_FILTER, "io.orch.role=wheel-feed"]})
        return {str(c.id) for c in found}
    finally:
        client.close()


def test_a_step_in_the_feeds_namespace_reads_the_feed_and_reaches_nothing_else(
    engine: Engine, base_image: BaseOutcome, tmp_path: Path
) -> None:
    # Each RUN asserts from inside the build; a failed assertion fails the build, which the test reads.
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_image.ref}\nLABEL {SESSION_FILTER}\n"
        f"RUN python3.11 -c \"import urllib.request as r; assert r.urlopen('{FEED_URL}requirements.lock').read() "
        f'== {LOCK!r}"\n'
        # Only the loopback interface: no bridge, so no gateway, no other container, no internet.
        "RUN python3.11 -c \"import socket; names = [n for _, n in socket.if_nameindex()]; assert names == ['lo'], "
        'names"\n'
        'RUN python3.11 -c "import socket; s = socket.socket(); s.settimeout(3); '
        "code = s.connect_ex(('1.1.1.1', 443)); assert code != 0, code\"\n"
    )
    tag = f"orch-test-{SESSION_ID}/feed-net:1"
    image = engine.image(base_image.ref)
    assert image is not None
    with engine.serve(_spec(image.id), _served()) as feed:
        assert feed.id in _feed_containers(), "the feed runs, labelled for its session"
        tar = context_tar(tmp_path)
        with tar.file:
            outcome = engine.build(BuildRequest(tar.file, tag, network="wheel-feed", feed=feed.id, no_cache=True))
    try:
        assert outcome.image_id is not None, outcome.log[-2000:]
        assert "Using cache" not in outcome.log, "every asserting step ran, none came from the cache"
    finally:
        engine.remove(RemoveImage(tag))
    assert not _feed_containers(), "the feed is removed once the build is done"


def test_the_same_step_without_the_feed_fails_to_connect(
    engine: Engine, base_image: BaseOutcome, tmp_path: Path
) -> None:
    """The control: with network none the feed's URL is refused, so the first test's read did come from it."""
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_image.ref}\nLABEL {SESSION_FILTER}\n"
        f"RUN python3.11 -c \"import urllib.request as r; r.urlopen('{FEED_URL}requirements.lock')\"\n"
    )
    tar = context_tar(tmp_path)
    with tar.file:
        outcome = engine.build(
            BuildRequest(tar.file, f"orch-test-{SESSION_ID}/no-feed:1", network="none", no_cache=True)
        )
    assert outcome.image_id is None
    assert "Connection refused" in outcome.log or "Errno 111" in outcome.log, outcome.log[-1500:]


def test_a_feed_that_cannot_start_is_one_clear_error_and_leaves_nothing(
    engine: Engine, base_image: BaseOutcome
) -> None:
    image = engine.image(base_image.ref)
    assert image is not None
    before = session_containers()
    with (
        pytest.raises(EnvironmentFailure, match=r"wheel feed.*python9\.9"),
        engine.serve(_spec(image.id, python="python9.9"), _served()),
    ):
        pytest.fail("the feed started with a Python the image does not have")
    assert session_containers() <= before, "the failed feed's container was removed"
