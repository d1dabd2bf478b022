"""Rules that used to be written in several places now have one home each; a copy creeping back fails here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from orchestrator.model.checks import Check, first_failure
from orchestrator.model.report import StageResult
from orchestrator.report.view import headline
from orchestrator.text import one_line
from orchestrator.timestamps import rfc3339, rfc3339_now
from orchestrator.untrusted import exited, last_words
from tests.paths import REPO


def _sources_with(needle: str) -> list[str]:
    return sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "orchestrator").rglob("*.py")
        if needle in path.read_text(encoding="utf-8")
    )


def test_rfc3339_is_utc_whole_seconds_with_z() -> None:
    paris = timezone(timedelta(hours=1))
    assert rfc3339(datetime(2026, 12, 1, 22, 12, 11, 999_999, tzinfo=paris)) == "2026-12-01T21:12:11Z"
    assert rfc3339(datetime(2026, 12, 1, 21, 12, 11)) == "2026-12-01T21:12:11Z", "naive is taken as UTC"
    now = rfc3339_now()
    assert len(now) == 20 and now.endswith("Z")
    assert datetime.strptime(now, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) <= datetime.now(UTC)
    assert _sources_with('"%Y-%m-%dT') == ["orchestrator/timestamps.py"]


def test_a_stopped_process_is_described_one_way() -> None:
    assert exited(3, "Traceback …\n  File x\nValueError: bad\n\n") == "exited 3: ValueError: bad"
    assert exited(137, "") == "exited 137: no output"
    assert last_words("  \n") == "no output"
    assert _sources_with('f"exited {') == ["orchestrator/untrusted.py"]


def test_first_failure_is_the_one_reading_of_a_failed_check() -> None:
    checks = [
        Check(name="a", expected="1", observed="1", passed=True),
        Check(name="b", expected="2", observed="3", passed=False),
    ]
    assert first_failure(checks) == checks[1]
    step, line = headline(StageResult(name="image", status="failed", checks=checks))
    assert (step, line) == ("b", "expected 2, observed 3")
    assert _sources_with("not check.passed), None)") == ["orchestrator/model/checks.py"]


def test_one_line_has_its_home_at_the_bottom() -> None:
    assert one_line("a\n\tb\x1b[0m  c", 8) == "a b\\x1b…"
    assert _sources_with("def one_line(") == ["orchestrator/text.py"]
