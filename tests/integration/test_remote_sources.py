"""Remote data and weights fetched for real (issue 27): an https server with its own CA and a bearer token, moto's
S3 server with IAM authentication enforced, and Debian's distribution registry holding an OCI artifact pushed with
oras-py — all on the loopback (tests/integration/remote_servers.py). `orch fetch` and `orch validate --fetch` run as
a user runs them; the cache is a fresh folder per test (ORCH_CACHE_DIR).

Cases: each source fetched, checked and cached, then reused without a request; a download cut midway resumed with
a ranged request, in the same run and by the next one; the same name serving other bytes (exit 2, both hashes,
nothing stored); a revoked credential, an unreachable source and an untrusted CA (exit 3, one line naming the item,
the source and the variable); a tag instead of a digest refused at validate; a cached copy whose bytes changed
removed and fetched again; the cache pruned. No credential value is in any output or cached file (canaries).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from orchestrator.dossier.sources import parse_source
from orchestrator.errors import SourceUnreachable
from orchestrator.remote import fetch as fetch_module
from orchestrator.remote.cache import ContentCache, content_sha256
from orchestrator.remote.fetch import RemoteItem, ensure_item
from tests.integration.helpers import orch
from tests.integration.remote_servers import (
    HttpsServer,
    OciRegistry,
    S3Server,
    https_files,
    oci_registry,
    s3_server,
)
from tests.paths import EXAMPLES

TOKEN_VAR = "ORCH_TEST_HTTPS_TOKEN"
S3_VAR = "ORCH_TEST_S3_KEY"
OCI_VAR = "ORCH_TEST_OCI_AUTH"
#: 3 MiB of random bytes: several chunks, so a cut lands midway.
BLOB = secrets.token_bytes(3 << 20)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsServer]:
    folder = tmp_path_factory.mktemp("https-files")
    (folder / "weights.bin").write_bytes(BLOB)
    with https_files(folder, token=f"canary-https-{secrets.token_hex(12)}") as server:
        yield server


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        server.create_bucket("weights")
        server.put("weights", "blob/weights.bin", BLOB)
        server.put("weights", "model/config.json", b'{"layers": 2}\n')
        server.put("weights", "model/sub/vocab.txt", b"a\nb\n")
        yield server


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OciRegistry]:
    with oci_registry(tmp_path_factory.mktemp("oci")) as running:
        yield running


def _dossier(tmp: Path, items: list[dict[str, str]]) -> Path:
    """tiny-embeddings with these data items: a whole, valid dossier (its lock and sample), remote data added."""
    folder = tmp / "dossier"
    shutil.copytree(EXAMPLES / "tiny-embeddings", folder)
    path = folder / "dossier.yaml"
    path.write_text(path.read_text() + "\n" + yaml.safe_dump({"data": items}, sort_keys=False))
    return path


def _item(name: str, uri: str, sha256: str, access: str | None = None, **extra: str) -> dict[str, str]:
    item = {"name": name, "uri": uri, "sha256": sha256, "provenance": "made by the test"}
    if access:
        item["access"] = access
    return {**item, **extra}


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _env(tmp: Path, server: HttpsServer | None = None, **variables: str) -> dict[str, str]:
    env = {"ORCH_CACHE_DIR": str(tmp / "cache"), **variables}
    if server is not None:
        env["REQUESTS_CA_BUNDLE"] = str(server.ca_bundle)
    return env


def _objects(tmp: Path) -> list[str]:
    objects = tmp / "cache" / "sources" / "objects"
    return sorted(p.name for p in objects.iterdir()) if objects.is_dir() else []


def _no_secret(values: list[str], *texts: str, folder: Path | None = None) -> None:
    for value in values:
        for text in texts:
            assert value not in text, "a credential value was printed"
        if folder is not None and folder.exists():
            for path in folder.rglob("*"):
                if path.is_file():
                    assert value.encode() not in path.read_bytes(), f"a credential value is in {path}"


def test_an_https_item_is_fetched_checked_cached_and_then_reused_without_a_request(
    served: HttpsServer, tmp_path: Path
) -> None:
    dossier = _dossier(tmp_path, [_item("blob", served.url_of("weights.bin"), _sha(BLOB), TOKEN_VAR)])
    env = _env(tmp_path, served, **{TOKEN_VAR: str(served.token)})
    first = orch("fetch", str(dossier), env=env)
    assert first.returncode == 0, first.stderr + first.stdout
    assert "fetched" in first.stdout and "data blob" in first.stdout
    assert _objects(tmp_path) == [_sha(BLOB)]
    assert (tmp_path / "cache" / "sources" / "objects" / _sha(BLOB)).read_bytes() == BLOB
    hits = served.hits["/weights.bin"]
    again = orch("validate", "--fetch", "--json", str(dossier), env=env)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["fetched"] == ["blob"] and summary["fingerprints_remote"] == []
    assert "cached" in again.stderr
    assert served.hits["/weights.bin"] == hits, "a cached item was requested again"
    _no_secret([str(served.token)], first.stdout, first.stderr, again.stdout, again.stderr, folder=tmp_path / "cache")


def test_a_cut_download_resumes_with_a_ranged_request_in_the_same_run_and_in_the_next(
    served: HttpsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    item = RemoteItem("weights", "blob", parse_source(served.url_of("weights.bin")), _sha(BLOB), TOKEN_VAR, None)
    environ = {TOKEN_VAR: str(served.token), "REQUESTS_CA_BUNDLE": str(served.ca_bundle)}
    cache = ContentCache(tmp_path / "cache")
    # In one run: the cut is followed at once by a request for the rest.
    seen = len(served.ranges)
    served.truncate_next(1 << 20)
    done = ensure_item(item, cache, environ)
    assert done.status == "fetched" and done.path.read_bytes() == BLOB
    resumed = served.ranges[seen:]
    assert resumed and resumed[0].startswith("bytes=") and resumed[0] != "bytes=0-", resumed
    # Across runs: one try only, so the cut ends the run; the bytes so far stay, and the next run asks for the rest.
    cache = ContentCache(tmp_path / "cache2")
    monkeypatch.setattr(fetch_module, "ATTEMPTS", 1)
    served.truncate_next(2 << 20)
    with pytest.raises(SourceUnreachable, match="weights blob"):
        ensure_item(item, cache, environ)
    partial = cache.partial_dir(item.sha256) / "data"
    kept = partial.stat().st_size
    assert 0 < kept < len(BLOB)
    seen = len(served.ranges)
    done = ensure_item(item, cache, environ)
    assert done.path.read_bytes() == BLOB
    assert served.ranges[seen:] == [f"bytes={kept}-"]
    assert not cache.partial_dir(item.sha256).exists()


def test_the_same_name_serving_other_bytes_is_bad_input_naming_both_hashes_and_nothing_is_stored(
    served: HttpsServer, tmp_path: Path
) -> None:
    other = BLOB[:-1] + bytes([BLOB[-1] ^ 1])
    (served.folder / "moved.bin").write_bytes(other)
    dossier = _dossier(tmp_path, [_item("moved", served.url_of("moved.bin"), _sha(BLOB), TOKEN_VAR)])
    done = orch("fetch", str(dossier), env=_env(tmp_path, served, **{TOKEN_VAR: str(served.token)}))
    assert done.returncode == 2, done.stderr + done.stdout
    assert "error[remote-mismatch]" in done.stderr
    assert _sha(BLOB) in done.stderr and _sha(other) in done.stderr
    assert _objects(tmp_path) == []


def test_a_revoked_token_an_unreachable_source_and_an_untrusted_ca_are_one_line_exit_3(
    served: HttpsServer, tmp_path: Path
) -> None:
    token = str(served.token)
    dossier = _dossier(tmp_path, [_item("blob", served.url_of("weights.bin"), _sha(BLOB), TOKEN_VAR)])
    served.revoke()
    try:
        refused = orch("fetch", str(dossier), env=_env(tmp_path, served, **{TOKEN_VAR: token}))
    finally:
        served.token = token  # the module's other tests use the first token again
    assert refused.returncode == 3, refused.stderr
    line = next(line for line in refused.stderr.splitlines() if line.startswith("error[remote-source]"))
    assert "data blob" in line and served.url_of("weights.bin") in line and f"${TOKEN_VAR}" in line
    assert "refused the credential (HTTP 403)" in line
    # No network to the source: a port nothing listens on.
    closed = _dossier(tmp_path / "closed", [_item("blob", "https://127.0.0.1:9/weights.bin", _sha(BLOB), TOKEN_VAR)])
    offline = orch("fetch", str(closed), env=_env(tmp_path, served, **{TOKEN_VAR: token}))
    assert offline.returncode == 3, offline.stderr
    assert "data blob" in offline.stderr and "https://127.0.0.1:9/weights.bin" in offline.stderr
    # The server's own CA not trusted: said so, with the variable that names a bundle.
    untrusted = orch("fetch", str(dossier), env={**_env(tmp_path / "u"), TOKEN_VAR: token, "REQUESTS_CA_BUNDLE": ""})
    assert untrusted.returncode == 3 and "REQUESTS_CA_BUNDLE" in untrusted.stderr, untrusted.stderr
    # A variable named but not set: bad input naming it.
    unset = orch("fetch", str(dossier), env={**_env(tmp_path / "n", served), TOKEN_VAR: ""})
    assert unset.returncode == 2 and f"${TOKEN_VAR}" in unset.stderr, unset.stderr
    _no_secret([token], refused.stderr, offline.stderr, untrusted.stderr, refused.stdout)


def test_s3_objects_and_a_prefix_fetched_with_the_key_then_refused_once_it_is_revoked(
    s3: S3Server, tmp_path: Path
) -> None:
    key = f"{s3.access_key_id}:{s3.secret_access_key}"
    folder = tmp_path / "expected"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_bytes(b'{"layers": 2}\n')
    (folder / "sub" / "vocab.txt").write_bytes(b"a\nb\n")
    items = [
        _item("blob", "s3://weights/blob/weights.bin", _sha(BLOB), S3_VAR, endpoint=s3.endpoint),
        _item("model", "s3://weights/model/", content_sha256(folder), S3_VAR, endpoint=s3.endpoint),
    ]
    dossier = _dossier(tmp_path, items)
    done = orch("fetch", "--json", str(dossier), env=_env(tmp_path, **{S3_VAR: key}))
    assert done.returncode == 0, done.stderr + done.stdout
    assert [entry["status"] for entry in json.loads(done.stdout)] == ["fetched", "fetched"]
    model = tmp_path / "cache" / "sources" / "objects" / content_sha256(folder)
    assert (model / "sub" / "vocab.txt").read_bytes() == b"a\nb\n"
    s3.revoke()
    try:
        refused = orch("fetch", str(dossier), env=_env(tmp_path / "again", **{S3_VAR: key}))
    finally:
        s3.new_key()
    assert refused.returncode == 3, refused.stderr
    assert "refused the credential (InvalidAccessKeyId)" in refused.stderr and f"${S3_VAR}" in refused.stderr
    _no_secret([s3.secret_access_key, key.split(":")[1]], done.stdout, done.stderr, refused.stderr, folder=tmp_path)


def test_an_oci_artifact_fetched_by_digest_as_a_folder_and_a_tag_refused_at_validate(
    registry: OciRegistry, tmp_path: Path
) -> None:
    from tests.integration.minilm_weights import push_folder

    folder = tmp_path / "weights"
    folder.mkdir()
    # push_folder's titles are the minilm files' paths: a small stand-in for each keeps the test quick.
    from tests.integration.minilm_weights import FILES, REPOSITORY

    for index, name in enumerate(FILES):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(f"file {index}\n".encode())
    push_folder(registry.address, registry.user, registry.password, folder)
    digest = registry.manifest_digest(REPOSITORY, "v1")
    auth = f"{registry.user}:{registry.password}"
    uri = f"oci://{registry.address}/{REPOSITORY}@{digest}"
    dossier = _dossier(tmp_path, [_item("model", uri, content_sha256(folder), OCI_VAR)])
    done = orch("fetch", str(dossier), env=_env(tmp_path, **{OCI_VAR: auth}))
    assert done.returncode == 0, done.stderr + done.stdout
    cached = tmp_path / "cache" / "sources" / "objects" / content_sha256(folder)
    assert (cached / "1_Pooling" / "config.json").read_bytes() == (folder / "1_Pooling" / "config.json").read_bytes()
    # A digest the repository does not hold: the source's answer, exit 3.
    missing = _dossier(
        tmp_path / "m", [_item("model", uri.rsplit("@", 1)[0] + "@sha256:" + "0" * 64, "1" * 64, OCI_VAR)]
    )
    absent = orch("fetch", str(missing), env=_env(tmp_path / "m", **{OCI_VAR: auth}))
    assert absent.returncode == 3 and "no manifest with that digest" in absent.stderr, absent.stderr
    # A tag can move: refused when the dossier is read, before any request.
    tagged = _dossier(tmp_path / "t", [_item("model", f"oci://{registry.address}/{REPOSITORY}:v1", "1" * 64, OCI_VAR)])
    refused = orch("validate", str(tagged))
    assert refused.returncode == 2 and "the tag 'v1' can move" in refused.stderr, refused.stderr
    _no_secret([registry.password], done.stdout, done.stderr, absent.stderr, folder=tmp_path / "cache")


def test_a_cached_copy_whose_bytes_changed_is_removed_and_fetched_again_and_the_cache_prunes(
    served: HttpsServer, tmp_path: Path
) -> None:
    dossier = _dossier(tmp_path, [_item("blob", served.url_of("weights.bin"), _sha(BLOB), TOKEN_VAR)])
    env = _env(tmp_path, served, **{TOKEN_VAR: str(served.token)})
    assert orch("fetch", str(dossier), env=env).returncode == 0
    cached = tmp_path / "cache" / "sources" / "objects" / _sha(BLOB)
    with cached.open("r+b") as handle:
        handle.write(b"\0")
    again = orch("fetch", str(dossier), env=env)
    assert again.returncode == 0, again.stderr
    assert "refetched" in again.stdout and "removed" in again.stdout
    assert cached.read_bytes() == BLOB
    listed = orch("cache", "list", "--json", env=env)
    entries = json.loads(listed.stdout)["entries"]
    assert [entry["sha256"] for entry in entries] == [_sha(BLOB)] and entries[0]["bytes"] == len(BLOB)
    pruned = orch("cache", "prune", "--max-size", "0", env=env)
    assert pruned.returncode == 0 and "removed 1 item" in pruned.stdout, pruned.stdout + pruned.stderr
    assert _objects(tmp_path) == []
    assert not os.listdir(tmp_path / "cache" / "sources" / "objects")
