"""`orch verify` trusts nothing it has not checked: crafted hand-over folders, no engine involved.

Each case is what someone who can change the folder (and regenerate SHA256SUMS and manifest.json —
a checksum file is not a signature) could hand over. Every one must end in one line naming the file
and exit 1 (a damaged or tampered hand-over), before any engine is contacted (the unit-test fixture
fails any Docker call), and without opening a file outside the folder.
"""

from __future__ import annotations

import builtins
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import main
from orchestrator.dossier.load import load_dossier
from orchestrator.engine import EngineSettings, ImageInfo
from orchestrator.errors import EnvironmentFailure, HandoverDamaged
from orchestrator.model.manifest import Manifest
from orchestrator.model.report import ReportImage
from orchestrator.stages.handover_folder import safe_relative
from orchestrator.stages.image_tar import inspect_image_tar, untagged_stream
from orchestrator.stages.verify import check_handover, load_checked_image
from tests.handover_craft import image_config, image_tarball, reseal, sha256_file
from tests.paths import EXAMPLES
from tests.report_sample import sample_report


@pytest.fixture
def handover(tmp_path: Path) -> Path:
    """A complete, honest hand-over folder of tiny-embeddings with a crafted (engine-free) image tarball."""
    folder = tmp_path / "handover"
    shutil.copytree(EXAMPLES / "tiny-embeddings", folder / "dossier")
    loaded = load_dossier(folder / "dossier" / "dossier.yaml")
    tag = f"orch/tiny-embeddings:{loaded.short_identity}"
    image_id = image_tarball(folder / "image.tar.gz", image_config(loaded.identity), [tag])
    report = sample_report()
    report = report.model_copy(
        update={
            "dossier": report.dossier.model_copy(update={"identity": loaded.identity}),
            "image": ReportImage(ref=tag, id=image_id),
        }
    )
    (folder / "report").mkdir()
    (folder / "report" / "report.json").write_text(report.model_dump_json(indent=2))
    (folder / "PROCEDURE.md").write_text("# Procedure\n")
    manifest = Manifest(
        orch_version="0.0.0",
        created="2026-01-01T00:00:00Z",
        dossier_name="tiny-embeddings",
        dossier_file="dossier.yaml",
        identity=loaded.identity,
        variant=None,
        platform="cpu",
        image_id=image_id,
        image_tag=tag,
        report_verdict=report.verdict,
        files=[],
    )
    (folder / "manifest.json").write_text(manifest.model_dump_json(indent=2))
    reseal(folder)
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host file next to the hand-over: nothing in the folder may lead orch to read it."""
    secret = tmp_path / "host" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("host secret\n")
    return secret


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every path opened by Python code while the test runs (os.open and io.open)."""
    seen: list[str] = []
    real_os_open, real_io_open = os.open, io.open

    def spy_os_open(path: Any, *args: Any, **kwargs: Any) -> int:
        seen.append(os.fsdecode(path) if not isinstance(path, int) else str(path))
        return real_os_open(path, *args, **kwargs)

    def spy_io_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(path, int):
            seen.append(os.fsdecode(path))
        return real_io_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy_os_open)
    monkeypatch.setattr(io, "open", spy_io_open)
    monkeypatch.setattr(builtins, "open", spy_io_open)
    yield seen


