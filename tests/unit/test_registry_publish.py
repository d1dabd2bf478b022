"""Publishing to a registry and verifying by digest, on the in-memory engine: references, tags, results,
credentials, the manifest's repository digest, and `orch verify` of a pushed image. No Docker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import PullRequest, RegistryAuth
from orchestrator.engine.fake import FakeEngine
from orchestrator.errors import BadInput, HandoverDamaged, ImageReferenceError
from orchestrator.model.image_ref import parse_pinned, parse_reference, registry_tag
from orchestrator.model.manifest import Manifest
from orchestrator.nightly.cell import CellOutcome
from orchestrator.nightly.publish import PUBLISH_FILE, night_stamp, publish_passed
from orchestrator.stages.handover import IMAGE_FILE, write_handover
from orchestrator.stages.publish import publish_image, push_target, registry_auth
from orchestrator.stages.verify import check_handover, verify_handover
from orchestrator.stages.verify_registry import check_reference, verify_reference
from tests.unit import test_pipeline_fake_engine as pipeline
from tests.unit.test_pipeline_fake_engine import passing_runs, rebuilt

# The fake-engine pipeline's fixtures: the tiny example installed online, no git, a CPU host.
tiny = pipeline.tiny
_code_is_a_plain_folder = pipeline._code_is_a_plain_folder
_cpu_host = pipeline._cpu_host

DIGEST = "sha256:" + "d" * 64
SECRET = "s3cr3t-registry-token-8841"

# -- references ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "registry", "path", "tag", "digest"),
    [
        ("127.0.0.1:5055/team/nightly:abc-20261202", "127.0.0.1:5055", "team/nightly", "abc-20261202", None),
        (f"registry.example.org/x@{DIGEST}", "registry.example.org", "x", None, DIGEST),
        (f"localhost/a/b:t@{DIGEST}", "localhost", "a/b", "t", DIGEST),
        ("team/nightly:1", None, "team/nightly", "1", None),  # no '.', ':' or localhost: a Hub name
        ("debian", None, "debian", None, None),
        ("ghcr.io/o/a__b-c.d", "ghcr.io", "o/a__b-c.d", None, None),
    ],
)
def test_references_split_as_the_distribution_grammar_does(
    text: str, registry: str | None, path: str, tag: str | None, digest: str | None
) -> None:
    reference = parse_reference(text)
    assert (reference.registry, reference.path, reference.tag, reference.digest) == (registry, path, tag, digest)
    assert str(reference) == text


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("127.0.0.1:5055/Team/x", "lowercase"),
        ("r.io/x@sha256:abc", "64 lowercase hex"),
        (f"r.io/x@md5:{'a' * 64}", "sha256"),
        ("r.io/x:-bad", "tag"),
        ("r.io/a//b", "repository"),
        ("bad_host.io/x", "registry"),
        ("", "empty"),
    ],
)
def test_a_malformed_reference_names_the_part_that_is_wrong(text: str, words: str) -> None:
    with pytest.raises(ImageReferenceError, match=words):
        parse_reference(text)


def test_a_tag_alone_is_refused_where_a_digest_is_needed() -> None:
    with pytest.raises(ImageReferenceError, match="a tag can move"):
        parse_pinned("127.0.0.1:5055/team/x:nightly")
    assert parse_pinned(f"127.0.0.1:5055/team/x@{DIGEST}").pinned == f"127.0.0.1:5055/team/x@{DIGEST}"


def test_the_published_tag_is_identity_night_and_target() -> None:
    identity = "0123456789ab" + "f" * 52
    assert registry_tag(identity, "20261202") == "0123456789ab-20261202"
    assert registry_tag(identity, "20261202.2", "gpu-a") == "0123456789ab-20261202.2-gpu-a"
    assert night_stamp(Path("/h/nights/2026-12-02")) == "20261202"
    assert night_stamp(Path("/h/nights/2026-12-02.3")) == "20261202.3"
    with pytest.raises(ImageReferenceError):
        registry_tag(identity, "2026-12-02")
    with pytest.raises(BadInput, match="not a registry host"):
        push_target("registry", "team/x", "t")  # no '.' or ':port': docker would send it to Docker Hub


# -- credentials ---------------------------------------------------------------------------------------------


def test_credentials_come_from_named_variables_and_their_values_never_show() -> None:
    auth = registry_auth("REG_USER", "REG_TOKEN", {"REG_USER": "ci", "REG_TOKEN": SECRET})
    assert auth == RegistryAuth("ci", SECRET)
    assert SECRET not in repr(auth) and SECRET not in str(auth)
    assert registry_auth(None, None, {}) is None
    with pytest.raises(BadInput, match="REG_TOKEN") as missing:
        registry_auth("REG_USER", "REG_TOKEN", {"REG_USER": "ci"})
    assert "ci" not in missing.value.message
    with pytest.raises(BadInput, match="both"):
        registry_auth("REG_USER", None, {"REG_USER": "ci"})


# -- publishing one image -------------------------------------------------------------------------------------


def _engine_with_image(tiny: LoadedDossier, tmp_path: Path) -> tuple[FakeEngine, str]:
    _, engine = rebuilt(tiny, tmp_path / "rebuild")
    record = json.loads((tmp_path / "rebuild" / "build.json").read_text())
    return engine, str(record["image"]["id"])


def test_a_pushed_image_is_held_by_its_repository_digest_and_its_push_tag_is_removed(
    tiny: LoadedDossier, tmp_path: Path
) -> None:
    engine, image_id = _engine_with_image(tiny, tmp_path)
    target = push_target("127.0.0.1:5055", "team/nightly", registry_tag(tiny.identity, "20261202"))
    outcome = publish_image(engine, image_id, target)
    assert outcome.status == "pushed" and outcome.image_id == image_id
    assert outcome.pinned is not None and outcome.pinned.startswith("127.0.0.1:5055/team/nightly@sha256:")
    assert engine.registry[outcome.pinned].id == image_id, "the registry holds this image under that digest"
    assert engine.image(str(target)) is None, "the push tag keeps no night's image alive"
    assert engine.image(outcome.pinned) is None, "as Docker, the engine forgets the digest with the tag"
    assert engine.image(image_id) is not None


def test_a_registry_that_is_down_is_a_failed_result_not_an_exception(tiny: LoadedDossier, tmp_path: Path) -> None:
    engine, image_id = _engine_with_image(tiny, tmp_path)
    engine.registry_error = f"dial tcp 127.0.0.1:5099: connect: connection refused (token {SECRET})"
    target = push_target("127.0.0.1:5099", "team/nightly", "t")
    outcome = publish_image(engine, image_id, target, RegistryAuth("ci", SECRET))
    assert outcome.status == "failed" and outcome.pinned is None
    assert outcome.reason is not None and "connection refused" in outcome.reason
    assert SECRET not in outcome.model_dump_json(), "a registry's echo of the password is scrubbed"
    assert engine.image(str(target)) is None


def test_a_wrong_password_and_a_missing_image_are_failed_results(tiny: LoadedDossier, tmp_path: Path) -> None:
    engine, image_id = _engine_with_image(tiny, tmp_path)
    engine.registry_auth = RegistryAuth("ci", "right")
    target = push_target("127.0.0.1:5055", "team/nightly", "t")
    refused = publish_image(engine, image_id, target, RegistryAuth("ci", "wrong"))
    assert refused.status == "failed" and "unauthorized" in (refused.reason or "")
    missing = publish_image(engine, "sha256:" + "0" * 64, target, RegistryAuth("ci", "right"))
    assert missing.status == "failed" and "not in the engine" in (missing.reason or "")


# -- a night's publishing ----------------------------------------------------------------------------------------


class _Spec:
    registry = "127.0.0.1:5055"
    repository = "team/nightly"
    username_env: str | None = "REG_USER"
    password_env: str | None = "REG_TOKEN"
    sign_key: Path | None = None


def _night(tiny: LoadedDossier, tmp_path: Path) -> tuple[FakeEngine, Path, CellOutcome]:
    night = tmp_path / "nights" / "2026-12-02"
    cell = "tiny-embeddings@local"
    _, engine = rebuilt(tiny, night / cell)
    return engine, night, CellOutcome(cell_id=cell, status="passed", exit_code=0, duration_s=1.0)


def test_a_night_publishes_its_passing_images_and_records_them(tiny: LoadedDossier, tmp_path: Path) -> None:
    engine, night, passed = _night(tiny, tmp_path)
    failed = CellOutcome(cell_id="other@local", status="failed", exit_code=1, duration_s=1.0)
    environ = {"REG_USER": "ci", "REG_TOKEN": SECRET}
    record = publish_passed(_Spec(), night, [passed, failed], engine_for=lambda cell: engine, environ=environ)
    assert record.status == "passed" and [image.cell_id for image in record.images] == [passed.cell_id]
    image = record.images[0]
    assert image.tagged == f"127.0.0.1:5055/team/nightly:{tiny.identity[:12]}-20261202-local"
    assert image.pinned is not None and "@sha256:" in image.pinned
    written = (night / PUBLISH_FILE).read_text()
    assert json.loads(written)["images"][0]["pinned"] == image.pinned
    assert SECRET not in written and "ci" not in json.loads(written)["images"][0].values()


def test_a_night_whose_registry_is_down_records_failed_with_the_reason(tiny: LoadedDossier, tmp_path: Path) -> None:
    engine, night, passed = _night(tiny, tmp_path)
    engine.registry_error = "connect: connection refused"
    record = publish_passed(
        _Spec(), night, [passed], engine_for=lambda cell: engine, environ={"REG_USER": "u", "REG_TOKEN": SECRET}
    )
    assert record.status == "failed" and "connection refused" in str(record)
    assert json.loads((night / PUBLISH_FILE).read_text())["status"] == "failed"


def test_a_night_with_an_unset_credential_variable_fails_each_image_naming_it(
    tiny: LoadedDossier, tmp_path: Path
) -> None:
    engine, night, passed = _night(tiny, tmp_path)
    record = publish_passed(_Spec(), night, [passed], engine_for=lambda cell: engine, environ={"REG_USER": "u"})
    assert record.status == "failed" and "REG_TOKEN" in (record.images[0].reason or "")
    assert not [call for call in engine.calls if call[0] == "push"]


# -- the hand-over's repository digest, and verify by digest ----------------------------------------------------


def test_an_older_manifest_without_a_repository_digest_still_reads() -> None:
    older = {
        "format": "orch.handover/1",
        "orch_version": "0.9",
        "created": "2026-01-01T00:00:00Z",
        "dossier_name": "x",
        "dossier_file": "dossier.yaml",
        "identity": "a" * 64,
        "variant": None,
        "platform": "cpu",
        "image_id": "sha256:" + "b" * 64,
        "image_tag": "orch/x:aaaaaaaaaaaa",
        "report_verdict": "passed",
        "files": [],
    }
    assert Manifest.model_validate(older).repository_digest is None


def test_a_handover_without_push_writes_the_older_manifest_exactly(tiny: LoadedDossier, tmp_path: Path) -> None:
    _, engine = rebuilt(tiny, tmp_path / "rebuild")
    write_handover(tiny, engine, tmp_path / "rebuild", tmp_path / "handover")
    assert "repository_digest" not in json.loads((tmp_path / "handover" / "manifest.json").read_text())


def _pushed_handover(tiny: LoadedDossier, tmp_path: Path, *, image_file: bool) -> tuple[FakeEngine, Path]:
    _, engine = rebuilt(tiny, tmp_path / "rebuild")
    target = push_target("127.0.0.1:5055", "team/handover", "t1")
    manifest = write_handover(
        tiny, engine, tmp_path / "rebuild", tmp_path / "handover", push_to=target, image_file=image_file
    )
    assert manifest.repository_digest is not None
    assert manifest.repository_digest.startswith("127.0.0.1:5055/team/handover@sha256:")
    return engine, tmp_path / "handover"


def test_a_handover_pulled_by_digest_replays_on_a_clean_engine(tiny: LoadedDossier, tmp_path: Path) -> None:
    engine, folder = _pushed_handover(tiny, tmp_path, image_file=False)
    assert not (folder / IMAGE_FILE).exists()
    procedure = (folder / "PROCEDURE.md").read_text()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert f"docker pull {manifest['repository_digest']}" in procedure and "docker load" not in procedure
    clean = FakeEngine(runs=passing_runs(tiny))
    clean.registry = engine.registry  # the same registry, seen from another machine
    result = verify_handover(folder, clean, tmp_path / "verify")
    assert result.reproduced and ("pull", manifest["repository_digest"]) in clean.calls
    assert ("load",) not in clean.calls


def test_from_registry_pulls_even_when_the_tarball_is_there(tiny: LoadedDossier, tmp_path: Path) -> None:
    engine, folder = _pushed_handover(tiny, tmp_path, image_file=True)
    assert check_handover(folder).pull_from is None, "by default the file is the source"
    clean = FakeEngine(runs=passing_runs(tiny))
    clean.registry = engine.registry
    result = verify_handover(folder, clean, tmp_path / "verify", from_registry=True)
    assert result.reproduced and [c[0] for c in clean.calls].count("pull") == 1


def test_a_registry_image_that_is_not_the_manifests_is_refused_and_removed(tiny: LoadedDossier, tmp_path: Path) -> None:
    engine, folder = _pushed_handover(tiny, tmp_path, image_file=False)
    pinned = json.loads((folder / "manifest.json").read_text())["repository_digest"]
    impostor = engine.registry[pinned].__class__(
        id="sha256:" + "e" * 64, tags=(), labels={}, env={}, repo_digests=(), size=1
    )
    clean = FakeEngine(runs=passing_runs(tiny))
    clean.registry = {pinned: impostor}
    with pytest.raises(HandoverDamaged, match=r"manifest\.json names"):
        verify_handover(folder, clean, tmp_path / "verify")
    assert clean.image(pinned) is None and not clean.specs, "nothing ran and the pulled image went"


def test_a_handover_without_tarball_or_digest_is_damaged(tiny: LoadedDossier, tmp_path: Path) -> None:
    from tests.handover_craft import reseal

    _, engine = rebuilt(tiny, tmp_path / "rebuild")
    folder = tmp_path / "handover"
    write_handover(tiny, engine, tmp_path / "rebuild", folder)
    (folder / IMAGE_FILE).unlink()
    reseal(folder)
    with pytest.raises(HandoverDamaged, match="names no repository digest"):
        check_handover(folder)
    reseal(folder, manifest_update={"repository_digest": "127.0.0.1:5055/team/x:moving"})
    with pytest.raises(HandoverDamaged, match="a tag can move"):
        check_handover(folder)


def test_a_pushed_image_replays_by_reference_against_its_report(tiny: LoadedDossier, tmp_path: Path) -> None:
    engine, image_id = _engine_with_image(tiny, tmp_path)
    outcome = publish_image(engine, image_id, push_target("127.0.0.1:5055", "team/nightly", "t"))
    assert outcome.pinned is not None
    checked = check_reference(outcome.pinned, tmp_path / "rebuild" / "report.json", tiny.path)
    clean = FakeEngine(runs=passing_runs(tiny))
    clean.registry = engine.registry
    result = verify_reference(checked, clean, tmp_path / "verify")
    assert result.reproduced and result.manifest is None and result.image.reference.endswith(image_id[7:])


def test_verify_refuses_a_tag_only_reference_with_exit_2_before_any_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    report.write_text("{}")
    with pytest.raises(SystemExit) as exited:
        main(["verify", "127.0.0.1:5055/team/nightly:latest-night", "--report", str(report)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "a tag can move" in err and "Traceback" not in err


# -- the Docker adapter's push and pull, on a stub client (no Docker) ---------------------------------------------


class _RegistryApi:
    """docker-py's low-level push/pull streams, as the daemon answers them."""

    def __init__(self, chunks: list[dict[str, object]]) -> None:
        self.chunks = chunks
        self.calls: list[tuple[str, str, object]] = []

    def push(self, repository: str, *, tag: str, auth_config: object, **kwargs: object) -> object:
        self.calls.append(("push", f"{repository}:{tag}", auth_config))
        return iter(self.chunks)

    def pull(self, repository: str, *, tag: str, auth_config: object, **kwargs: object) -> object:
        self.calls.append(("pull", f"{repository}@{tag}", auth_config))
        return iter(self.chunks)


