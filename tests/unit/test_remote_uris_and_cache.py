"""Remote sources, the pure parts (issue 27): what a `uri` may be and how it must be pinned, the content-addressed
cache (verified before use, a changed copy removed, the size limit), an OCI artifact's layer titles, the S3
credential's form, and the hand-over's list of remote items checked against the shipped dossier. The fetches
themselves run against real servers in tests/integration/test_remote_sources.py and test_remote_minilm.py; the
Hugging Face client has no local server, so its uri parsing and pinning are tested here only."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from orchestrator.dossier.models import Artifact
from orchestrator.dossier.sources import SourceError, cached_object, parse_source
from orchestrator.errors import BadInput, HandoverDamaged, SourceMismatch, SourceUnreachable
from orchestrator.remote.cache import ContentCache, content_sha256, default_root, parse_size
from orchestrator.remote.fetch import RemoteItem, ca_bundle, seed_item
from orchestrator.remote.oci_source import _titles
from orchestrator.remote.transfer import FetchRequest, Resumable, fetch_failed

COMMIT = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("uri", "scheme", "location", "path", "pin", "folder"),
    [
        ("https://models.example.org/v1/weights.bin", "https", "https://models.example.org/v1/weights.bin", "", "", False),
        ("s3://team-weights/minilm/model.safetensors", "s3", "team-weights", "minilm/model.safetensors", "", False),
        ("s3://team-weights/minilm/", "s3", "team-weights", "minilm/", "", True),
        (f"hf://sentence-transformers/all-MiniLM-L6-v2@{COMMIT}/model.safetensors", "hf",
         "sentence-transformers/all-MiniLM-L6-v2", "model.safetensors", COMMIT, False),
        (f"hf://datasets/org/corpus@{COMMIT}/data/", "hf", "org/corpus", "data", COMMIT, True),
        (f"oci://ghcr.io/team/minilm-weights@{DIGEST}", "oci", "ghcr.io", "team/minilm-weights", DIGEST, False),
        (f"oci://127.0.0.1:5055/a/b@{DIGEST}", "oci", "127.0.0.1:5055", "a/b", DIGEST, False),
    ],
)  # fmt: skip
def test_each_scheme_parses_into_what_its_client_needs(
    uri: str, scheme: str, location: str, path: str, pin: str, folder: bool
) -> None:
    source = parse_source(uri)
    assert (source.scheme, source.location, source.path, source.pin, source.folder) == (
        scheme, location, path, pin, folder,
    )  # fmt: skip


def test_only_a_loopback_registry_is_reached_over_plain_http() -> None:
    assert parse_source(f"oci://127.0.0.1:5055/a/b@{DIGEST}").loopback
    assert parse_source(f"oci://localhost:5000/a/b@{DIGEST}").loopback
    assert not parse_source(f"oci://registry.example.org/a/b@{DIGEST}").loopback
    assert not parse_source(f"oci://127.0.0.1.example.org/a/b@{DIGEST}").loopback


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("hf://sentence-transformers/all-MiniLM-L6-v2@main/model.safetensors",
         "revision 'main' is a branch or tag, which can move"),
        ("hf://sentence-transformers/all-MiniLM-L6-v2@v1.0/model.safetensors", "revision 'v1.0' is a branch or tag"),
        ("hf://sentence-transformers/all-MiniLM-L6-v2/model.safetensors", "names no revision"),
        ("oci://ghcr.io/team/minilm-weights:latest", "the tag 'latest' can move to another artifact"),
        ("oci://ghcr.io/team/minilm-weights", "has no digest"),
        ("oci://ghcr.io/team/minilm-weights@sha256:abc", "is not a sha256 digest"),
        ("http://models.example.org/weights.bin", "plain http is not fetched"),
        ("gs://bucket/weights.bin", "fetch this one yourself"),
        ("s3://team-weights", "name the object"),
        ("s3://Bad_Bucket/key", "is not an S3 bucket name"),
        ("weights.bin", "is not a URI"),
    ],
)  # fmt: skip
def test_a_moving_name_or_an_unknown_source_is_refused_with_what_to_write(uri: str, says: str) -> None:
    with pytest.raises(SourceError, match=says.replace("(", r"\(").replace(".", r"\.")):
        parse_source(uri)


def test_the_dossier_refuses_an_unpinned_uri_and_an_endpoint_off_s3_by_field() -> None:
    with pytest.raises(ValueError, match="branch or tag"):
        Artifact(name="w", uri="hf://o/r@main/f.bin", sha256="a" * 64, provenance="p")
    with pytest.raises(ValueError, match="'endpoint' goes with an s3:// uri"):
        Artifact(name="w", uri=f"oci://h/r@{DIGEST}", sha256="a" * 64, provenance="p", endpoint="https://s3.x")
    with pytest.raises(ValueError, match="must not carry credentials"):
        Artifact(name="w", uri="https://user:secret@models.example.org/w.bin", sha256="a" * 64, provenance="p")
    kept = Artifact(name="w", uri="s3://b-1/k", sha256="a" * 64, provenance="p", endpoint="http://127.0.0.1:9000")
    assert kept.endpoint == "http://127.0.0.1:9000"


def test_the_cache_hands_out_an_object_only_after_hashing_it_and_removes_a_changed_one(tmp_path: Path) -> None:
    cache = ContentCache(tmp_path / "c")
    staged = tmp_path / "w.bin"
    staged.write_bytes(b"weights")
    sha = hashlib.sha256(b"weights").hexdigest()
    stored = cache.store(sha, staged)
    assert stored == cached_object(tmp_path / "c", sha) and cache.get(sha).path == stored
    stored.write_bytes(b"weightz")
    found = cache.get(sha)
    assert found.path is None and found.changed is not None and "removed" in found.changed
    assert not stored.exists()
    folder = tmp_path / "tree"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.txt").write_text("a")
    tree = content_sha256(folder)
    cache.store(tree, folder)
    assert cache.get(tree).path is not None
    (cached_object(tmp_path / "c", tree) / "extra.txt").write_text("added")
    assert cache.get(tree).path is None, "a file added to a cached folder went unnoticed"


def test_the_size_limit_removes_the_least_recently_used_and_never_the_item_just_stored(tmp_path: Path) -> None:
    import os

    cache = ContentCache(tmp_path / "c", max_bytes=25)
    shas = []
    for index, data in enumerate((b"a" * 10, b"b" * 10)):
        staged = tmp_path / f"{index}.bin"
        staged.write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        cache.store(sha, staged)
        os.utime(cached_object(cache.root, sha), (1000 + index, 1000 + index))
        shas.append(sha)
    big = tmp_path / "big.bin"
    big.write_bytes(b"c" * 30)
    newest = hashlib.sha256(b"c" * 30).hexdigest()
    cache.store(newest, big)  # over the limit alone: kept, the two older ones go
    assert [entry.sha256 for entry in cache.entries()] == [newest]
    assert cache.prune(0) and cache.entries() == []


@pytest.mark.parametrize(
    ("text", "size"),
    [("0", 0), ("512M", 512 << 20), ("50G", 50 << 30), ("1.5T", int(1.5 * (1 << 40))), ("2gib", 2 << 30)],
)
def test_sizes_read_in_binary_units(text: str, size: int) -> None:
    assert parse_size(text, what="--max-size") == size


def test_a_size_that_is_not_one_is_bad_input_naming_the_option() -> None:
    with pytest.raises(BadInput, match="--max-size: 'lots' is not a size"):
        parse_size("lots", what="--max-size")


def test_the_cache_folder_follows_the_settings_in_their_order(tmp_path: Path) -> None:
    assert default_root({"ORCH_SOURCES_DIR": "/big/sources", "ORCH_CACHE_DIR": "/c"}) == Path("/big/sources")
    assert default_root({"ORCH_CACHE_DIR": "/c"}) == Path("/c/sources")
    assert default_root({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x/orch/sources")
    assert default_root({"HOME": "/h"}) == Path("/h/.cache/orch/sources")
    assert ca_bundle({"SSL_CERT_FILE": "/b.pem"}) == "/b.pem"
    assert ca_bundle({"REQUESTS_CA_BUNDLE": "/a.pem", "SSL_CERT_FILE": "/b.pem"}) == "/a.pem"


def test_oci_layer_titles_become_paths_inside_the_item_or_are_refused(tmp_path: Path) -> None:
    request = _request(tmp_path, f"oci://127.0.0.1:5055/a/b@{DIGEST}")
    layers = [{"digest": "d1", "annotations": {"org.opencontainers.image.title": "1_Pooling/config.json"}}]
    assert [str(p) for p in _titles(request, layers)] == ["1_Pooling/config.json"]
    for title in ("../escape", "/etc/passwd", "", ".", "a/../../b"):
        with pytest.raises(SourceUnreachable, match="no usable title"):
            _titles(request, [{"digest": "d", "annotations": {"org.opencontainers.image.title": title}}])
    twice = [{"digest": "d", "annotations": {"org.opencontainers.image.title": "a"}}] * 2
    with pytest.raises(SourceUnreachable, match="no usable title"):
        _titles(request, twice)


def test_a_failure_names_the_item_the_source_and_the_variable_never_a_value(tmp_path: Path) -> None:
    request = _request(tmp_path, "https://models.example.org/w.bin", access="TEAM_TOKEN", credential="s3cr3t-value")
    failure = fetch_failed(request, "the server refused the credential (HTTP 403)")
    assert failure.exit_code == 3 and failure.code == "remote-source"
    assert failure.message.startswith(
        "fetching weights w from https://models.example.org/w.bin (credential from $TEAM_TOKEN)"
    )
    assert "s3cr3t-value" not in failure.message + (failure.hint or "")


def test_a_resumable_download_restarts_when_the_source_changed_its_validator(tmp_path: Path) -> None:
    part = Resumable(tmp_path / "p")
    part.restart('"etag-1"')
    part.append([b"abc", b"def"], 9, lambda done, total: None)
    assert (part.offset, part.validator) == (6, '"etag-1"')
    part.restart('"etag-2"')
    assert part.offset == 0 and part.validator is None  # nothing to resume from until bytes arrive
    # A source that sends more than it announced stops at the announced size.
    part.append(iter([b"12345", b"67890", b"never read"]), 7, lambda done, total: None)
    assert part.data.read_bytes() == b"1234567"


def test_a_copy_at_hand_seeds_the_cache_only_when_it_is_the_declared_bytes(tmp_path: Path) -> None:
    copy = tmp_path / "copy.bin"
    copy.write_bytes(b"the weights")
    sha = hashlib.sha256(b"the weights").hexdigest()
    item = RemoteItem("weights", "w", parse_source("https://h.example/w.bin"), sha, None, None)
    cache = ContentCache(tmp_path / "c")
    assert seed_item(item, copy, cache).status == "fetched"
    assert seed_item(item, copy, cache).status == "cached"
    other = RemoteItem("weights", "w", parse_source("https://h.example/w.bin"), "f" * 64, None, None)
    with pytest.raises(SourceMismatch, match=f"has sha256 {sha}, not the declared {'f' * 64}"):
        seed_item(other, copy, cache)


def test_a_hand_over_whose_manifest_redirects_a_remote_item_is_damaged(tmp_path: Path) -> None:
    from orchestrator.dossier.load import load_dossier
    from orchestrator.model.manifest import Manifest
    from orchestrator.model.manifest import RemoteItem as Listed
    from orchestrator.stages.handover_remote import get_handed_over
    from tests.paths import EXAMPLES

    loaded = load_dossier(EXAMPLES / "minilm-embeddings" / "dossier-oci.yaml")
    [declared] = loaded.model.weights
    assert declared.uri is not None
    redirected = Listed(
        kind="weights", name="minilm", uri=declared.uri.replace("127.0.0.1:5055", "evil.example"),
        sha256=declared.sha256, size=1,
    )  # fmt: skip
    manifest = Manifest.model_construct(remote=[redirected])
    with pytest.raises(HandoverDamaged, match="lists other remote items than the shipped dossier declares"):
        get_handed_over(tmp_path, manifest, loaded, environ={"ORCH_SOURCES_DIR": str(tmp_path / "c")})
    with pytest.raises(HandoverDamaged, match="manifest: none"):
        get_handed_over(tmp_path, Manifest.model_construct(remote=None), loaded, environ={})


def _request(tmp: Path, uri: str, access: str | None = None, credential: str | None = None) -> FetchRequest:
    return FetchRequest(
        label="weights w",
        source=parse_source(uri),
        sha256="a" * 64,
        access=access,
        credential=credential,
        endpoint=None,
        ca_bundle=None,
        staging=tmp / "staging",
        on_bytes=lambda done, total: None,
    )


def test_record_tells_a_hub_cache_snapshot_by_its_folder_names_pinned_to_the_commit(tmp_path: Path) -> None:
    from orchestrator.record.paths import hub_origin

    snapshot = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / COMMIT
    (snapshot / "1_Pooling").mkdir(parents=True)
    (snapshot / "model.safetensors").write_bytes(b"w")
    assert hub_origin(snapshot / "model.safetensors") == (
        f"hf://sentence-transformers/all-MiniLM-L6-v2@{COMMIT}/model.safetensors"
    )
    assert hub_origin(snapshot / "1_Pooling") == f"hf://sentence-transformers/all-MiniLM-L6-v2@{COMMIT}/1_Pooling/"
    dataset = tmp_path / "hub" / "datasets--org--corpus" / "snapshots" / COMMIT / "train.jsonl"
    assert hub_origin(dataset) == f"hf://datasets/org/corpus@{COMMIT}/train.jsonl"
    # What it says parses as a pinned source; a path outside a hub cache is not guessed at.
    origin = hub_origin(snapshot / "model.safetensors")
    assert origin is not None and parse_source(origin).pin == COMMIT
    assert hub_origin(tmp_path / "weights" / "model.safetensors") is None
    assert hub_origin(tmp_path / "hub" / "models--a--b" / "snapshots" / "main" / "w.bin") is None
