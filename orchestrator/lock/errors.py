"""The errors `orch lock` reports, under the one root of orchestrator/errors.py."""

from __future__ import annotations

from orchestrator.errors import BadInput, EnvironmentFailure, VerdictFailed


class LockFailed(BadInput):
    """No lock fits the inputs and the target (a conflict, a package without a build for the target)."""

    code = "lock-failed"


class IndexUnreachable(EnvironmentFailure):
    """A package index the lock needs did not answer from this host."""

    code = "index-unreachable"


class ResolverMissing(EnvironmentFailure):
    code = "resolver-missing"


class LockStale(VerdictFailed):
    """`orch lock --check`: the lock no longer matches its inputs, target or sources (for CI)."""

    code = "lock-stale"
