"""A failed build's first error: pip's conflict explanation kept, a missing pin is bad input, a removed image
explained. The Docker adapter is driven by a fake client (no engine), the way it reads a real build stream."""

from __future__ import annotations

import contextlib
import io
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dossier.lock import parse_lock
from orchestrator.engine import BuildRequest, EngineInfo, EngineSettings, Served
from orchestrator.engine.build_log import build_failure, first_error, missing_pin
from orchestrator.engine.docker_engine import DockerEngine
from orchestrator.errors import BadInput, EnvironmentFailure, WheelhouseError
from orchestrator.stages.wheelhouse import TargetPlatform, collect_wheels

# pip 26's output for a lock whose pins conflict (captured from `pip download -r` of two packaging pins).
CONFLICT = """\
ERROR: Cannot install -r /orch/requirements.txt (line 1) and packaging==25.0 because these package versions have conflicting dependencies.

The conflict is caused by:
    The user requested packaging==24.0
    demo 1.0 depends on packaging==25.0 from https://bob:hunter2@idx.example/simple

To fix this you could try to:
1. loosen the range of package versions you've specified
2. remove package versions to allow pip to attempt to solve the dependency conflict

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts
"""

# pip 26 for a pin of a version no index has (captured from `pip download packaging==99.0`).
NO_SUCH_VERSION = """\
Looking in links: /opt/wheels
ERROR: Ignored the following yanked versions: 20.6
ERROR: Could not find a version that satisfies the requirement packaging==99.0 (from versions: 24.0, 25.0, 26.4)
ERROR: No matching distribution found for packaging==99.0
"""

# The same when a pip constraint (PIP_CONSTRAINT on the host) also names the package: pip calls it a conflict.
NO_SUCH_VERSION_CONSTRAINED = """\
ERROR: Cannot install torch==2.13.7 because these package versions have conflicting dependencies.

The conflict is caused by:
    The user requested torch==2.13.7
    The user requested (constraint) torch<=2.14.1

Additionally, some packages in these conflicts have no matching distributions available for your environment:
    torch

To fix this you could try to:
1. loosen the range of package versions you've specified
"""

# An index that cannot be reached: no version seen anywhere, so nothing says the pin is wrong.
UNREACHABLE = """\
WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError(...)': /simple/packaging/
ERROR: Could not find a version that satisfies the requirement packaging==24.0 (from versions: none)
ERROR: No matching distribution found for packaging==24.0
"""