def _verify(folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(["verify", str(folder), "--out", str(folder.parent / "verify-out")])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return int(exited.value.code or 0), err


def _refused(folder: Path, capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    code, err = _verify(folder, capsys)
    assert code == 1, err
    assert "error[handover-damaged]" in err, err
    for part in expected:
        assert part in err, err
    return err


def _replace(path: Path, data: bytes) -> None:
    path.unlink()
    path.write_bytes(data)


# -- the honest folder passes every check ----------------------------------------------------------


def test_an_honest_handover_passes_every_check_without_an_engine(handover: Path) -> None:
    checked = check_handover(handover)
    assert checked.image.image_id == checked.manifest.image_id
    assert checked.image.repo_tags == (checked.manifest.image_tag,)
    assert checked.loaded.identity == checked.manifest.identity


# -- names -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["/etc/passwd", "../../x", "dossier/../../x", "a//b", "./a", "a/.", "a/", "a\\..\\b", "a\0b", "a\nb", ""],
)
def test_an_abnormal_name_is_refused(name: str) -> None:
    with pytest.raises(HandoverDamaged, match="SHA256SUMS line 3"):
        safe_relative(name, "SHA256SUMS line 3")


def test_a_normal_name_is_kept() -> None:
    assert safe_relative("dossier/app/embed.py", "x") == "dossier/app/embed.py"


@pytest.mark.parametrize("how", ["relative", "absolute"])
def test_a_sums_line_for_a_host_file_is_refused_unread_right_or_wrong_hash(
    handover: Path, outside: Path, opened: list[str], capsys: pytest.CaptureFixture[str], how: str
) -> None:
    name = "../host/secret.txt" if how == "relative" else str(outside)
    errors = []
    right = sha256_file(outside)
    opened.clear()  # the test itself read it, to know its hash
    for digest in (right, "0" * 64):
        reseal(handover, extra_sums=f"{digest}  {name}\n")
        errors.append(_refused(handover, capsys, "SHA256SUMS line", "a hand-over names only files inside its folder"))
    assert errors[0] == errors[1], "the same answer whether the hash is right or wrong: no oracle on host files"
    assert not [p for p in opened if "secret" in p], "the host file was never opened"


def test_a_symlinked_file_is_refused_even_when_listed(
    handover: Path, outside: Path, opened: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    (handover / "dossier" / "leak.txt").symlink_to(outside)
    reseal(handover)
    _refused(handover, capsys, "dossier/leak.txt is a symlink")
    assert not [p for p in opened if "secret" in p]


def test_an_unlisted_symlinked_folder_does_not_bypass_the_added_file_check(
    handover: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (handover / "dossier" / "more").symlink_to(outside.parent, target_is_directory=True)
    reseal(handover)
    _refused(handover, capsys, "dossier/more is a symlink")


def test_a_fifo_in_the_folder_is_refused(handover: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(handover / "report" / "pipe")
    _refused(handover, capsys, "report/pipe is not a regular file")


def test_a_file_listed_but_missing_and_a_file_added_are_named(
    handover: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (handover / "dossier" / "extra.txt").write_text("smuggled\n")
    _refused(handover, capsys, "dossier/extra.txt is in the folder but not in SHA256SUMS")
    (handover / "dossier" / "extra.txt").unlink()
    (handover / "PROCEDURE.md").unlink()
    _refused(handover, capsys, "PROCEDURE.md is listed in SHA256SUMS but missing")


def test_a_non_utf8_sums_file_is_one_line(handover: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sums = handover / "SHA256SUMS"
    _replace(sums, sums.read_bytes() + b"\xff\xfe  caf\xe9\n")
    _refused(handover, capsys, "SHA256SUMS is not UTF-8 text")


def test_a_duplicate_or_malformed_sums_line_is_refused(handover: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sums = handover / "SHA256SUMS"
    first = sums.read_text().splitlines()[0]
    _replace(sums, (sums.read_text() + first + "\n").encode())
    _refused(handover, capsys, "lists", "a second time")
    _replace(sums, (first.upper() + "\n").encode())
    _refused(handover, capsys, "SHA256SUMS line 1 is not")


def test_a_5000_digit_integer_in_the_manifest_is_one_line(handover: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (handover / "manifest.json").read_text().replace('"size": ', '"size": ' + "9" * 5000 + ', "x": ', 1)
    _replace(handover / "manifest.json", text.encode())
    sums = (handover / "SHA256SUMS").read_text().splitlines()
    fixed = [
        f"{sha256_file(handover / 'manifest.json')}  manifest.json" if line.endswith("  manifest.json") else line
        for line in sums
    ]
    _replace(handover / "SHA256SUMS", ("\n".join(fixed) + "\n").encode())
    _refused(handover, capsys, "manifest.json", "cannot read")


def test_a_manifest_file_list_that_disagrees_with_the_sums_is_refused(
    handover: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = json.loads((handover / "manifest.json").read_text())
    manifest["files"][0]["path"] = "../../etc/passwd"
    (handover / "manifest.json").unlink()
    (handover / "manifest.json").write_text(json.dumps(manifest))
    sums = [
        line if not line.endswith("  manifest.json") else f"{sha256_file(handover / 'manifest.json')}  manifest.json"
        for line in (handover / "SHA256SUMS").read_text().splitlines()
    ]
    _replace(handover / "SHA256SUMS", ("\n".join(sums) + "\n").encode())
    _refused(handover, capsys, "manifest.json files[0]", "a hand-over names only files inside its folder")


# -- the shipped dossier ---------------------------------------------------------------------------


def test_a_dossier_file_outside_the_folder_is_refused(
    handover: Path, tmp_path: Path, opened: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "x"
    shutil.copytree(handover / "dossier", elsewhere)
    opened.clear()  # the test itself read it, to copy it
    reseal(handover, manifest_update={"dossier_file": "../../../x/dossier.yaml"})
    _refused(handover, capsys, "manifest.json dossier_file", "is not a normal relative path")
    assert not [p for p in opened if p.startswith(str(elsewhere))], "the outside dossier was never read"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("- path: sample/sample.jsonl", "- path: /etc/passwd"),
        ("- path: sample/sample.jsonl", "- path: ../../../../../../etc/passwd"),
        ("expected: sample/ids.json", "expected: ../../report/report.json"),
        ("source: app", "source: /etc"),
    ],
)
def test_a_shipped_dossier_naming_a_host_file_is_refused_before_it_is_read(
    handover: Path, opened: list[str], capsys: pytest.CaptureFixture[str], old: str, new: str
) -> None:
    dossier = handover / "dossier" / "dossier.yaml"
    text = dossier.read_text()
    assert old in text
    _replace(dossier, text.replace(old, new).encode())
    reseal(handover)
    _refused(handover, capsys, "dossier/dossier.yaml [", "a shipped dossier may reference only files inside the folder")
    assert "/etc/passwd" not in opened and not [p for p in opened if p.startswith("/etc/") and "passwd" in p]


def test_a_shipped_dossier_whose_identity_is_not_the_manifests_is_refused(
    handover: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reseal(handover, manifest_update={"identity": "f" * 64})
    _refused(handover, capsys, "the shipped dossier's identity is")


def test_a_shipped_report_about_another_image_is_refused(handover: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = json.loads((handover / "report" / "report.json").read_text())
    report["image"]["id"] = "sha256:" + "e" * 64
    _replace(handover / "report" / "report.json", json.dumps(report).encode())
    reseal(handover)
    _refused(handover, capsys, "report/report.json is about another image")


# -- the image tarball -----------------------------------------------------------------------------


def _manifest(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "manifest.json").read_text())
    return data


def test_a_swapped_tarball_is_refused_before_loading(handover: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(handover)
    (handover / "image.tar.gz").unlink()
    image_tarball(handover / "image.tar.gz", image_config(manifest["identity"], marker="evil"), [manifest["image_tag"]])
    reseal(handover)
    _refused(handover, capsys, "image.tar.gz: it holds image sha256:", "not the manifest's")


def test_a_tarball_that_would_retag_a_host_image_is_refused(handover: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(handover)
    (handover / "image.tar.gz").unlink()
    image_tarball(
        handover / "image.tar.gz",
        image_config(manifest["identity"]),
        [manifest["image_tag"], "orch/debian-python:bookworm"],
    )
    reseal(handover)
    _refused(handover, capsys, "it would tag the image", "orch/debian-python:bookworm")


def test_a_tarball_of_another_dossier_is_refused(handover: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _manifest(handover)
    (handover / "image.tar.gz").unlink()
    image_id = image_tarball(handover / "image.tar.gz", image_config("a" * 64), [manifest["image_tag"]])
    reseal(handover, manifest_update={"image_id": image_id})
    report = json.loads((handover / "report" / "report.json").read_text())
    report["image"]["id"] = image_id
    _replace(handover / "report" / "report.json", json.dumps(report).encode())
    reseal(handover)
    _refused(handover, capsys, "another dossier identity")


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda raw: raw[: len(raw) // 2], "not a complete gzip-compressed tar"),
        (gzip.decompress, "not a complete gzip-compressed tar"),
        (lambda raw: b"not a tarball at all\n" * 100, "not a complete gzip-compressed tar"),
        (lambda raw: gzip.compress(b"\0" * 4096), "holds no manifest.json"),
    ],
    ids=["truncated", "not-gzip", "garbage", "empty-tar"],
)
def test_a_damaged_tarball_with_regenerated_checksums_is_one_line_exit_1(
    handover: Path, capsys: pytest.CaptureFixture[str], damage: Callable[[bytes], bytes], expected: str
) -> None:
    tarball = handover / "image.tar.gz"
    _replace(tarball, damage(tarball.read_bytes()))
    reseal(handover)
    _refused(handover, capsys, "image.tar.gz: ", expected)


def test_a_tarball_member_leaving_the_tar_is_refused(tmp_path: Path) -> None:
    image_id = image_tarball(tmp_path / "i.tar.gz", image_config("a" * 64), ["t:1"], extra={"../../evil": b"x"})
    with pytest.raises(HandoverDamaged, match="is not a relative path inside the tar"):
        inspect_image_tar(tmp_path / "i.tar.gz", image_id=image_id, tag="t:1", identity="a" * 64)


def test_a_huge_manifest_member_is_refused_unread(tmp_path: Path) -> None:
    config = image_config("a" * 64)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = 64 << 20
        tar.addfile(info, io.BytesIO(b" " * info.size))
    (tmp_path / "i.tar.gz").write_bytes(gzip.compress(raw.getvalue(), compresslevel=1))
    with pytest.raises(HandoverDamaged, match="more than a docker save document holds"):
        inspect_image_tar(tmp_path / "i.tar.gz", image_id="sha256:" + "0" * 64, tag="t:1", identity="a" * 64)
    assert config  # the config was never needed


def test_the_load_stream_names_no_tag_and_keeps_every_other_byte(tmp_path: Path) -> None:
    image_id = image_tarball(tmp_path / "i.tar.gz", image_config("a" * 64), ["orch/debian-python:bookworm"])
    stream = b"".join(untagged_stream(tmp_path / "i.tar.gz"))
    with (
        tarfile.open(fileobj=io.BytesIO(stream), mode="r:") as rewritten,
        tarfile.open(tmp_path / "i.tar.gz", mode="r:gz") as original,
    ):
        names = rewritten.getnames()
        assert "repositories" not in names
        manifest = json.loads(rewritten.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest[0]["RepoTags"] == [] and manifest[0]["Config"] == image_id.removeprefix("sha256:") + ".json"
        for name in names:
            if name != "manifest.json":
                kept = rewritten.extractfile(name).read()  # type: ignore[union-attr]
                assert kept == original.extractfile(name).read()  # type: ignore[union-attr]
        assert sorted(names) == sorted(n for n in original.getnames() if n != "repositories")


def _tar_with_member(dest: Path, member: tarfile.TarInfo, identity: str) -> str:
    """A docker-save-shaped tarball with one extra member before manifest.json; its image id."""
    config = image_config(identity)
    digest = hashlib.sha256(config).hexdigest()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in ((f"{digest}.json", config),):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
        manifest = json.dumps([{"Config": f"{digest}.json", "RepoTags": ["t:1"], "Layers": []}]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    dest.write_bytes(gzip.compress(raw.getvalue()))
    return "sha256:" + digest


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size
    return info


@pytest.mark.parametrize(
    ("member", "expected"),
    [
        (_member("l", tarfile.SYMTYPE, "/etc/passwd"), "links to '/etc/passwd', outside the tar"),
        (_member("a/l", tarfile.SYMTYPE, "../../etc/passwd"), "outside the tar"),
        (_member("h", tarfile.LNKTYPE, "/etc/passwd"), "outside the tar"),
        (_member("dev", tarfile.CHRTYPE), "is a device, FIFO or other special file"),
        (_member("manifest.json", size=2), "appears twice"),
    ],
    ids=["symlink-absolute", "symlink-escaping", "hardlink-absolute", "device", "duplicate"],
)
def test_a_tarball_member_that_links_out_or_repeats_is_refused(
    tmp_path: Path, member: tarfile.TarInfo, expected: str
) -> None:
    image_id = _tar_with_member(tmp_path / "i.tar.gz", member, "a" * 64)
    with pytest.raises(HandoverDamaged, match=re.escape(expected)):
        inspect_image_tar(tmp_path / "i.tar.gz", image_id=image_id, tag="t:1", identity="a" * 64)


def test_a_link_between_layers_inside_the_tar_is_kept(tmp_path: Path) -> None:
    """Legacy docker save links a shared layer to its first copy: `b/layer.tar -> ../a/layer.tar`."""
    image_id = _tar_with_member(
        tmp_path / "i.tar.gz", _member("b/layer.tar", tarfile.SYMTYPE, "../a/layer.tar"), "a" * 64
    )
    facts = inspect_image_tar(tmp_path / "i.tar.gz", image_id=image_id, tag="t:1", identity="a" * 64)
    assert facts.image_id == image_id
    stream = b"".join(untagged_stream(tmp_path / "i.tar.gz"))
    with tarfile.open(fileobj=io.BytesIO(stream)) as rewritten:
        assert rewritten.getmember("b/layer.tar").linkname == "../a/layer.tar"


# -- loading: never a tag moved --------------------------------------------------------------------


class _Engine:
    """Images by reference; `tag` fails if it would move a tag; `load` records what it was sent."""

    settings = EngineSettings()

    def __init__(self, images: dict[str, ImageInfo]) -> None:
        self.refs = dict(images)
        self.sent: list[bytes] = []

    def image(self, ref: str) -> ImageInfo | None:
        return self.refs.get(ref) or next((i for i in self.refs.values() if i.id == ref), None)

    def load(self, source: Iterable[bytes]) -> list[str]:
        self.sent.append(b"".join(source))
        with tarfile.open(fileobj=io.BytesIO(self.sent[-1])) as tar:
            manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
            config = json.loads(tar.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
        image_id = "sha256:" + manifest[0]["Config"].removesuffix(".json")
        for tag in manifest[0]["RepoTags"] or []:  # what docker load does with RepoTags: moves them
            self.refs[tag] = _info(image_id, config["config"]["Labels"])
        self.refs[image_id] = _info(image_id, config["config"]["Labels"])
        return [image_id]

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        ref = f"{repository}:{tag}"
        assert ref not in self.refs or self.refs[ref].id == image_id, f"{ref} would be moved"
        self.refs[ref] = self.refs[image_id]

    def tags_of(self, image_id: str) -> set[str]:
        return {ref for ref, info in self.refs.items() if info.id == image_id and ":" in ref and ref != image_id}


def _info(image_id: str, labels: dict[str, str] | None = None) -> ImageInfo:
    return ImageInfo(id=image_id, tags=(), labels=labels or {}, env={}, repo_digests=(), size=1)


def test_loading_sends_no_tag_then_tags_by_id_and_with_the_free_dossier_tag(handover: Path) -> None:
    checked = check_handover(handover)
    engine = _Engine({})
    loaded = load_checked_image(engine, checked)  # type: ignore[arg-type]
    image_id = checked.manifest.image_id
    assert loaded.reference == f"orch-handover:{image_id.removeprefix('sha256:')}"
    assert engine.tags_of(image_id) == {loaded.reference, checked.manifest.image_tag}
    with tarfile.open(fileobj=io.BytesIO(engine.sent[0])) as sent:
        assert json.loads(sent.extractfile("manifest.json").read())[0]["RepoTags"] == []  # type: ignore[union-attr]


def test_a_dossier_tag_naming_another_image_here_is_left_as_it_is(handover: Path) -> None:
    checked = check_handover(handover)
    other = _info("sha256:" + "c" * 64)
    engine = _Engine({checked.manifest.image_tag: other})
    loaded = load_checked_image(engine, checked)  # type: ignore[arg-type]
    assert engine.refs[checked.manifest.image_tag] is other
    assert loaded.dossier_tag is None and loaded.tag_left and "left as it is" in loaded.tag_left


def test_a_handover_naming_a_host_tag_gets_only_orchs_name(handover: Path) -> None:
    manifest = _manifest(handover)
    (handover / "image.tar.gz").unlink()
    image_tarball(handover / "image.tar.gz", image_config(manifest["identity"]), ["orch/debian-python:bookworm"])
    reseal(handover, manifest_update={"image_tag": "orch/debian-python:bookworm"})
    checked = check_handover(handover)  # the tar names what the manifest names: the checks pass
    base = _info("sha256:" + "b" * 64)
    engine = _Engine({"orch/debian-python:bookworm": base})
    load_checked_image(engine, checked)  # type: ignore[arg-type]
    assert engine.refs["orch/debian-python:bookworm"] is base, "the base image's tag was not moved"
    assert engine.tags_of(checked.manifest.image_id) == {f"orch-handover:{checked.manifest.image_id[7:]}"}


def test_orchs_handover_name_on_another_image_stops_before_loading(handover: Path) -> None:
    checked = check_handover(handover)
    reference = f"orch-handover:{checked.manifest.image_id.removeprefix('sha256:')}"
    engine = _Engine({reference: _info("sha256:" + "d" * 64)})
    with pytest.raises(EnvironmentFailure, match="on this engine is image"):
        load_checked_image(engine, checked)  # type: ignore[arg-type]
    assert engine.sent == []
