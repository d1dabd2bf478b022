"""The one spelling of a moment in orch's documents and labels: RFC 3339, UTC, whole seconds, `Z`.

`2026-12-01T21:12:11Z` in build.json, report.json, the hand-over manifest and the OCI `created` label
alike, so two documents of the same run compare as strings. Callers that must be testable take a clock
and write `rfc3339(clock())`; `rfc3339_now()` is for the few that take none.
"""

from __future__ import annotations

from datetime import UTC, datetime

#: strftime pattern of `rfc3339`; kept with it so a reader of either sees the other.
RFC3339_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(moment: datetime) -> str:
    """`moment` in UTC as `YYYY-MM-DDTHH:MM:SSZ`; a naive datetime is taken as UTC already."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime(RFC3339_FORMAT)


def rfc3339_now() -> str:
    """Now, as `rfc3339` spells it."""
    return rfc3339(datetime.now(UTC))
