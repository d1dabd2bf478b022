"""The debhouse (stages/debhouse.py): the toolchain's .deb files collected on the host from the base's own
archive, read from an untrusted tar, cached by (base id, packages), and copied into the context."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from orchestrator.engine.fake import FakeEngine, ScriptedRun
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, BadInput, EnvironmentFailure
from orchestrator.stages.debhouse import (
    ARCHIVES,
    MANIFEST,
    STEP,
    cache_key,
    collect_command,
    collect_debs,
    collect_error,
    extract_debs,
    parse_deb_name,
)

BASE = "sha256:" + "b" * 64
PACKAGES = ("gcc-12", "g++-12", "python3.11-dev")
GXX = "g++-12_12.2.0-14+deb12u1_amd64.deb"
EPOCH = "libfoo1_1%3a2.0-3_amd64.deb"


def _tar(entries: list[tuple[str, bytes | None, bytes]]) -> bytes:
    """(name, data or None for a folder, kind) → the engine's tar of `ARCHIVES`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data, kind in entries:
            info = tarfile.TarInfo(name)
            if kind == tarfile.DIRTYPE:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == tarfile.SYMTYPE:
                info.type = tarfile.SYMTYPE
                info.linkname = "/etc/passwd"
                tar.addfile(info)
            else:
                assert data is not None
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _apt_folder(files: dict[str, bytes]) -> bytes:
    """What `docker cp` of apt's archives folder gives: the folder, its `lock`, `partial/`, the .deb files."""
    entries: list[tuple[str, bytes | None, bytes]] = [
        ("orch-debs", None, tarfile.DIRTYPE),
        ("orch-debs/lock", b"", tarfile.REGTYPE),
        ("orch-debs/partial", None, tarfile.DIRTYPE),
        ("orch-debs/partial/half.deb", b"x", tarfile.REGTYPE),
    ]
    entries += [(f"orch-debs/{name}", data, tarfile.REGTYPE) for name, data in files.items()]
    return _tar(entries)


def _engine(archive: bytes, **run: object) -> FakeEngine:
    return FakeEngine(runs={"toolchain-debs": ScriptedRun(archives={ARCHIVES: archive}, **run)})  # type: ignore[arg-type]


def test_deb_file_names_give_package_version_and_architecture() -> None:
    assert parse_deb_name(GXX) == ("g++-12", "12.2.0-14+deb12u1", "amd64")
    assert parse_deb_name(EPOCH) == ("libfoo1", "1:2.0-3", "amd64")  # apt writes the epoch's colon %3a
    for bad in ("g++-12_12.2.0_amd64.tar", "g++-12_amd64.deb", "a_b_c_d.deb", "_1_amd64.deb"):
        with pytest.raises(ValueError):
            parse_deb_name(bad)


def test_the_cache_key_follows_the_base_and_the_package_set_not_its_order() -> None:
    assert cache_key(BASE, PACKAGES) == cache_key(BASE, tuple(reversed(PACKAGES)))
    assert cache_key(BASE, PACKAGES) != cache_key("sha256:" + "c" * 64, PACKAGES)
    assert cache_key(BASE, PACKAGES) != cache_key(BASE, ("gcc-11", "g++-11", "python3.11-dev"))


def test_the_container_only_downloads_into_its_own_folder() -> None:
    (shell, flag, script) = collect_command(PACKAGES)
    assert (shell, flag) == ("sh", "-c")
    assert (
        f"-o Dir::Cache::archives={ARCHIVES}" in script
        and "install --download-only -y --no-install-recommends" in script
    )
    assert script.endswith("g++-12 gcc-12 python3.11-dev") and "dpkg" not in script


def test_the_archive_yields_only_its_deb_files(tmp_path: Path) -> None:
    archive = _apt_folder({GXX: b"gxx", EPOCH: b"foo"})
    assert extract_debs(io.BytesIO(archive), tmp_path) == sorted([GXX, EPOCH])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([GXX, EPOCH])  # no lock, no partial/
    assert (tmp_path / GXX).read_bytes() == b"gxx"


