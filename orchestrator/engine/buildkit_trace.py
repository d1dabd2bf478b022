"""BuildKit's progress stream, read as the classic builder's log.

Docker's engine API (`POST /build?version=2`) streams BuildKit's progress as `{"id": "moby.buildkit.trace",
"aux": "<base64>"}`, each a protobuf `moby.buildkit.v1.StatusResponse` (moby/buildkit, control.proto). docker-py
has no BuildKit support and protobuf is not a dependency: a ~60-line wire reader of the four messages used is
smaller than a generated-code dependency. `ClassicLog` writes classic-builder lines (`Step N/M : …`, `---> Using
cache`), so build_log.py and the live progress read both builders alike. The stream carries RUN output, i.e.
untrusted bytes: no length is trusted, a varint has at most 10 bytes, nesting is fixed by the schema (unknown
fields are skipped, never descended into), and malformed input raises `TraceError` (a ValueError), nothing else.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from dataclasses import dataclass

#: Longest aux string read, in base64 characters (BuildKit's messages are a few KiB).
MAX_AUX_CHARS = 16 << 20
#: A vertex's output with no newline is emitted as a line once it holds this many bytes.
MAX_PARTIAL_BYTES = 64 << 10
#: How a non-step vertex is shown: neither build_log's STEP_LINE nor its error-line pattern matches `# …`.
NOTE_PREFIX = "# "
USING_CACHE = "---> Using cache"

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
# BuildKit's names of Dockerfile steps: `[2/4] RUN …`, `[builder 3/6] COPY …`, `[linux/amd64 builder 1/2] FROM …`.
_STEP_NAME = re.compile(r"^\[(?:[^\]]* )?(?P<number>\d+)/(?P<total>\d+)\] (?P<instruction>.+)$")


class TraceError(ValueError):
    """An aux payload that is not base64 of a well-formed StatusResponse."""


@dataclass(frozen=True)
class Vertex:
    """One node of the build graph (a step, a context load, the export), as one update reports it."""

    digest: str
    name: str
    cached: bool
    started: bool
    completed: bool
    error: str


@dataclass(frozen=True)
class VertexLog:
    """A chunk of a vertex's output (stream 1 stdout, 2 stderr), cut at any byte."""

    vertex: str
    stream: int
    msg: bytes


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 70, 7):
        if pos >= len(buf):
            raise TraceError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value & 0xFFFF_FFFF_FFFF_FFFF, pos
    raise TraceError("varint longer than 10 bytes")


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of one message; lengths never trusted."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise TraceError("field number 0")
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire in (_I64, _I32):
            size = 8 if wire == _I64 else 4
            if size > len(buf) - pos:
                raise TraceError("truncated fixed-width field")
            yield number, wire, int.from_bytes(buf[pos : pos + size], "little")
            pos += size
        elif wire == _LEN:
            size, pos = _varint(buf, pos)
            if size > len(buf) - pos:
                raise TraceError(f"length {size} runs past the end ({len(buf) - pos} bytes left)")
            yield number, wire, buf[pos : pos + size]
            pos += size
        else:
            raise TraceError(f"unsupported wire type {wire}")


def _payload(number: int, wire: int, value: int | bytes) -> bytes:
    if wire != _LEN or not isinstance(value, bytes):
        raise TraceError(f"field {number} should be length-delimited")
    return value


def _integer(number: int, wire: int, value: int | bytes) -> int:
    if wire != _VARINT or not isinstance(value, int):
        raise TraceError(f"field {number} should be a varint")
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(number: int, wire: int, value: int | bytes) -> str:
    return _payload(number, wire, value).decode("utf-8", errors="replace")


def _vertex(buf: bytes) -> Vertex:
    text = {1: "", 3: "", 7: ""}  # digest, name, error
    flag = {4: False, 5: False, 6: False}  # cached, started, completed
    for number, wire, value in _fields(buf):
        if number in text:
            text[number] = _text(number, wire, value)
        elif number == 4:
            flag[4] = _integer(number, wire, value) != 0
        elif number in flag:  # a Timestamp: set; checked well-formed, its time unused
            flag[number] = all(True for _ in _fields(_payload(number, wire, value)))
    return Vertex(text[1], text[3], flag[4], flag[5], flag[6], text[7])


def _log(buf: bytes) -> VertexLog:
    vertex, stream, msg = "", 0, b""
    for number, wire, value in _fields(buf):
        if number == 1:
            vertex = _text(number, wire, value)
        elif number == 3:
            stream = _integer(number, wire, value)
        elif number == 4:
            msg = _payload(number, wire, value)
    return VertexLog(vertex, stream, msg)