class _StubClient:
    def __init__(self, chunks: list[dict[str, object]]) -> None:
        self.api = _RegistryApi(chunks)


def test_the_adapter_hands_credentials_to_the_engine_and_returns_the_pushed_digest() -> None:
    from orchestrator.engine.docker_engine import DockerEngine

    client = _StubClient([{"status": "Pushed"}, {"aux": {"Tag": "t", "Digest": DIGEST, "Size": 529}}])
    engine = DockerEngine(client, "unix:///fake.sock")  # type: ignore[arg-type]
    assert engine.push("127.0.0.1:5055/team/x", "t", RegistryAuth("ci", SECRET)) == DIGEST
    assert client.api.calls == [("push", "127.0.0.1:5055/team/x:t", {"username": "ci", "password": SECRET})]


def test_the_adapter_turns_a_registry_error_into_one_scrubbed_line() -> None:
    from orchestrator.engine.docker_engine import DockerEngine
    from orchestrator.errors import RegistryError

    echo = f'Get "http://ci:{SECRET}@127.0.0.1:5099/v2/": dial tcp: connect: connection refused\nmore'
    engine = DockerEngine(_StubClient([{"error": echo}]), "unix:///fake.sock")  # type: ignore[arg-type]
    with pytest.raises(RegistryError) as caught:
        engine.push("127.0.0.1:5099/team/x", "t", RegistryAuth("ci", SECRET))
    assert "connection refused" in caught.value.message and SECRET not in str(caught.value)
    assert "\n" not in caught.value.message and caught.value.exit_code == 3
    with pytest.raises(RegistryError, match="names no digest"):
        PullRequest.by_digest("127.0.0.1:5099/team/x:t")
    with pytest.raises(RegistryError) as pulled:
        engine.pull(PullRequest.by_digest(f"127.0.0.1:5099/team/x@{DIGEST}", RegistryAuth("ci", SECRET)))
    assert "connection refused" in pulled.value.message and SECRET not in str(pulled.value)
