"""The one error root of orch.

Every failure a user can meet is an `OrchError` subclass with its own exit code. Third-party
exceptions (pydantic, yaml, jinja2, docker, subprocess) are translated into these once, at the edge
where they happen; only the CLI entry point prints them and exits, so no user error shows a traceback.

Exit codes are a contract. `EXIT_CODES` below is their one table: each class takes its `exit_code`
from it, `orch --help` prints its epilog from it (`exit_codes_help`), and docs/cli.md is generated
from it (orchestrator/cli/reference.py); tests/unit/test_exit_codes.py fails when one of them drifts.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ExitCode:
    code: int
    #: The few words `orch --help` shows.
    short: str
    #: The full sentence docs/cli.md shows.
    meaning: str


EXIT_SUCCESS = 0
EXIT_VERDICT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
#: From the entry point on Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130

EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(EXIT_SUCCESS, "success", "success (for `orch compare`: identical or equivalent)"),
    ExitCode(
        EXIT_VERDICT_FAILED,
        "a verdict failed",
        "a verdict failed: a check did not hold, a build step failed, a replay differs, a damaged or tampered "
        "hand-over, B regressed",
    ),
    ExitCode(
        EXIT_BAD_INPUT,
        "bad input or usage",
        "bad input or usage: dossier, paths, hashes, options, a usage error reported by Click",
    ),
    ExitCode(
        EXIT_ENVIRONMENT,
        "the environment failed",
        "the environment failed: engine unreachable, base image missing, tool missing, not root, the wheel download "
        "failed; also a template that does not render (a bug in orch)",
    ),
    ExitCode(
        EXIT_INTERRUPTED,
        "interrupted",
        "interrupted (Ctrl-C, kill, a closed terminal); orch removes the containers it had started before exiting",
    ),
)


def exit_codes_help() -> str:
    """The one line `orch --help` ends with."""
    return "Exit codes: " + ", ".join(f"{row.code} {row.short}" for row in EXIT_CODES) + "."


class OrchError(Exception):
    """Root of every error orch reports to a user."""

    exit_code = EXIT_VERDICT_FAILED
    #: A short reference name, shown in brackets, that a user can search the docs for.
    code = "orch-error"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message}\n{self.hint}"


class VerdictFailed(OrchError):
    """A check ran and did not hold (build step failed, a probe's expectation was not met)."""

    exit_code = EXIT_VERDICT_FAILED
    code = "verdict-failed"


class HostCannotRun(VerdictFailed):
    """`orch rebuild` / `orch probe` before any build or container: the host verdict (`orch doctor`'s) says the
    dossier's device stage cannot pass on this host (no driver, a driver too old, a daemon that cannot map the GPU)."""

    code = "host-cannot-run"


class HandoverDamaged(VerdictFailed):
    """A hand-over folder that does not hold what it claims (checked by `orch verify` before anything runs).

    Exit 1, like any check that did not hold: the folder was named correctly, its content failed the
    check. A changed byte, an added file, a path leaving the folder, a symlink, a tarball whose image is
    not the manifest's — whether damaged in transit or tampered with, nothing from it is loaded or run.
    """

    code = "handover-damaged"


class AttestationRefused(VerdictFailed):
    """`orch verify --trust`: the hand-over (or pushed image) is not attributed to a trusted signer.

    Exit 1, like a damaged hand-over: no attestation where one was required, a signature by a key the trust
    file does not list, an attestation about another image, or an attested file that changed. Refused before
    anything is loaded or run.
    """

    code = "attestation-refused"


class BadInput(OrchError):
    """The user's input is wrong: dossier, file, hash, option. Fixing the input fixes it."""

    exit_code = EXIT_BAD_INPUT
    code = "bad-input"


class DossierError(BadInput):
    """A dossier that cannot be loaded or is incoherent. The message names file, field and line."""

    code = "dossier-invalid"

    def __init__(
        self,
        file: str,
        message: str,
        *,
        field: str | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        where = file
        if line is not None:
            where += f":{line}"
        if field:
            where += f" [{field}]"
        super().__init__(f"{where}: {message}", hint=hint)
        self.file = file
        self.field = field
        self.line = line


class EnvironmentFailure(OrchError):
    """The machine cannot do what was asked: engine unreachable, tool missing, not root, image missing."""

    exit_code = EXIT_ENVIRONMENT
    code = "environment"


class EngineUnavailable(EnvironmentFailure):
    code = "engine-unreachable"


class ToolMissing(EnvironmentFailure):
    code = "tool-missing"


class BaseImageMissing(EnvironmentFailure):
    code = "base-image-missing"


class ImageNotBuilt(EnvironmentFailure):
    """An application image (built by orch, given with --image, or loaded from a hand-over) is not in the engine:
    never built for this dossier identity, or removed. Never `BaseImageMissing`: the base is not what is missing."""

    code = "image-not-built"


class ContainerStartFailed(EnvironmentFailure):
    """The daemon or its runtime refused to start a container (GPU mapping, the container toolkit, CDI).
    `raw` is the daemon's own message; the message says what the failure catalogue makes of it."""

    code = "container-start"

    def __init__(self, message: str, *, raw: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.raw = raw


class RegistryError(EnvironmentFailure):
    """A registry refused or did not answer a push or pull (down, unauthorised, no such digest).

    The message never holds a credential: they are read from the environment variables the plan or
    option names, and any echo of one in the registry's answer is replaced before it is raised."""

    code = "registry"


class SourceUnreachable(EnvironmentFailure):
    """A remote data or weights item could not be fetched: its source did not answer, refused the credential or
    does not have it. One line naming the item, the source and the variable (never its value); the bytes
    received so far stay in the cache's partial folder and the next fetch resumes them (orchestrator/remote/)."""

    code = "remote-source"


class SourceMismatch(BadInput):
    """A remote item's source sent other bytes than the dossier declares (the same name, other content): both
    hashes in full; nothing is stored in the cache."""

    code = "remote-mismatch"


class DiskFull(EnvironmentFailure):
    """A write failed for want of space (ENOSPC, EDQUOT). Whatever was half-written has been removed."""

    code = "disk-full"

    #: The errno values that mean "no room": out of space, or over a quota.
    ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def _existing_folder(path: str) -> str | None:
    """The nearest folder of `path` that exists: the one on the file system that was full."""
    folder = os.path.dirname(os.path.abspath(path))
    while folder and not os.path.isdir(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
    return folder or None


def from_os_error(exc: OSError) -> EnvironmentFailure:
    """Translate an OSError that escaped every narrower handler into one message with its file.

    Why at the edge: a full disk or a vanished folder can strike any write, and the user needs the
    path and the reason, never a traceback. Outputs are written atomically (fsutil), so nothing
    half-written is left to clean.
    """
    where = f" ({exc.filename})" if exc.filename else ""
    reason = exc.strerror or str(exc)
    if exc.errno in DiskFull.ERRNOS:
        # A copy's error names its source first and its destination second (CPython's sendfile copy sets
        # filename and filename2): the full file system is the destination's.
        written = exc.filename2 or exc.filename
        folder = _existing_folder(str(written)) if written else None
        full = f": {folder} is full (writing {written})" if folder else ""
        return DiskFull(
            f"no space left on the device{full}",
            hint="Free some space (docker image prune; old --out folders) or write to a larger disk, then run again.",
        )
    name = errno.errorcode.get(exc.errno or 0, "OSError")
    return EnvironmentFailure(
        f"{reason}{where} [{name}]", hint=f"Check the path and its permissions (uid {os.getuid()})."
    )


class TemplateError(OrchError):
    """A template failed to render: a bug in orch's templates, not in the user's input."""

    exit_code = EXIT_ENVIRONMENT
    code = "template"


class WheelhouseError(EnvironmentFailure):
    """Collecting the locked wheels on the host failed (pip download, an index, a hash that no file has)."""

    code = "wheelhouse"


# `orch lock`
class LockFailed(BadInput):
    """No lock fits the inputs and the target (a conflict, a package without a build for the target)."""

    code = "lock-failed"


class IndexUnreachable(EnvironmentFailure):
    """A package index the lock needs did not answer from this host."""

    code = "index-unreachable"


class ResolverMissing(EnvironmentFailure):
    """`uv`, the resolver `orch lock` runs, is not installed next to orch."""

    code = "resolver-missing"


class LockStale(VerdictFailed):
    """`orch lock --check`: the lock no longer matches its inputs, target or sources (for CI)."""

    code = "lock-stale"


# `orch nightly`
class PlanInvalid(BadInput):
    """A nightly plan file that cannot be loaded: the message names the file, the line, the field and the fix."""

    code = "plan-invalid"


class NightBusy(BadInput):
    """A night that another `orch nightly run` is writing, or nothing to resume."""

    code = "night-busy"


# -- Raised where the input is read (and re-exported there), defined here so that every error orch reports has
# this one root and an exit code from the table: none is rewrapped as `BadInput(str(exc))`. Each stays a
# ValueError where a pydantic validator or an `except ValueError` reads it.


# raised in orchestrator/model/image_ref.py
class ImageReferenceError(BadInput, ValueError):
    """The text is not an image reference; the message says which part is wrong.

    Bad input (exit 2) wherever it escapes; still a ValueError, so a pydantic validator that parses a
    reference reports it as a validation error."""


# raised in orchestrator/dossier/lock.py
class LockError(BadInput, ValueError):
    """A lock file orch cannot read, at `line`; the loader names the file (DossierError) when it knows it."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


# raised in orchestrator/dossier/yaml_source.py
class YamlSourceError(BadInput, ValueError):
    """YAML orch cannot read, at `line` when known; the loader names the file (DossierError) when it knows it."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


# raised in orchestrator/checks/arrays.py
class ArrayFormatError(VerdictFailed, ValueError):
    """The file is not what its format promises (bad magic, unsupported dtype, truncated data): a sample's output
    that fails its check."""


# raised in orchestrator/checks/require_cuda.py
class RequireExpressionError(VerdictFailed, ValueError):
    """The expression is not one libnvidia-container accepts ("invalid expression"): the image will not start."""


# raised in orchestrator/plan/gpu_select.py
class GpuSelectionError(BadInput, ValueError):
    """A `--gpus` value orch cannot map on this host (one line naming the option and what to do): bad input."""


# raised in orchestrator/host/capture.py
class CaptureError(BadInput, ValueError):
    """The folder is not a readable orch host capture (one line for the user): bad input."""


# raised in orchestrator/untrusted.py
class UnsafeOutput(VerdictFailed):
    """A file a container wrote that the host refuses to read, or cannot parse. The message names it.

    A failed check wherever it escapes (exit 1): the stage that read the file records it as one."""

    def __init__(self, display: str, message: str) -> None:
        super().__init__(f"{display} {message}")
        self.display = display


class OutputMissing(UnsafeOutput):
    """The file is not there (or a parent component is missing)."""