def decode_status(aux_b64: str) -> tuple[list[Vertex], list[VertexLog]]:
    """The vertices and logs of one `moby.buildkit.trace` aux (statuses and warnings skipped); TraceError if bad."""
    if not isinstance(aux_b64, str) or len(aux_b64) > MAX_AUX_CHARS:
        raise TraceError("aux is not a string of at most MAX_AUX_CHARS characters")
    try:
        raw = base64.b64decode(aux_b64, validate=True)
    except ValueError as exc:  # binascii.Error, or a non-ASCII character
        raise TraceError(f"aux is not base64: {exc}") from None
    vertexes: list[Vertex] = []
    logs: list[VertexLog] = []
    for number, wire, value in _fields(raw):
        if number == 1:
            vertexes.append(_vertex(_payload(number, wire, value)))
        elif number == 3:
            logs.append(_log(_payload(number, wire, value)))
    return vertexes, logs


class ClassicLog:
    """Trace messages as classic-builder log lines; never raises. A step's header comes again when its output
    follows another step's (stages built in parallel); a step canceled after another failed is only noted."""

    def __init__(self) -> None:
        self.bad_messages = 0
        self._names: dict[str, str] = {}
        self._shown: set[str] = set()  # digests whose header or note was emitted
        self._cache_shown: set[str] = set()
        self._error_shown: set[str] = set()
        self._current: str | None = None  # the step whose header was emitted last
        self._partial: dict[str, bytes] = {}
        self._failed = False

    def feed(self, aux_b64: str) -> list[str]:
        """The new lines for one aux payload; a malformed one gives none and is counted in `bad_messages`."""
        try:
            vertexes, logs = decode_status(aux_b64)
        except ValueError:
            self.bad_messages += 1
            return []
        out: list[str] = []
        for vertex in vertexes:
            self._start(vertex, out)
        for log in logs:
            self._output(log, out)
        for vertex in vertexes:
            self._end(vertex, out)
        return out

    def finish(self) -> list[str]:
        """The partial last lines still held, once the stream has ended."""
        out: list[str] = []
        for digest, rest in list(self._partial.items()):
            self._emit(digest, [rest], out)
        self._partial.clear()
        return out

    def _head(self, digest: str, out: list[str]) -> None:
        """Attribute what follows to this vertex, if it is a step: its header, unless it was the last one."""
        match = _STEP_NAME.match(self._names.get(digest, ""))
        if match is None or self._current == digest:
            return
        out.append(f"Step {match['number']}/{match['total']} : {match['instruction']}")
        self._current = digest
        self._shown.add(digest)

    def _start(self, vertex: Vertex, out: list[str]) -> None:
        if vertex.name:
            self._names[vertex.digest] = " ".join(vertex.name.splitlines())
        if not (vertex.started or vertex.cached):
            return
        if _STEP_NAME.match(self._names.get(vertex.digest, "")) is None:
            if vertex.digest not in self._shown:
                self._shown.add(vertex.digest)
                out.append(f"{NOTE_PREFIX}{self._names.get(vertex.digest, vertex.digest)}")
            return
        if vertex.digest not in self._shown:
            self._head(vertex.digest, out)
        if vertex.cached and vertex.digest not in self._cache_shown:
            self._cache_shown.add(vertex.digest)
            self._head(vertex.digest, out)
            out.append(USING_CACHE)

    def _output(self, log: VertexLog, out: list[str]) -> None:
        *lines, rest = (self._partial.pop(log.vertex, b"") + log.msg).split(b"\n")
        if len(rest) >= MAX_PARTIAL_BYTES:
            lines, rest = [*lines, rest], b""
        if rest:
            self._partial[log.vertex] = rest
        self._emit(log.vertex, lines, out)

    def _emit(self, digest: str, lines: list[bytes], out: list[str]) -> None:
        if lines:
            self._head(digest, out)
            out.extend(line.rstrip(b"\r").decode("utf-8", errors="replace") for line in lines)

    def _end(self, vertex: Vertex, out: list[str]) -> None:
        if vertex.completed or vertex.error:
            rest = self._partial.pop(vertex.digest, b"")
            if rest:
                self._emit(vertex.digest, [rest], out)
        if not vertex.error or vertex.digest in self._error_shown:
            return
        self._error_shown.add(vertex.digest)
        if self._failed and vertex.error.endswith("context canceled"):  # stopped: another step failed
            out.append(f"{NOTE_PREFIX}{self._names.get(vertex.digest, vertex.digest)}: {vertex.error}")
            return
        self._failed = True
        self._head(vertex.digest, out)
        out.extend(f"ERROR: {vertex.error}".splitlines())