@pytest.mark.parametrize(
    ("entries", "words"),
    [
        ([("orch-debs/evil.deb", None, tarfile.SYMTYPE)], "is not a regular file"),
        ([("orch-debs/../../etc/x.deb", b"x", tarfile.REGTYPE)], "a path outside its folder"),
        ([("/etc/x.deb", b"x", tarfile.REGTYPE)], "a path outside its folder"),
        ([("orch-debs/run.sh", b"x", tarfile.REGTYPE)], "is not a Debian package file name"),
        ([("orch-debs/sub/x_1_amd64.deb", b"x", tarfile.REGTYPE)], "is not a Debian package file name"),
        ([("orch-debs/x_1_amd64.deb", b"x" * 64, tarfile.REGTYPE)], "exceed 32 bytes"),
    ],
)
def test_an_archive_that_is_not_a_plain_folder_of_debs_is_refused(
    tmp_path: Path, entries: list[tuple[str, bytes | None, bytes]], words: str
) -> None:
    with pytest.raises(EnvironmentFailure, match=words) as raised:
        extract_debs(io.BytesIO(_tar(entries)), tmp_path, max_bytes=32)
    assert str(raised.value).startswith(STEP)
    assert not any(tmp_path.iterdir()) or words == "exceed 32 bytes"


def test_a_package_the_archive_lacks_is_bad_input_naming_it() -> None:
    output = "Reading package lists...\nE: Unable to locate package g++-99\n"
    error = collect_error(100, output, ("g++-99", "gcc-99"))
    assert isinstance(error, BadInput) and error.exit_code == EXIT_BAD_INPUT
    assert str(error).startswith(STEP) and "no package g++-99" in str(error)
    held = collect_error(100, "E: Package 'gcc-12' has no installation candidate\n", PACKAGES)
    assert isinstance(held, BadInput) and "no package gcc-12" in str(held)
    # an unreachable archive is the environment's fault, said with apt's own words
    down = collect_error(100, "E: Failed to fetch http://deb.debian.org/x  Could not resolve host", PACKAGES)
    assert isinstance(down, EnvironmentFailure) and down.exit_code == EXIT_ENVIRONMENT
    assert "Could not resolve host" in str(down)


def test_collection_caches_by_base_and_packages_and_a_hit_starts_no_container(tmp_path: Path) -> None:
    engine = _engine(_apt_folder({GXX: b"gxx", EPOCH: b"foo"}))
    debs = collect_debs(engine, BASE, PACKAGES, tmp_path / "ctx1", cache=tmp_path / "cache")
    assert [(d.package, d.version) for d in debs] == [("g++-12", "12.2.0-14+deb12u1"), ("libfoo1", "1:2.0-3")]
    assert debs[0].sha256 == hashlib.sha256(b"gxx").hexdigest() and debs[0].size == 3
    (spec,) = engine.specs
    assert spec.image == BASE and spec.network and spec.user == "0" and not spec.mounts
    entry = tmp_path / "cache" / "debs" / cache_key(BASE, PACKAGES)
    manifest = json.loads((entry / MANIFEST).read_text())
    assert manifest["base_id"] == BASE and manifest["packages"] == sorted(PACKAGES)
    assert [item["file"] for item in manifest["debs"]] == [GXX, EPOCH]
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # no staging folder left
    again = collect_debs(engine, BASE, PACKAGES, tmp_path / "ctx2", cache=tmp_path / "cache")
    assert again == debs and len(engine.specs) == 1
    assert (tmp_path / "ctx2" / GXX).read_bytes() == b"gxx"


def test_a_corrupted_cache_entry_is_refused_and_removed(tmp_path: Path) -> None:
    engine = _engine(_apt_folder({GXX: b"gxx"}))
    collect_debs(engine, BASE, PACKAGES, tmp_path / "ctx1", cache=tmp_path / "cache")
    entry = tmp_path / "cache" / "debs" / cache_key(BASE, PACKAGES)
    (entry / GXX).write_bytes(b"GXX")  # same size, other bytes
    with pytest.raises(EnvironmentFailure, match="no longer has its recorded sha256"):
        collect_debs(engine, BASE, PACKAGES, tmp_path / "ctx2", cache=tmp_path / "cache")
    assert not entry.exists()


def test_a_failed_collection_caches_nothing(tmp_path: Path) -> None:
    engine = _engine(b"", exit_code=100, stderr="E: Unable to locate package gcc-12\n")
    with pytest.raises(BadInput, match="no package gcc-12"):
        collect_debs(engine, BASE, PACKAGES, tmp_path / "ctx", cache=tmp_path / "cache")
    assert list((tmp_path / "cache" / "debs").iterdir()) == []
    empty = _engine(_apt_folder({}))
    with pytest.raises(EnvironmentFailure, match="apt downloaded no package"):
        collect_debs(empty, BASE, PACKAGES, tmp_path / "ctx", cache=tmp_path / "cache")
