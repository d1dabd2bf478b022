"""A stand-in for `subprocess.run` for the host collectors' tests (not a test module itself)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

Answer = subprocess.CompletedProcess[str] | BaseException


def ok(stdout: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(args=[], returncode=0, stdout=stdout, stderr="")


def failed(returncode: int, stdout: str = "", stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(args=[], returncode=returncode, stdout=stdout, stderr=stderr)


class FakeRun:
    """Answers a command by its exact argv; a command it was not given is not installed (FileNotFoundError),
    as on a machine without that tool. Records every call and checks the keyword arguments collectors must pass."""

    def __init__(self, answers: Mapping[tuple[str, ...], Answer] | None = None) -> None:
        self.answers = dict(answers or {})
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        key = tuple(argv)
        self.calls.append(key)
        assert kwargs.get("capture_output") is True and kwargs.get("text") is True, kwargs
        assert kwargs.get("check") is False and isinstance(kwargs.get("timeout"), int | float), kwargs
        answer = self.answers.get(key)
        if answer is None:
            raise FileNotFoundError(2, "No such file or directory", key[0])
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def ran(self, program: str) -> bool:
        return any(call[0] == program for call in self.calls)
