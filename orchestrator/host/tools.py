"""The one door through which host collectors run a command (`nvidia-smi`, `amd-smi`, `rocm-smi`).

A host tool that is missing, hangs or fails is a fact for the report, never a crash: every outcome
becomes either the tool's stdout or a one-line note that says why there is none.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: The signature of `subprocess.run`; tests pass a fake that returns canned `CompletedProcess` objects.
Runner = Callable[..., "subprocess.CompletedProcess[str]"]

#: A host tool that answers at all answers within seconds; a hung driver must not hang orch.
TOOL_TIMEOUT_S = 30.0


def subprocess_runner(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`subprocess.run`, looked up at call time.

    A default of `run=subprocess.run` would bind the real function when the module is imported, so the unit
    tests' guard (which patches `subprocess.run`) could not catch a collector called without a fake runner.
    """
    result: subprocess.CompletedProcess[str] = subprocess.run(*args, **kwargs)  # noqa: PLW1510 (the caller passes check)
    return result


@dataclass(frozen=True)
class ToolAnswer:
    stdout: str | None  # None when the tool gave no usable answer
    note: str | None  # why there is no answer; None on success


def run_tool(run: Runner, argv: Sequence[str], timeout: float = TOOL_TIMEOUT_S) -> ToolAnswer:
    name = argv[0]
    try:
        result = run(list(argv), capture_output=True, text=True, check=False, timeout=timeout)
    except FileNotFoundError:
        return ToolAnswer(None, f"{name}: not found")
    except subprocess.TimeoutExpired:
        return ToolAnswer(None, f"{name}: no answer within {timeout:g} s")
    except OSError as error:  # e.g. not executable for this user
        return ToolAnswer(None, f"{name}: could not run ({error.strerror or error})")
    if result.returncode != 0:
        return ToolAnswer(None, f"{name}: exit status {result.returncode}: {first_line(result.stderr, result.stdout)}")
    return ToolAnswer(result.stdout or "", None)


def first_line(*texts: str | None) -> str:
    """The first non-blank line of the first text that has one: the tool's own words for what went wrong."""
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return "no output"
