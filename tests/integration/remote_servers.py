"""Real servers on the loopback for the tests of fetching model weights from remote sources: no mocks.

Three context managers, each yielding a handle with the address, the credentials and a few controls; wrap
them in fixtures of whatever scope a test file needs (`with https_files(folder) as server: yield server`):

- `https_files(folder, token=None)`: a threaded HTTPS static-file server with a CA of its own (the client
  trusts `ca_bundle`, nothing else), Range requests, an ETag, optional bearer-token auth that can be revoked,
  and a one-shot truncation of the next body, so resumed downloads can be tested against a real TLS socket.
- `s3_server()`: moto's `ThreadedMotoServer` with IAM authentication enforced (see `s3_server`'s docstring
  for how): a key that IAM does not know, or one deleted by `revoke()`, is refused with `InvalidAccessKeyId`.
- `oci_registry(tmp)`: Debian's docker-registry with htpasswd auth, started by scripts/registry.sh on a free
  port exactly as tests/integration/test_registry.py does, and `push_artifact` to push an OCI artifact with
  oras-py (its `basic` auth backend: the registry's challenge is `Basic realm=...`, which oras-py's default
  `token` backend cannot answer).

Every socket is closed at exit (pytest runs with `filterwarnings = error`: a ResourceWarning is a failure),
and no credential is logged: the HTTPS server's request log is silenced, since it would carry the path and
a client may put a token in its query string.
"""

from __future__ import annotations

import datetime
import hashlib
import http.server
import ipaddress
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped,unused-ignore]
import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.paths import REPO

REGISTRY_SCRIPT = REPO / "scripts" / "registry.sh"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
S3_REGION = "us-east-1"


