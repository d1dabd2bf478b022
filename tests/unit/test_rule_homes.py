"""The rules that issue 22 found in several places, each read through its one home (docs/architecture.md,
"Where each rule lives"). Behaviour only: what each home answers, and that its callers answer the same way."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from orchestrator.credentials import credential, user_and_token
from orchestrator.dossier.models import IndexSpec
from orchestrator.errors import (
    EXIT_BAD_INPUT,
    EXIT_VERDICT_FAILED,
    ArrayFormatError,
    BadInput,
    CaptureError,
    GpuSelectionError,
    ImageReferenceError,
    LockError,
    OrchError,
    OutputMissing,
    RequireExpressionError,
    UnsafeOutput,
    YamlSourceError,
)
from orchestrator.lock.sources import Source, credentials
from orchestrator.model.checks import Check, mismatch
from orchestrator.model.image_ref import parse_reference, split_reference
from orchestrator.model.report import Report, StageResult, StageStatus, first_failed_stage
from orchestrator.nightly.targets.outcome import last_error_line
from orchestrator.stages.publish import registry_auth
from orchestrator.stages.wheelhouse import pip_index_environment
from orchestrator.text import one_line, strip_ansi
from orchestrator.vendor import find_base_image
from orchestrator.versions import parse_version, same_version
from tests.report_sample import sample_report

DIGEST = "sha256:" + "ab" * 32


def _report(*statuses: StageStatus) -> Report:
    names = ("image", "host", "device", "sample")
    stages = {name: StageResult(name=name, status=status) for name, status in zip(names, statuses, strict=True)}
    return sample_report().model_copy(update={"stages": stages})


@pytest.mark.parametrize(
    ("statuses", "first"),
    [
        (("passed", "failed", "not_run", "not_run"), "host"),
        (("passed", "skipped", "not_run", "not_run"), "device"),  # skipped is a choice, not the stage to look at
        (("passed", "passed", "not_run", "failed"), "sample"),  # a failed stage comes before an earlier not-run
        (("passed", "skipped", "passed", "passed"), None),
    ],
)
def test_the_first_failed_stage_of_a_report(statuses: tuple[StageStatus, ...], first: str | None) -> None:
    found = first_failed_stage(_report(*statuses))
    assert (found.name if found else None) == first


def test_a_check_that_did_not_hold_reads_expected_then_observed() -> None:
    assert (
        mismatch(Check(name="python", expected="3.12", observed="3.11", passed=False)) == "expected 3.12, observed 3.11"
    )


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[1;31merror\x1b[0m: bad", "error: bad"),
        ("\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"),  # private-mode CSI (the pattern without `?` kept it)
        ("\x1b[38;2;255;0;0mtrue colour\x1b[m", "true colour"),
        ("\x1b]0;window title\x07after", "after"),  # OSC, ended by BEL
        ("\x1b]8;;https://x.example\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink, ended by ST
        ("\x1b(Bcharset", "charset"),
        ("\x1b[2K\rprogress", "\rprogress"),
    ],
)
def test_terminal_escapes_are_removed_and_nothing_else(raw: str, shown: str) -> None:
    assert strip_ansi(raw) == shown


def test_a_logs_last_error_is_one_clean_line(tmp_path: Path) -> None:
    log = tmp_path / "rebuild.stderr"
    log.write_text("building…\n\x1b[31merror[bad-input]:\x1b[0m the\x07 dossier\tis wrong\n", encoding="utf-8")
    assert last_error_line(log) == "error[bad-input]: the\\x07 dossier is wrong"
    assert one_line(strip_ansi("\x1b[1m" + "x" * 400), 300) == "x" * 299 + "…"


@pytest.mark.parametrize(
    ("text", "version"),
    [(" 12.4\n", Version("12.4")), ("535.183.01", Version("535.183.1")), ("", None), (None, None), ("rocm6", None)],
)
def test_version_text_is_parsed_one_way(text: str | None, version: Version | None) -> None:
    assert parse_version(text) == version


def test_two_spellings_of_one_version_are_the_same_version() -> None:
    assert same_version("2.4", "2.4.0")
    assert not same_version("2.4", "2.4.1")
    assert same_version("local-build", "local-build") and not same_version("local-build", "other")


@pytest.mark.parametrize(
    ("kind", "exit_code"),
    [
        (ImageReferenceError, EXIT_BAD_INPUT),
        (GpuSelectionError, EXIT_BAD_INPUT),
        (CaptureError, EXIT_BAD_INPUT),
        (ArrayFormatError, EXIT_VERDICT_FAILED),
        (RequireExpressionError, EXIT_VERDICT_FAILED),
    ],
)
def test_errors_raised_where_input_is_read_have_the_roots_exit_code(kind: type[OrchError], exit_code: int) -> None:
    error = kind("the message")
    assert isinstance(error, OrchError) and isinstance(error, ValueError)
    assert (error.exit_code, str(error), error.message) == (exit_code, "the message", "the message")


def test_errors_with_a_place_keep_it() -> None:
    assert isinstance(LockError(3, "x is not pinned"), BadInput) and LockError(3, "x").line == 3
    assert isinstance(YamlSourceError("tab", 7), BadInput) and YamlSourceError("tab", 7).line == 7
    missing = OutputMissing("out/a.json", "does not exist")
    assert isinstance(missing, UnsafeOutput) and missing.exit_code == EXIT_VERDICT_FAILED
    assert (missing.display, str(missing)) == ("out/a.json", "out/a.json does not exist")


def test_a_credential_is_read_from_the_variable_named_and_never_shown() -> None:
    assert credential("TOKEN", {"TOKEN": "alice:s3:cret"}, needed_by="x", form="'user:token'") == "alice:s3:cret"
    assert user_and_token("alice:s3:cret") == ("alice", "s3:cret")
    assert user_and_token("alice") == ("alice", "")
    with pytest.raises(BadInput) as caught:
        credential("TOKEN", {"TOKEN": ""}, needed_by="index https://i.example", form="'user:token'")
    assert caught.value.message == "index https://i.example needs the credential in $TOKEN, which is not set"
    assert "export TOKEN='user:token'" in (caught.value.hint or "")


def test_the_three_readers_of_a_credential_say_the_same_thing() -> None:
    environ = {"OTHER": "alice:secret"}
    messages = []
    for read in (
        lambda: registry_auth("OTHER", "MISSING", environ),
        lambda: credentials([Source("https://i.example", "index", "python.indexes[0]", "MISSING", "orch0")], environ),
        lambda: pip_index_environment([IndexSpec(url="https://i.example/simple", access="MISSING")], False, environ),
    ):
        with pytest.raises(BadInput) as caught:
            read()
        messages.append(caught.value.message)
        assert "secret" not in str(caught.value)
    assert all(message.endswith("needs the credential in $MISSING, which is not set") for message in messages)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("debian:bookworm", ("debian", "bookworm", None)),
        ("localhost:5000/team/app", ("localhost:5000/team/app", None, None)),  # a port is not a tag
        (f"localhost:5000/team/app:1.0@{DIGEST}", ("localhost:5000/team/app", "1.0", DIGEST)),
        (f"nvidia/cuda@{DIGEST}", ("nvidia/cuda", None, DIGEST)),
    ],
)
def test_a_reference_is_cut_where_the_grammar_cuts_it(text: str, parts: tuple[str, str | None, str | None]) -> None:
    assert split_reference(text) == parts
    parsed = parse_reference(text)
    assert (parsed.name, parsed.tag, parsed.digest) == parts


def test_the_base_image_table_ignores_a_digest_but_not_the_tag() -> None:
    found = find_base_image(f"nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04@{DIGEST}")
    assert found is not None and found.key == "cuda-12.4-ubuntu22.04"
    assert find_base_image("nvidia/cuda:no-such-tag") is None
