"""The Docker adapter makes Docker calls only; reading a build's log is build_log's job. A missing image is
`base-image-missing` only when it is the base (pulled); an image orch built that is missing is `image-not-built`."""

from __future__ import annotations

import ast
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from orchestrator.engine import BuildOutcome, BuildRequest, PullRequest, RunSpec, image_layers
from orchestrator.engine.build_log import STEP_LINE, build_failure
from orchestrator.engine.docker_engine import DockerEngine
from orchestrator.errors import BaseImageMissing, ImageNotBuilt

ENGINE_ERROR = "The command '/bin/sh -c apt-get install -y nosuch' returned a non-zero code: 100"


class _Api:
    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks = chunks

    def build(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield from self.chunks

    def history(self, ref: str) -> Any:
        raise docker.errors.ImageNotFound("No such image")

    def get_image(self, ref: str) -> Any:
        raise docker.errors.ImageNotFound("No such image")


class _Missing:
    """Images and containers of an engine that holds no image at all, and cannot pull one."""

    def get(self, ref: str) -> Any:
        raise docker.errors.ImageNotFound("No such image")

    def pull(self, ref: str) -> Any:
        raise docker.errors.APIError("pull access denied", explanation="pull access denied for nosuch/base")

    def create(self, *args: Any, **kwargs: Any) -> Any:
        raise docker.errors.ImageNotFound("No such image: sha256:abc")


class _Client:
    def __init__(self, chunks: list[dict[str, Any]] | None = None) -> None:
        self.api = _Api(chunks or [])
        self.images = _Missing()
        self.containers = _Missing()


def _apt_failure_chunks() -> list[dict[str, Any]]:
    return [
        {"stream": "Step 1/3 : FROM orch/debian-python:bookworm\n"},
        {"stream": " ---> 5fddc3663543\n"},
        {"stream": "Step 2/3 : RUN apt-get install -y nosuch\n"},
        {"stream": "\x1b[91mE: Unable to locate package nosuch\n\x1b[0m"},
        {"error": ENGINE_ERROR},
    ]


def test_the_adapter_hands_over_the_log_and_the_engines_own_error_unread() -> None:
    outcome = DockerEngine(_Client(_apt_failure_chunks()), "unix:///fake.sock").build(  # type: ignore[arg-type]
        BuildRequest(io.BytesIO(b""), "orch/x:1", network="none")
    )
    assert outcome == BuildOutcome(image_id=None, log=outcome.log, error=ENGINE_ERROR)
    lines = [line for line in outcome.log.splitlines() if line]
    assert lines[-2:] == ["E: Unable to locate package nosuch", f"ERROR: {ENGINE_ERROR}"], "ANSI colour removed"
    failure = build_failure(outcome.log, outcome.error)
    assert failure.step == "RUN apt-get install -y nosuch"
    assert failure.first_error == "E: Unable to locate package nosuch", "apt's words, read by build_log"


def test_without_a_tool_error_line_the_failure_is_the_engines_error() -> None:
    log = f"Step 1/2 : FROM x\nStep 2/2 : RUN false\nERROR: {ENGINE_ERROR}\n"
    failure = build_failure(log, ENGINE_ERROR)
    assert failure.step == "RUN false" and failure.first_error == ENGINE_ERROR
    assert build_failure("", None).first_error == "the build failed"
    two_lines = "failed to solve:\nerror: something"
    failure = build_failure(f"Step 1/1 : RUN x\nrunning\nERROR: {two_lines}\n", two_lines)
    assert failure.first_error == two_lines, "the engine's own error is never read as the step's output"


def test_the_adapter_imports_no_log_reader() -> None:
    """Parsing lives in build_log; the adapter imports none of it (an import-linter contract says the same)."""
    modules = sorted(Path("orchestrator/engine").glob("docker_*.py"))
    assert Path(DockerEngine.__module__.replace(".", "/") + ".py") in modules
    for module in modules:
        tree = ast.parse(module.read_text(encoding="utf-8"))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "orchestrator.engine.build_log" not in imported, module
    assert "orchestrator.engine" in imported, "the walk did see the adapter's imports"


def test_one_step_regex_reads_the_builders_header() -> None:
    match = STEP_LINE.match("Step 12/30 : RUN pip install -r /orch/requirements.txt")
    assert match is not None
    assert (match["number"], match["total"], match["instruction"]) == (
        "12",
        "30",
        "RUN pip install -r /orch/requirements.txt",
    )
    for module in ("orchestrator/cli/progress.py", "orchestrator/engine/docker_build.py"):
        assert not re.search(r"re\.compile\(r?\"\^Step", Path(module).read_text(encoding="utf-8")), module


def test_a_base_image_that_cannot_be_pulled_is_base_image_missing() -> None:
    engine = DockerEngine(_Client(), "unix:///fake.sock")  # type: ignore[arg-type]
    with pytest.raises(BaseImageMissing) as caught:
        engine.pull(PullRequest.of_base("nosuch/base:1"))
    assert caught.value.code == "base-image-missing" and "nosuch/base:1" in str(caught.value)


@pytest.mark.parametrize("use", ["run", "save", "layers"])
def test_a_missing_built_image_is_image_not_built_never_base_image_missing(use: str) -> None:
    engine = DockerEngine(_Client(), "unix:///fake.sock")  # type: ignore[arg-type]
    with pytest.raises(ImageNotBuilt) as caught:
        if use == "run":
            engine.run(RunSpec(image="orch/app:1", command=["true"]))
        elif use == "save":
            engine.save("orch/app:1", io.BytesIO())
        else:
            image_layers(engine, "orch/app:1")
    assert not isinstance(caught.value, BaseImageMissing)
    assert caught.value.code == "image-not-built" and caught.value.exit_code == 3
    assert "orch/app:1" in str(caught.value) and "removed by another user or process" in str(caught.value)