def _free_port() -> int:
    """A port free on 127.0.0.1 now (for docker-registry, which must be told its address before it starts)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --------------------------------------------------------------------------------------------------------------
# HTTPS static files
# --------------------------------------------------------------------------------------------------------------


def _key_usage(cert_sign: bool) -> x509.KeyUsage:
    """Signatures (ECDSA handshakes), plus certificate and CRL signing for the CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _write_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 and localhost signed by it: (ca.pem, server.pem, server.key).

    A CA of its own, not a self-signed leaf: clients verify the chain as they would against a real site, and a
    client that ignores `ca_bundle` (the system store) fails, which is what a test of TLS settings wants.
    Everything a strict verifier asks for is there (key usages, subject and authority key identifiers).
    """
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=2)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "orch test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem, cert_pem, key_pem = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    ca_pem.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.touch(mode=0o600)
    key_pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_pem, cert_pem, key_pem


@dataclass
class HttpsServer:
    """A running `https_files` server: where it is, what it trusts, and what it has seen.

    `hits` counts every request that reached the handler per URL path (GET and HEAD, refused ones included);
    `ranges` lists the `Range` header of every request that had one, in order, so a test can assert that a
    resumed download asked for `bytes=N-`. Both are written by the server's threads under `_lock`; read them
    once the client is done.
    """

    url: str
    ca_bundle: Path
    folder: Path
    token: str | None = None
    hits: Counter[str] = field(default_factory=Counter, init=False)
    ranges: list[str] = field(default_factory=list, init=False)
    _truncate: int | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def revoke(self) -> str:
        """Accept another token from now on (returned), so the old one is answered 403 as a revoked one would be."""
        with self._lock:
            self.token = f"tok-{secrets.token_hex(16)}"
            return self.token

    def truncate_next(self, n_bytes: int) -> None:
        """The next GET with a body sends its full headers, then `n_bytes` of the body, then closes the connection.

        The close skips TLS's close_notify, as a dropped connection would: the client gets exactly `n_bytes` and
        then an end it must treat as an error (Content-Length promised more), the case a resumed download handles.
        """
        with self._lock:
            self._truncate = n_bytes

    def url_of(self, relative: str) -> str:
        """The URL of a file below `folder` (its path relative to `folder`, with / separators)."""
        return f"{self.url}/{urllib.parse.quote(relative)}"

    def _record(self, path: str, range_header: str | None) -> None:
        with self._lock:
            self.hits[path] += 1
            if range_header is not None:
                self.ranges.append(range_header)

    def _take_truncation(self) -> int | None:
        with self._lock:
            taken, self._truncate = self._truncate, None
            return taken

    def _token_now(self) -> str | None:
        with self._lock:
            return self.token


_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) inclusive for one `bytes=` range, or None when it is not satisfiable (416).

    Only single ranges: `N-`, `N-M` and the suffix `-K`. A malformed header is treated as unsatisfiable rather
    than ignored, so a client bug shows up as a 416 in the test instead of a silently full body.
    """
    match = _RANGE.fullmatch(header.strip())
    if match is None:
        return None
    first_text, last_text = match.groups()
    if not first_text:
        if not last_text or int(last_text) == 0:
            return None
        return max(size - int(last_text), 0), size - 1
    first = int(first_text)
    last = min(int(last_text), size - 1) if last_text else size - 1
    if first >= size or last < first:
        return None
    return first, last


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves files below the state's folder; HTTP/1.0 (one request per connection) so shutdown never waits on an
    idle keep-alive connection."""

    server: _TlsServer
    timeout = 30  # a stalled client cannot hold a handler thread (and so the shutdown) for long

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the request line can carry a token (a query string), and tests read their own counters."""

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        state = self.server.state
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        range_header = self.headers.get("Range")
        state._record(path, range_header)
        if not self._authorized(state._token_now()):
            return
        target = (state.folder / path.lstrip("/")).resolve()
        if not target.is_relative_to(state.folder.resolve()) or not target.is_file():
            self._empty(404)
            return
        data = target.read_bytes()
        size = len(data)
        etag = f'"{hashlib.sha256(data).hexdigest()}"'
        if_range = self.headers.get("If-Range")
        if range_header is not None and (if_range is None or if_range == etag):
            span = _parse_range(range_header, size)
            if span is None:
                self._empty(416, {"Content-Range": f"bytes */{size}"})
                return
            first, last = span
            status, payload = 206, data[first : last + 1]
            extra = {"Content-Range": f"bytes {first}-{last}/{size}"}
        else:
            status, payload, extra = 200, data, {}
        self.send_response(status)
        for name, value in {
            **extra,
            "Content-Type": "application/octet-stream",
            "Content-Length": str(len(payload)),
            "Accept-Ranges": "bytes",
            "ETag": etag,
        }.items():
            self.send_header(name, value)
        self.end_headers()
        if not body:
            return
        cut = state._take_truncation()
        if cut is None:
            self.wfile.write(payload)
            return
        # HTTP/1.0: the connection closes as the handler returns, and Python's TLS sockets close without
        # close_notify, so the client reads `cut` bytes and then an end that falls short of Content-Length.
        self.wfile.write(payload[:cut])

    def _authorized(self, token: str | None) -> bool:
        if token is None:
            return True
        given = self.headers.get("Authorization")
        if given is None:
            self._empty(401, {"WWW-Authenticate": 'Bearer realm="orch-test"'})
            return False
        if not secrets.compare_digest(given.encode(), f"Bearer {token}".encode()):
            self._empty(403)
            return False
        return True

    def _empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _TlsServer(http.server.ThreadingHTTPServer):
    """A ThreadingHTTPServer whose connections are wrapped in TLS in their own thread.

    Wrapping the listening socket instead would run each handshake in the accepting thread, where one client
    that connects and never speaks stalls every other. Handler threads are joined at `server_close` (not
    daemons), so no socket outlives the context manager.
    """

    daemon_threads = False
    block_on_close = True

    def __init__(self, context: ssl.SSLContext, state: HttpsServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.context = context
        self.state = state

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(_Handler.timeout)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return  # a client that gave up during the handshake (or a plain-HTTP one): nothing to serve
        try:
            _Handler(tls, client_address, self)
        except OSError:
            pass  # the client went away mid-response: its problem, not the test's
        finally:
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Silent, as the request log is: a broken connection is part of what these tests do on purpose."""


@contextmanager
def https_files(folder: Path, token: str | None = None) -> Iterator[HttpsServer]:
    """Serve the files below `folder` over HTTPS on 127.0.0.1 and a free port, with a CA of its own.

    With `token`, every request needs `Authorization: Bearer <token>` (401 without one, 403 with another).
    """
    with tempfile.TemporaryDirectory(prefix="orch-https-") as scratch:
        ca_pem, cert_pem, key_pem = _write_certificates(Path(scratch))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_pem, key_pem)
        state = HttpsServer(url="", ca_bundle=ca_pem, folder=Path(folder), token=token)
        server = _TlsServer(context, state)
        state.url = f"https://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield state
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=30)


# --------------------------------------------------------------------------------------------------------------
# S3 (moto)
# --------------------------------------------------------------------------------------------------------------


@dataclass
class S3Server:
    """A running `s3_server`: its endpoint, region, and the key of an IAM user allowed s3:* (and nothing else).

    `create_bucket`, `put` and `revoke` act with a second, administrator key that tests never see, so revoking
    the test key cannot lock the fixture out of its own server.
    """

    endpoint: str
    region: str
    access_key_id: str
    secret_access_key: str
    user_name: str
    _admin_key: tuple[str, str] = field(repr=False)

    def client(self, service: str = "s3", key: tuple[str, str] | None = None) -> Any:
        """A boto3 client for this server, with the test key unless `key` is given; the caller closes it."""
        key_id, secret = key or (self.access_key_id, self.secret_access_key)
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
        )

    def create_bucket(self, name: str) -> None:
        admin = self.client("s3", self._admin_key)
        try:
            admin.create_bucket(Bucket=name)
        finally:
            admin.close()

    def put(self, bucket: str, key: str, data: bytes) -> None:
        admin = self.client("s3", self._admin_key)
        try:
            admin.put_object(Bucket=bucket, Key=key, Body=data)
        finally:
            admin.close()

    def revoke(self) -> None:
        """Delete the test key in IAM: every later request signed with it is refused (InvalidAccessKeyId)."""
        iam = self.client("iam", self._admin_key)
        try:
            iam.delete_access_key(UserName=self.user_name, AccessKeyId=self.access_key_id)
        finally:
            iam.close()

    def new_key(self) -> tuple[str, str]:
        """A fresh key for the same user; it becomes `access_key_id`/`secret_access_key` and is returned."""
        iam = self.client("iam", self._admin_key)
        try:
            created = iam.create_access_key(UserName=self.user_name)["AccessKey"]
        finally:
            iam.close()
        self.access_key_id, self.secret_access_key = created["AccessKeyId"], created["SecretAccessKey"]
        return self.access_key_id, self.secret_access_key


def _allow(actions: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]})


def _iam_user(iam: Any, name: str, actions: str) -> tuple[str, str]:
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName=f"{name}-policy", PolicyDocument=_allow(actions))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return str(key["AccessKeyId"]), str(key["SecretAccessKey"])


@contextmanager
def s3_server() -> Iterator[S3Server]:
    """moto's S3 (and IAM) in a thread on 127.0.0.1 and a free port, with IAM authentication enforced.

    How moto enforces it (moto 5.2, moto/core/authorization.py): every request's handler calls
    `_authenticate_and_authorize_action`, which checks the SigV4 signature against the keys in moto's IAM backend
    and the user's policies only once `ActionAuthenticatorMixin.request_count` has reached
    `settings.INITIAL_NO_AUTH_ACTION_COUNT` (default infinity: never). In server mode that setting is changed
    with `POST /moto-api/reset-auth` and the count as body (moto's own `set_initial_no_auth_action_count`
    decorator does just that), which also resets the request count and answers the previous value.

    So: while auth is still off, two IAM users are made through the server's own IAM API (an administrator with
    `*`, kept private, and the test user with `s3:*`), then reset-auth `0` switches enforcement on. At exit the
    previous value is restored and moto's backends are reset (`POST /moto-api/reset`): moto keeps its state in
    process-wide globals, and the server runs in this process, so both would otherwise leak into later tests
    (a `mock_aws` test in the same process would find auth enforced while this server runs). For the same
    reason, run one `s3_server` at a time per process: two would share one set of buckets, users and setting.
    """
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    previous = "inf"
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        bootstrap = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name=S3_REGION,
            aws_access_key_id="bootstrap",  # any key is accepted while auth is off
            aws_secret_access_key="bootstrap",
        )
        try:
            admin_key = _iam_user(bootstrap, "orch-test-admin", "*")
            user_key = _iam_user(bootstrap, "orch-test-reader", "s3:*")
        finally:
            bootstrap.close()
        answered = requests.post(f"{endpoint}/moto-api/reset-auth", data=b"0", timeout=30)
        answered.raise_for_status()
        previous = str(answered.json()["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"])
        yield S3Server(
            endpoint=endpoint,
            region=S3_REGION,
            access_key_id=user_key[0],
            secret_access_key=user_key[1],
            user_name="orch-test-reader",
            _admin_key=admin_key,
        )
    finally:
        try:
            host, port = server.get_host_and_port()
            requests.post(f"http://{host}:{port}/moto-api/reset-auth", data=previous.encode(), timeout=30)
            requests.post(f"http://{host}:{port}/moto-api/reset", timeout=30)
        finally:
            server.stop()
            # ThreadedMotoServer.stop() shuts the server down but leaves its listening socket open.
            if server._server is not None:
                server._server.server_close()


# --------------------------------------------------------------------------------------------------------------
# OCI registry (Debian's docker-registry via scripts/registry.sh)
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OciRegistry:
    """A running docker-registry with htpasswd auth: plain HTTP on the loopback, user `user`, its `password`."""

    address: str
    folder: Path
    user: str
    password: str

    def script(self, command: str) -> subprocess.CompletedProcess[str]:
        """Run scripts/registry.sh for this registry (start, stop, status), as test_registry.py's `Registry` does."""
        env = {
            **os.environ,
            "ORCH_REGISTRY_ADDR": self.address,
            "ORCH_REGISTRY_DIR": str(self.folder),
            "ORCH_REGISTRY_AUTH": "htpasswd",
            "ORCH_REGISTRY_USER": self.user,
            "ORCH_REGISTRY_PASSWORD": self.password,
            # A cold first start on a busy 2-core machine once took over the script's default 30 s.
            "ORCH_REGISTRY_WAIT": "120",
        }
        return subprocess.run(
            [str(REGISTRY_SCRIPT), command], env=env, capture_output=True, text=True, timeout=600, check=False
        )

    def push_artifact(self, repository: str, files: list[Path], tag: str = "v1") -> str:
        """Push `files` as an OCI artifact to `repository:tag` with oras-py; return its manifest digest.

        One layer per file, titled (`org.opencontainers.image.title`) with the file's name. oras-py's `basic`
        backend answers this registry's `WWW-Authenticate: Basic` challenge; its default `token` backend would
        ask the realm for a bearer token and fail. `set_basic_auth` is used rather than `login`, which would
        write the password into ~/.docker/config.json.
        """
        import oras.provider  # type: ignore[import-untyped,unused-ignore]

        client = oras.provider.Registry(hostname=self.address, insecure=True, auth_backend="basic")
        try:
            client.auth.set_basic_auth(self.user, self.password)
            client.push(
                target=f"{self.address}/{repository}:{tag}",
                files=[str(path) for path in files],
                disable_path_validation=True,
                quiet=True,
            )
        finally:
            client.session.close()
        return self.manifest_digest(repository, tag)

    def manifest(self, repository: str, reference: str) -> tuple[str, bytes]:
        """(digest, bytes) of a manifest by tag or digest, the digest checked against the bytes' sha256."""
        response = requests.get(
            f"http://{self.address}/v2/{repository}/manifests/{reference}",
            headers={"Accept": OCI_MANIFEST},
            auth=(self.user, self.password),
            timeout=30,
        )
        response.raise_for_status()
        digest = response.headers["Docker-Content-Digest"]
        computed = f"sha256:{hashlib.sha256(response.content).hexdigest()}"
        assert digest == computed, f"the registry says {digest} for a manifest whose sha256 is {computed}"
        return digest, response.content

    def manifest_digest(self, repository: str, reference: str) -> str:
        return self.manifest(repository, reference)[0]


@contextmanager
def oci_registry(tmp: Path) -> Iterator[OciRegistry]:
    """Debian's docker-registry with htpasswd auth on a free loopback port, its storage below `tmp`; stopped at exit.

    Without docker-registry and without root to install it: a skip, or a failure under CI=true (as
    test_registry.py's fixture). As root, scripts/registry.sh installs it (apt-get) on its first start.
    """
    if shutil.which("docker-registry") is None and os.geteuid() != 0:
        message = "Debian's docker-registry is not installed and this is not root (make registry-tools)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    folder = Path(tmp) / "oci-registry"
    folder.mkdir(parents=True, exist_ok=True)
    running = OciRegistry(
        address=f"127.0.0.1:{_free_port()}", folder=folder, user="orch", password=f"pw-{secrets.token_hex(12)}"
    )
    started = running.script("start")
    assert started.returncode == 0, started.stderr
    try:
        yield running
    finally:
        stopped = running.script("stop")
        assert stopped.returncode == 0, stopped.stderr
