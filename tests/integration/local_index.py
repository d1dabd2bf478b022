"""A real package index on the host's loopback, for tests: PEP 503 pages, files, optional basic auth.

Served on 127.0.0.1 only; a build reaches it with the host network (`--network host`), the host's pip
directly. It counts authenticated requests so a test can prove credentials were actually used.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

from packaging.utils import canonicalize_name, parse_wheel_filename


@dataclass
class IndexState:
    files: dict[str, Path]
    credentials: str | None = None  # "user:password"
    authorized_hits: int = 0
    refused_hits: int = 0
    paths: list[str] = field(default_factory=list)


def _page(title: str, links: list[tuple[str, str]]) -> bytes:
    anchors = "\n".join(f'<a href="{href}">{text}</a><br/>' for href, text in links)
    return f"<!DOCTYPE html><html><head><title>{title}</title></head><body>\n{anchors}\n</body></html>\n".encode()


def _handler(state: IndexState) -> type[BaseHTTPRequestHandler]:
    sha = {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in state.files.items()}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def _authorized(self) -> bool:
            if state.credentials is None:
                return True
            expected = "Basic " + base64.b64encode(state.credentials.encode()).decode()
            if self.headers.get("Authorization") == expected:
                state.authorized_hits += 1
                return True
            state.refused_hits += 1
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="orch-test"')
            self.end_headers()
            return False

        def _send(self, body: bytes, content_type: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":  # uv asks HEAD first (range requests for a wheel's METADATA)
                self.wfile.write(body)

        def do_GET(self) -> None:
            state.paths.append(self.path)
            if not self._authorized():
                return
            parts = [unquote(part) for part in self.path.split("?")[0].split("/") if part]
            links = [(f"/files/{quote(name)}#sha256={sha[name]}", name) for name in sorted(state.files)]
            if not parts:
                self._send(_page("find-links", links), "text/html")
            elif parts == ["simple"]:
                projects = sorted({str(parse_wheel_filename(name)[0]) for name in state.files})
                self._send(_page("simple", [(f"/simple/{p}/", p) for p in projects]), "text/html")
            elif len(parts) == 2 and parts[0] == "simple":
                wanted = canonicalize_name(parts[1])
                mine = [(h, n) for h, n in links if parse_wheel_filename(n)[0] == wanted]
                if not mine:
                    self.send_error(404)
                    return
                self._send(_page(wanted, mine), "text/html")
            elif len(parts) == 2 and parts[0] == "files" and parts[1] in state.files:
                self._send(state.files[parts[1]].read_bytes(), "application/octet-stream")
            else:
                self.send_error(404)

        do_HEAD = do_GET

    return Handler


@contextmanager
def serve_index(files: list[Path], credentials: str | None = None) -> Iterator[tuple[str, IndexState]]:
    """(base URL without credentials, live state) of an index serving `files`, stopped on exit."""
    state = IndexState(files={path.name: path for path in files}, credentials=credentials)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