class _FakeApi:
    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks = chunks

    def build(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield from self.chunks


class _FakeClient:
    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.api = _FakeApi(chunks)


def _build(chunks: list[dict[str, Any]]) -> Any:
    engine = DockerEngine(_FakeClient(chunks), "unix:///fake.sock")  # type: ignore[arg-type]
    return engine.build(BuildRequest(io.BytesIO(b""), "orch/x:1", network="none"))


def _failure(chunks: list[dict[str, Any]]) -> Any:
    """The adapter hands the log and the engine's error over; build_log reads why the build failed."""
    outcome = _build(chunks)
    assert outcome.image_id is None
    return build_failure(outcome.log, outcome.error)


def _step_chunks(output: str) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = [{"stream": "Step 5/9 : RUN pip install -r /orch/requirements.txt\n"}]
    chunks += [{"stream": line + "\n"} for line in output.splitlines()]
    chunks.append({"error": "The command '/bin/sh -c pip install' returned a non-zero code: 1"})
    return chunks


def test_a_pip_conflict_keeps_the_lines_that_say_what_conflicts() -> None:
    failure = _failure(_step_chunks(CONFLICT))
    assert failure.step == "RUN pip install -r /orch/requirements.txt"
    error = failure.first_error
    assert error.startswith("ERROR: Cannot install")
    assert "The conflict is caused by: The user requested packaging==24.0; demo 1.0 depends on packaging==25.0" in error
    assert "hunter2" not in error and "****@idx.example" in error, "the explanation is redacted like every log line"
    assert "\n" not in error, "still one line"


def test_first_error_names_the_missing_distribution_when_pip_adds_it() -> None:
    error = first_error(NO_SUCH_VERSION_CONSTRAINED.splitlines())
    assert error is not None
    assert "The user requested torch==2.13.7; The user requested (constraint) torch<=2.14.1" in error
    assert "no matching distribution for this platform: torch" in error


def test_first_error_without_a_conflict_is_the_first_error_line() -> None:
    assert first_error(["Collecting x", "E: Unable to locate package nosuch", "ERROR: later"]) == (
        "E: Unable to locate package nosuch"
    )
    assert first_error(["all fine"]) is None


def test_missing_pin_is_read_from_pips_two_wordings() -> None:
    plain = missing_pin(NO_SUCH_VERSION)
    assert plain is not None and plain.requirement == "packaging==99.0"
    assert plain.available == ("24.0", "25.0", "26.4")
    constrained = missing_pin(NO_SUCH_VERSION_CONSTRAINED)
    assert constrained is not None and constrained.requirement == "torch==2.13.7"
    assert missing_pin(UNREACHABLE) is None, "an unreachable index is the environment's fault, not the lock's"
    assert missing_pin(CONFLICT) is None, "a conflict between existing versions is not a missing pin"


def test_a_wheelhouse_pin_that_does_not_exist_is_bad_input_naming_the_lock(tmp_path: Path) -> None:
    lock = parse_lock(f"packaging==99.0 --hash=sha256:{'1' * 64}\n")

    def pip(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", NO_SUCH_VERSION)

    with pytest.raises(BadInput) as caught:
        collect_wheels(
            lock,
            TargetPlatform("3.11", "2.36"),
            tmp_path / "ctx",
            cache=tmp_path / "c",
            run=pip,
            environ={},
            lock_file="requirements-cpu.lock",
        )
    assert caught.value.exit_code == 2
    message = str(caught.value)
    assert "requirements-cpu.lock:1" in message and "packaging==99.0" in message
    assert "24.0, 25.0, 26.4" in message, "the versions that do exist are named"


def test_an_unreachable_index_stays_an_environment_failure(tmp_path: Path) -> None:
    lock = parse_lock(f"packaging==24.0 --hash=sha256:{'1' * 64}\n")

    def pip(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", UNREACHABLE)

    with pytest.raises(WheelhouseError) as caught:
        collect_wheels(
            lock, TargetPlatform("3.11", "2.36"), tmp_path / "ctx", cache=tmp_path / "c", run=pip, environ={}
        )
    assert caught.value.exit_code == 3


def test_an_image_removed_during_the_build_is_explained() -> None:
    chunks = [
        {"stream": "Step 1/9 : FROM orch/debian-python:bookworm\n"},
        {"error": "No such image: sha256:5fddc36635431b2ac36bd2dc1a1f8e7c57e42d8f3c6f5a0b6d2b1c3d4e5f6a7b"},
    ]
    error = _failure(chunks).first_error
    assert "No such image: sha256:5fddc3663543" in error
    assert "removed by another user or process" in error and "run the build again" in error


class _GoneImages:
    def get(self, ref: str) -> Any:
        import docker.errors

        raise docker.errors.ImageNotFound("gone")


class _GoneContainers:
    def create(self, *args: Any, **kwargs: Any) -> Any:
        import docker.errors

        raise docker.errors.ImageNotFound("No such image: sha256:abc")


class _GoneClient:
    images = _GoneImages()
    containers = _GoneContainers()


def test_an_image_removed_before_a_probe_container_starts_is_explained() -> None:
    from orchestrator.engine import RunSpec

    engine = DockerEngine(_GoneClient(), "unix:///fake.sock")  # type: ignore[arg-type]
    with pytest.raises(EnvironmentFailure) as caught:
        engine.run(RunSpec(image="sha256:abc", command=["true"]))
    assert "removed by another user or process" in str(caught.value)
    assert "run the command again" in str(caught.value)


class _BuildEngine:
    """Just enough of the engine for `run_build`: a base image, and a build that ends as told."""

    def __init__(self, outcome: Any, built: Any = None) -> None:
        self.outcome = outcome
        self.built = built

    settings = EngineSettings()

    def info(self) -> EngineInfo:
        return EngineInfo("fake://", "0", "0", "linux", ("runc",), ())

    def image(self, ref: str, *, layers: bool = False) -> Any:
        from orchestrator.engine import ImageInfo

        if ref.startswith("orch/debian-python"):
            return ImageInfo(id="sha256:" + "b" * 64, tags=(ref,), labels={}, env={}, repo_digests=(), size=1)
        return self.built

    def build(self, *args: Any, **kwargs: Any) -> Any:
        return self.outcome

    @contextlib.contextmanager
    def serve(self, spec: Any, files: Any) -> Iterator[Served]:
        yield Served("feed")


def _run_build(tiny_example: Path, monkeypatch: pytest.MonkeyPatch, engine: Any, tmp_path: Path) -> Any:
    from orchestrator.dossier.load import load_dossier
    from orchestrator.stages import build as build_module
    from orchestrator.stages.code_source import CodeState
    from orchestrator.stages.context import RenderedContext
    from orchestrator.stages.execute import run_build

    loaded = load_dossier(tiny_example / "dossier.yaml")
    state = CodeState("folder", "app", None, False, None, "0" * 64)
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM scratch\n")
    monkeypatch.setattr("orchestrator.stages.observe.inspect_code", lambda loaded: state)
    monkeypatch.setattr(
        build_module,
        "write_context",
        lambda *a, **k: RenderedContext(directory=context, dockerfile="", wheels=(), code=state),
    )
    return run_build(loaded, engine, build_module.BuildOptions(out=tmp_path / "out"))


def test_an_online_build_whose_pin_does_not_exist_is_bad_input(
    tiny_example: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from orchestrator.engine import BuildOutcome

    log = "Step 7/12 : RUN pip install -r /orch/requirements.txt\n" + NO_SUCH_VERSION.replace(
        "packaging==99.0", "numpy==9.9.9"
    )
    outcome = BuildOutcome(
        image_id=None, log=log, error="The command '/bin/sh -c pip install' returned a non-zero code: 1"
    )
    with pytest.raises(BadInput) as caught:
        _run_build(tiny_example, monkeypatch, _BuildEngine(outcome), tmp_path)
    assert caught.value.exit_code == 2
    assert "numpy==9.9.9" in str(caught.value) and "requirements-cpu.lock" in str(caught.value)
    assert (tmp_path / "out" / "build.json").is_file(), "the record of the failed build is still written"


def test_an_image_removed_right_after_its_build_is_explained(
    tiny_example: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from orchestrator.engine import BuildOutcome

    outcome = BuildOutcome(image_id="sha256:" + "c" * 64, log="Step 1/1 : FROM x\n")
    with pytest.raises(EnvironmentFailure, match="removed by another user or process") as caught:
        _run_build(tiny_example, monkeypatch, _BuildEngine(outcome, built=None), tmp_path)
    assert caught.value.code == "image-not-built", "not base-image-missing: the base was there, the built image went"


def test_a_pin_whose_hash_belongs_to_another_version_is_bad_input(tmp_path: Path) -> None:
    """A lock edited by hand (version changed, hashes kept) must not be served the old version from the cache."""
    import hashlib

    wheel = b"demo 1.0 wheel"
    digest = hashlib.sha256(wheel).hexdigest()
    folder = tmp_path / "c" / "wheels" / "sha256" / digest
    folder.mkdir(parents=True)
    (folder / "demo-1.0-py3-none-any.whl").write_bytes(wheel)
    lock = parse_lock(f"# pinned by hand\ndemo==9.9 --hash=sha256:{digest}\n")

    def pip(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise AssertionError("the cache had a file for the hash: pip is not asked")

    with pytest.raises(BadInput) as caught:
        collect_wheels(
            lock,
            TargetPlatform("3.11", "2.36"),
            tmp_path / "ctx",
            cache=tmp_path / "c",
            run=pip,
            environ={},
            lock_file="requirements.lock",
        )
    message = str(caught.value)
    assert "requirements.lock:2" in message and "demo==9.9" in message and "demo-1.0-py3-none-any.whl" in message


def test_a_long_list_of_offered_versions_shows_the_newest() -> None:
    from orchestrator.engine.build_log import MissingPin, pin_not_found

    versions = tuple(f"1.{minor}" for minor in range(40))
    error = pin_not_found(parse_lock("demo==9.9\n"), "r.lock", MissingPin("demo==9.9", versions), "the indexes")
    assert "32 older, 1.32, 1.33, 1.34, 1.35, 1.36, 1.37, 1.38, 1.39)" in str(error)
