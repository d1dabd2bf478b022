"""BuildKit's trace messages read as the classic builder's log: three real streams of dockerd 20.10.24
(tests/fixtures/buildkit/), synthetic messages built by a small protobuf encoder below, and hostile input."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest

from orchestrator.engine import build_log
from orchestrator.engine.buildkit_trace import (
    MAX_AUX_CHARS,
    MAX_PARTIAL_BYTES,
    NOTE_PREFIX,
    USING_CACHE,
    ClassicLog,
    TraceError,
    Vertex,
    VertexLog,
    decode_status,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "buildkit"
FROM = "FROM docker.io/orch/debian-python:bookworm"
COPY = "COPY hello.txt /hello.txt"
RUN_MOUNT = "RUN --mount=type=bind,source=data,target=/data cat /data/x > /copied && ls /data"
RUN_FAIL = 'RUN echo "first line" && echo "ERROR: No matching distribution found for torch==9.9" >&2 && exit 3'
PIP_ERROR = "ERROR: No matching distribution found for torch==9.9"


# --- a protobuf encoder, just enough to build StatusResponse messages -------------------------------------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def field_len(number: int, payload: bytes) -> bytes:
    return key(number, 2) + varint(len(payload)) + payload


def field_int(number: int, value: int) -> bytes:
    return key(number, 0) + varint(value)


TIMESTAMP = field_int(1, 1_700_000_000) + field_int(2, 5)


def vertex(
    digest: str, name: str, *, started: bool = True, completed: bool = False, cached: bool = False, error: str = ""
) -> bytes:
    body = field_len(1, digest.encode()) + field_len(2, b"sha256:input") + field_len(3, name.encode())
    body += field_int(4, 1) if cached else b""
    body += field_len(5, TIMESTAMP) if started else b""
    body += field_len(6, TIMESTAMP) if completed else b""
    body += field_len(7, error.encode()) if error else b""
    return field_len(1, body)


def log(digest: str, msg: bytes, stream: int = 1) -> bytes:
    return field_len(
        3, field_len(1, digest.encode()) + field_len(2, TIMESTAMP) + field_int(3, stream) + field_len(4, msg)
    )


def status(*parts: bytes) -> str:
    """Parts are whole StatusResponse fields (vertex(), log(), or anything else)."""
    return base64.b64encode(b"".join(parts)).decode()


def feed_all(classic: ClassicLog, *messages: str) -> list[str]:
    lines: list[str] = []
    for message in messages:
        lines += classic.feed(message)
    return lines + classic.finish()


# --- the real streams --------------------------------------------------------------------------------------


def replay(name: str) -> tuple[list[str], str | None, ClassicLog]:
    """The lines of a captured stream, and the engine's error, as the Docker adapter would see them."""
    classic, lines, error = ClassicLog(), [], None
    for raw in (FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        chunk = json.loads(raw)
        if chunk.get("id") == "moby.buildkit.trace":
            lines += classic.feed(chunk["aux"])
        elif "error" in chunk:
            error = str(chunk["error"])
    return lines + classic.finish(), error, classic


def adapter_log(lines: list[str], error: str | None) -> str:
    """The log text docker_build keeps: every line, then the engine's error when the build failed."""
    return "".join(f"{line}\n" for line in lines) + (f"ERROR: {error}\n" if error is not None else "")


def headers(lines: list[str]) -> list[str]:
    return [line for line in lines if build_log.STEP_LINE.match(line)]


def test_cold_build_reads_as_classic_steps() -> None:
    lines, error, classic = replay("passed-cold")
    assert error is None and classic.bad_messages == 0
    assert headers(lines) == [f"Step 1/3 : {FROM}", f"Step 2/3 : {COPY}", f"Step 3/3 : {RUN_MOUNT}"]
    assert USING_CACHE not in lines
    assert lines[lines.index(f"Step 3/3 : {RUN_MOUNT}") + 1] == "x"  # the RUN step's output, under its header
    # Each non-step vertex once, though BuildKit sends it again as it starts and completes.
    assert [line for line in lines if line.startswith(NOTE_PREFIX)] == [
        "# [internal] load remote build context",
        "# copy /context /",
        "# [internal] load metadata for docker.io/orch/debian-python:bookworm",
        "# exporting to image",
    ]


def test_cold_build_cache_stats_count_every_step_rebuilt() -> None:
    lines, error, _ = replay("passed-cold")
    stats = build_log.cache_stats(adapter_log(lines, error))
    assert (stats.steps, stats.cached, stats.rebuilt) == (2, 0, [COPY, RUN_MOUNT])


def test_cached_build_says_using_cache_after_every_non_from_step() -> None:
    lines, error, classic = replay("passed-cached")
    assert error is None and classic.bad_messages == 0
    assert headers(lines) == [f"Step 1/3 : {FROM}", f"Step 2/3 : {COPY}", f"Step 3/3 : {RUN_MOUNT}"]
    for header in headers(lines)[1:]:
        assert lines[lines.index(header) + 1] == USING_CACHE
    stats = build_log.cache_stats(adapter_log(lines, error))
    assert (stats.steps, stats.cached, stats.rebuilt) == (2, 2, [])


def test_failed_run_step_gives_the_step_and_pips_error() -> None:
    lines, error, classic = replay("failed-run-step")
    assert error is not None and error.startswith("executor failed running") and classic.bad_messages == 0
    failure = build_log.build_failure(adapter_log(lines, error), error)
    assert failure.step == RUN_FAIL
    assert failure.first_error == PIP_ERROR
    # The step's own lines in order, then the vertex's error, once.
    start = lines.index(f"Step 2/2 : {RUN_FAIL}")
    assert lines[start + 1 : start + 4] == ["first line", PIP_ERROR, f"ERROR: {error}"]
    assert lines.count(f"ERROR: {error}") == 1


def test_failed_run_step_without_the_adapters_error_line() -> None:
    lines, error, _ = replay("failed-run-step")
    failure = build_log.build_failure(adapter_log(lines, None), error)
    assert (failure.step, failure.first_error) == (RUN_FAIL, PIP_ERROR)


@pytest.mark.parametrize("name", ["passed-cold", "passed-cached", "failed-run-step"])
def test_notes_are_neither_steps_nor_errors(name: str) -> None:
    lines, _, _ = replay(name)
    notes = [line for line in lines if line.startswith(NOTE_PREFIX)]
    assert len(notes) >= 3
    for note in [*notes, f"{NOTE_PREFIX}Error: x", f"{NOTE_PREFIX}ERROR: x", f"{NOTE_PREFIX}Step 1/2 : RUN x"]:
        assert not build_log.STEP_LINE.match(note)
        assert not build_log._ERROR_LINE.match(note.strip())


def test_decode_status_reads_a_real_message() -> None:
    first = json.loads((FIXTURES / "failed-run-step.jsonl").read_text(encoding="utf-8").splitlines()[1])
    vertexes, logs = decode_status(first["aux"])
    assert logs == []
    assert [(v.name, v.started, v.completed, v.cached, v.error) for v in vertexes] == [
        ("[internal] load remote build context", True, False, False, "")
    ]
    assert vertexes[0].digest.startswith("sha256:45be56b4238b")


# --- synthetic messages ------------------------------------------------------------------------------------


def test_decode_status_round_trips_the_encoder() -> None:
    vertexes, logs = decode_status(
        status(
            vertex("sha256:a", "[1/2] RUN x", cached=True, completed=True, error="boom"),
            field_len(2, b"\x0a\x02id"),  # a VertexStatus: ignored
            log("sha256:a", b"hello\n", stream=2),
            field_len(4, b"\x0a\x01x"),  # a VertexWarning: ignored
            key(15, 5) + b"\x00\x00\x00\x00" + key(16, 1) + b"\x00" * 8,  # unknown fixed-width fields
        )
    )
    assert vertexes == [Vertex("sha256:a", "[1/2] RUN x", True, True, True, "boom")]
    assert logs == [VertexLog("sha256:a", 2, b"hello\n")]


def test_a_ten_byte_varint_is_negative_int64() -> None:
    _, logs = decode_status(status(log("sha256:a", b"", stream=-1)))
    assert logs[0].stream == -1


def test_stages_built_in_parallel_keep_each_line_under_its_step() -> None:
    a, b = "sha256:a", "sha256:b"
    lines = feed_all(
        ClassicLog(),
        status(vertex(a, "[builder 2/3] RUN make"), vertex(b, "[2/4] RUN pip install x")),
        status(log(a, b"a1\n")),
        status(log(b, b"b1\n")),
        status(log(a, b"a2\n"), log(a, b"a3\n")),
    )
    assert lines == [
        "Step 2/3 : RUN make",
        "Step 2/4 : RUN pip install x",
        "Step 2/3 : RUN make",
        "a1",
        "Step 2/4 : RUN pip install x",
        "b1",
        "Step 2/3 : RUN make",
        "a2",
        "a3",
    ]
    owner: dict[str, str] = {}  # each output line and the step build_log reads it under
    step = ""
    for line in lines:
        match = build_log.STEP_LINE.match(line)
        if match:
            step = match["instruction"]
        else:
            owner[line] = step
    assert owner == {"a1": "RUN make", "a2": "RUN make", "a3": "RUN make", "b1": "RUN pip install x"}


def test_a_step_updated_again_is_not_headed_twice() -> None:
    a = "sha256:a"
    lines = feed_all(
        ClassicLog(),
        status(vertex(a, "[2/2] RUN x", started=False)),
        status(vertex(a, "[2/2] RUN x")),
        status(vertex(a, "[2/2] RUN x")),
        status(vertex(a, "[2/2] RUN x", completed=True)),
    )
    assert lines == ["Step 2/2 : RUN x"]


def test_a_cached_step_updated_again_says_using_cache_once() -> None:
    a = "sha256:a"
    cached = status(vertex(a, "[2/2] COPY a /a", cached=True, completed=True))
    assert feed_all(ClassicLog(), cached, cached) == ["Step 2/2 : COPY a /a", USING_CACHE]


def test_a_step_not_yet_started_is_not_headed() -> None:
    assert feed_all(ClassicLog(), status(vertex("sha256:a", "[2/2] RUN x", started=False))) == []


def test_a_step_seen_cached_late_gets_its_using_cache_under_its_header() -> None:
    a, b = "sha256:a", "sha256:b"
    lines = feed_all(
        ClassicLog(),
        status(vertex(a, "[2/3] COPY a /a"), vertex(b, "[3/3] RUN y")),
        status(vertex(a, "[2/3] COPY a /a", cached=True, completed=True)),
    )
    assert lines == ["Step 2/3 : COPY a /a", "Step 3/3 : RUN y", "Step 2/3 : COPY a /a", USING_CACHE]


def test_a_line_split_across_messages_and_inside_a_utf8_character() -> None:
    a = "sha256:a"
    word = "café\n".encode()
    lines = feed_all(
        ClassicLog(),
        status(vertex(a, "[2/2] RUN x")),
        status(log(a, b"first ha")),
        status(log(a, b"lf\r\nsecond " + word[:4])),
        status(log(a, word[4:] + b"tail without newline")),
    )
    assert lines == ["Step 2/2 : RUN x", "first half", "second café", "tail without newline"]


def test_a_partial_line_is_flushed_when_its_vertex_completes() -> None:
    a, b = "sha256:a", "sha256:b"
    classic = ClassicLog()
    assert classic.feed(status(vertex(a, "[2/3] RUN x"), log(a, b"no newline"))) == ["Step 2/3 : RUN x"]
    assert classic.feed(status(vertex(a, "[2/3] RUN x", completed=True))) == ["no newline"]
    assert classic.feed(status(vertex(b, "[3/3] RUN y"))) == ["Step 3/3 : RUN y"]
    assert classic.finish() == []


def test_output_without_newlines_is_held_within_a_bound() -> None:
    a = "sha256:a"
    classic = ClassicLog()
    classic.feed(status(vertex(a, "[2/2] RUN x")))
    chunk = b"y" * (MAX_PARTIAL_BYTES // 4)
    emitted = [line for _ in range(8) for line in classic.feed(status(log(a, chunk)))]
    assert emitted and all(len(line) <= MAX_PARTIAL_BYTES + len(chunk) for line in emitted)
    assert sum(len(line) for line in emitted + classic.finish()) == 8 * len(chunk)


def test_an_error_comes_once_after_its_steps_own_lines() -> None:
    a = "sha256:a"
    failed = vertex(a, "[2/2] RUN x", completed=True, error="exit code: 1")
    lines = feed_all(
        ClassicLog(),
        status(vertex(a, "[2/2] RUN x")),
        status(failed, log(a, b"out\nlast partial")),  # the error and the last output in one message
        status(failed),
    )
    assert lines == ["Step 2/2 : RUN x", "out", "last partial", "ERROR: exit code: 1"]


def test_a_step_canceled_after_another_failed_does_not_take_the_blame() -> None:
    a, b = "sha256:a", "sha256:b"
    lines = feed_all(
        ClassicLog(),
        status(vertex(a, "[builder 2/2] RUN pip install torch==9.9"), vertex(b, "[2/3] RUN sleep 60")),
        status(log(a, PIP_ERROR.encode() + b"\n")),
        status(vertex(a, "[builder 2/2] RUN pip install torch==9.9", completed=True, error="exit code: 1")),
        status(vertex(b, "[2/3] RUN sleep 60", completed=True, error="failed: context canceled")),
    )
    assert lines[-1] == f"{NOTE_PREFIX}[2/3] RUN sleep 60: failed: context canceled"
    failure = build_log.build_failure(adapter_log(lines, "exit code: 1"), "exit code: 1")
    assert (failure.step, failure.first_error) == ("RUN pip install torch==9.9", PIP_ERROR)


def test_a_multiline_name_or_error_never_makes_a_broken_line() -> None:
    a = "sha256:a"
    lines = feed_all(ClassicLog(), status(vertex(a, "[2/2] RUN <<EOF\necho hi\nEOF", error="first\nsecond")))
    assert lines == ["Step 2/2 : RUN <<EOF echo hi EOF", "ERROR: first", "second"]
    assert all("\n" not in line for line in lines)


# --- hostile input -----------------------------------------------------------------------------------------


def real_messages() -> list[bytes]:
    raws: list[bytes] = []
    for path in sorted(FIXTURES.glob("*.jsonl")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            chunk = json.loads(raw)
            if chunk.get("id") == "moby.buildkit.trace":
                raws.append(base64.b64decode(chunk["aux"]))
    return raws


def outcome(aux: str) -> str:
    """'ok' or 'TraceError'; any other exception propagates and fails the test."""
    try:
        decode_status(aux)
    except TraceError:
        return "TraceError"
    return "ok"


def test_every_truncation_of_every_real_message_is_a_trace_error_or_a_shorter_message() -> None:
    results = [outcome(base64.b64encode(raw[:cut]).decode()) for raw in real_messages() for cut in range(len(raw))]
    assert results.count("TraceError") > len(results) * 0.9
    for raw in real_messages():
        assert outcome(base64.b64encode(raw[:-1]).decode()) == "TraceError"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(key(1, 2) + varint(100) + b"abc", id="length-past-the-end"),
        pytest.param(key(1, 2) + varint(10_000_000) + b"x", id="10MB-length-claim"),
        pytest.param(key(1, 2) + varint(2**64 - 1), id="2^64-length-claim"),
        pytest.param(field_len(1, key(1, 2) + varint(50) + b"short"), id="inner-length-past-the-end"),
        pytest.param(field_len(1, field_len(5, key(1, 0))), id="truncated-timestamp"),
        pytest.param(key(9, 0) + b"\xff" * 10 + b"\x01", id="varint-of-11-bytes"),
        pytest.param(b"\xff" * 11, id="key-of-11-bytes"),
        pytest.param(key(9, 0) + b"\x80", id="truncated-varint"),
        pytest.param(key(9, 1) + b"\x00" * 7, id="truncated-64-bit"),
        pytest.param(key(9, 5) + b"\x00" * 3, id="truncated-32-bit"),
        pytest.param(key(9, 3), id="group-start-wire-type"),
        pytest.param(key(9, 4), id="group-end-wire-type"),
        pytest.param(key(9, 6), id="wire-type-6"),
        pytest.param(key(9, 7), id="wire-type-7"),
        pytest.param(key(0, 0) + b"\x00", id="field-number-0"),
        pytest.param(field_int(1, 5), id="vertex-as-varint"),
        pytest.param(field_len(1, field_int(1, 5)), id="digest-as-varint"),
        pytest.param(field_len(3, field_len(3, b"x")), id="log-stream-as-bytes"),
        pytest.param(field_len(1, field_int(5, 1)), id="timestamp-as-varint"),
    ],
)
def test_malformed_messages_raise_trace_error(raw: bytes) -> None:
    aux = base64.b64encode(raw).decode()
    with pytest.raises(TraceError):
        decode_status(aux)
    classic = ClassicLog()
    assert classic.feed(aux) == []
    assert classic.bad_messages == 1


@pytest.mark.parametrize("aux", ["not base64!!", "QUJD=", "QUJD\n", "ÿÿÿÿ", "a", "===="])
def test_text_that_is_not_base64_raises_trace_error(aux: str) -> None:
    assert issubclass(TraceError, ValueError)
    with pytest.raises(TraceError):
        decode_status(aux)


def test_an_aux_that_is_not_a_string_or_too_long_raises_trace_error() -> None:
    with pytest.raises(TraceError):
        decode_status({"ID": "sha256:x"})  # type: ignore[arg-type]  # moby.image.id's aux is an object
    with pytest.raises(TraceError):
        decode_status("A" * (MAX_AUX_CHARS + 4))
    # A well-formed message over the bound is refused too, before base64 decodes it.
    big = status(log("sha256:a", b"x" * (MAX_AUX_CHARS * 3 // 4 + 3)))
    assert len(big) > MAX_AUX_CHARS
    with pytest.raises(TraceError, match="MAX_AUX_CHARS"):
        decode_status(big)


def test_an_empty_message_is_empty() -> None:
    assert decode_status("") == ([], [])


def test_deep_nesting_is_skipped_without_recursion() -> None:
    nested = b""
    for _ in range(5000):
        nested = field_len(9, nested)
    inside_vertex = field_len(1, field_len(1, b"sha256:a") + field_len(8, nested) + field_len(5, nested))
    vertexes, logs = decode_status(status(field_len(9, nested), inside_vertex))
    assert vertexes == [Vertex("sha256:a", "", False, True, False, "")]
    assert logs == []


def test_feed_never_raises_on_random_or_mutated_input() -> None:
    rng = random.Random(20240601)
    messages = real_messages()
    classic, bad = ClassicLog(), 0
    for round_ in range(3000):
        if round_ % 2:
            raw = bytearray(rng.choice(messages))
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
        else:
            raw = bytearray(rng.randbytes(rng.randint(0, 64)))
        aux = base64.b64encode(bytes(raw)).decode()
        bad += outcome(aux) == "TraceError"
        lines = classic.feed(aux)
        assert all(isinstance(line, str) and "\n" not in line for line in lines)
    for aux in ["%%%", "ÿ", "A" * (MAX_AUX_CHARS + 4)]:
        assert classic.feed(aux) == []
    assert classic.bad_messages == bad + 3
    assert 0 < bad < 3000
    classic.finish()
