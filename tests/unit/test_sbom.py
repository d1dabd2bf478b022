"""sbom.cdx.json: a CycloneDX 1.6 document of the built image, valid by the library's own schema validator,
deterministic, complete (image, base, OS packages, Python distributions with hashes, torch build) and free of
secrets. Built from the recorded inventory probe's report (tests/fixtures/probe-outputs/inventory.json)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from rich.console import Console

from orchestrator.cli.summary import print_build_summary
from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.dossier.models import IndexSpec, PythonSpec
from orchestrator.engine import ImageInfo, LayerEntry
from orchestrator.engine.fake import FakeEngine, ScriptedBuild, ScriptedRun
from orchestrator.lock.output import LockedPackage, render_body
from orchestrator.model.build_record import BuildRecord, WheelRef
from orchestrator.model.inventory import parse_inventory
from orchestrator.report.sbom import SBOM_FILE, lock_sources, public_url, sbom_json
from orchestrator.stages.build import BuildOptions
from orchestrator.stages.execute import run_build
from tests.probe_outputs import inventory_output

CANARY = "c4n4ry-s3cr3t-71"
BASE_ID = "sha256:" + "b" * 64
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _code_is_a_plain_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("orchestrator.stages.code_source._work_tree", lambda folder: None)


@pytest.fixture
def tiny(tiny_example: Path) -> LoadedDossier:
    path = tiny_example / "dossier.yaml"
    text = path.read_text().replace("install: wheelhouse", "install: online")
    # The SBOM's own subject: the recorded inventory below adds packages, which no reference inventory lists.
    path.write_text(text.replace("  reference_inventory: reference/pip-freeze.txt\n", ""))
    return load_dossier(path)


def _inventory_stdout(**os_changes: Any) -> str:
    document = inventory_output()
    document["os"].update(
        architectures={name: ("all" if name == "tzdata" else "amd64") for name in document["os"]["packages"]},
        **os_changes,
    )
    return json.dumps(document)


def _engine(loaded: LoadedDossier, inventory: str | None = None, **build: Any) -> FakeEngine:
    base = ImageInfo(
        id=loaded.base_image.image_id or BASE_ID,
        tags=(loaded.base_image.from_line,),
        labels={},
        env={},
        repo_digests=(),
        size=1,
    )
    return FakeEngine(
        images=[base],
        builds=[ScriptedBuild(**build)],
        runs={"inventory": ScriptedRun(stdout=inventory or _inventory_stdout())},
    )


def _build(loaded: LoadedDossier, out: Path, engine: FakeEngine | None = None) -> tuple[BuildRecord, str]:
    record = run_build(loaded, engine or _engine(loaded), BuildOptions(out=out), clock=lambda: NOW)
    return record, (out / SBOM_FILE).read_text(encoding="utf-8")


def _components(text: str) -> dict[str, dict[str, Any]]:
    return {c["bom-ref"]: c for c in json.loads(text)["components"]}


def _props(component: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", [])}


@pytest.mark.parametrize("version", [SchemaVersion.V1_6])
def test_the_sbom_is_valid_cyclonedx_by_the_librarys_own_schema_validator(
    tiny: LoadedDossier, tmp_path: Path, version: SchemaVersion
) -> None:
    _, text = _build(tiny, tmp_path)
    assert json.loads(text)["specVersion"] == "1.6"
    error = JsonStrictValidator(version).validate_str(text)
    assert error is None, f"sbom.cdx.json does not validate: {error}"


def test_the_validator_does_reject_a_broken_document(tiny: LoadedDossier, tmp_path: Path) -> None:
    """The schema check above can fail: the same document with a component missing its name does not validate."""
    _, text = _build(tiny, tmp_path)
    document = json.loads(text)
    del document["components"][0]["name"]
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(document)) is not None


def test_two_builds_of_the_same_image_write_the_same_bytes(tiny: LoadedDossier, tmp_path: Path) -> None:
    first, a = _build(tiny, tmp_path / "a")
    second, b = _build(tiny, tmp_path / "b")
    assert first.image is not None and second.image is not None and first.image.id == second.image.id
    assert a == b, "serial number and timestamp come from the image, not from the moment or a random source"
    document = json.loads(a)
    assert document["serialNumber"].startswith("urn:uuid:")
    assert document["metadata"]["timestamp"].startswith(first.image.labels["org.opencontainers.image.created"][:19])


def test_the_image_is_the_root_and_the_base_a_container_it_depends_on(tiny: LoadedDossier, tmp_path: Path) -> None:
    record, text = _build(tiny, tmp_path)
    assert record.image is not None
    document = json.loads(text)
    root = document["metadata"]["component"]
    assert root["type"] == "container" and root["version"] == record.image.id
    assert root["purl"].startswith(f"pkg:oci/tiny-embeddings@{record.image.id}?repository_url=orch&tag=")
    assert _props(root)["orch:dossier.identity"] == tiny.identity
    base = _components(text)["base-image"]
    assert base["type"] == "container" and base["purl"].startswith("pkg:oci/debian-python@")
    assert {"alg": "SHA-256", "content": record.base_image.id.removeprefix("sha256:")} in base["hashes"]
    [dependencies] = [d for d in document["dependencies"] if d["ref"] == "image"]
    assert "base-image" in dependencies["dependsOn"] and "pkg:pypi/torch@2.13.0%2Bcpu" in dependencies["dependsOn"]


def test_os_packages_carry_distro_and_architecture(tiny: LoadedDossier, tmp_path: Path) -> None:
    _, text = _build(tiny, tmp_path)
    components = _components(text)
    assert components["os:debian"]["type"] == "operating-system" and components["os:debian"]["version"] == "12"
    apt = next(c for c in components.values() if c["name"] == "apt")
    assert apt["purl"] == "pkg:deb/debian/apt@2.6.1?arch=amd64&distro=debian-12"
    tzdata = next(c for c in components.values() if c["name"] == "tzdata")
    assert "arch=all" in tzdata["purl"]


def test_python_distributions_carry_the_locks_hash_and_the_torch_build(tiny: LoadedDossier, tmp_path: Path) -> None:
    _, text = _build(tiny, tmp_path)
    torch = _components(text)["pkg:pypi/torch@2.13.0%2Bcpu"]
    pinned = tiny.lock.get("torch")
    assert pinned is not None and len(pinned.hashes) == 1
    assert torch["hashes"] == [{"alg": "SHA-256", "content": pinned.hashes[0]}]
    assert _props(torch)["orch:hash.source"] == "the lock's hash for this pin"
    assert torch["purl"] == "pkg:pypi/torch@2.13.0%2Bcpu", "PyPI plus the PyTorch index: no single index to name"
    document = json.loads(text)
    assert {"name": "orch:torch.version", "value": "2.13.0+cpu"} in document["metadata"]["properties"]


def test_a_wheelhouse_builds_installed_wheel_hash_wins_and_a_single_index_is_named(
    tiny: LoadedDossier, tmp_path: Path
) -> None:
    record, _ = _build(tiny, tmp_path)
    wheel = WheelRef(file="torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", sha256="f" * 64)
    record = record.model_copy(update={"context": record.context.model_copy(update={"wheels": [wheel]})})
    python = PythonSpec(
        version="3.11",
        requirements="requirements-cpu.lock",
        indexes=[IndexSpec(url="https://download.pytorch.org/whl/cpu")],
        use_pypi=False,
    )
    torch = _components(sbom_json(record, tiny.lock, python))["pkg:pypi/torch@2.13.0%2Bcpu"]
    assert torch["hashes"] == [{"alg": "SHA-256", "content": "f" * 64}]
    assert _props(torch)["orch:hash.source"] == "wheel the build installed"
    assert "repository_url=https://download.pytorch.org/whl/cpu" in torch["purl"]


def test_no_secret_reaches_the_sbom(tiny: LoadedDossier, tmp_path: Path) -> None:
    """Credentials in index URLs (user-info, query tokens), a direct URL, the image's environment, build args."""
    document = inventory_output()
    document["pip"]["freeze"].append(f"private-pkg @ https://bot:{CANARY}@git.example/p.whl?token={CANARY}")
    document["pip"]["inspect"]["installed"].append(
        {
            "name": "private-pkg",
            "version": "1.0",
            "requires_dist": [],
            "installer": "pip",
            "direct_url": {"url": f"https://bot:{CANARY}@git.example/p.whl?token={CANARY}"},
            "requested": True,
        }
    )
    # The image's own CUDA_* environment is recorded in build.json (it is in the image's config anyway), never
    # in the SBOM.
    document["backend"]["env"] = {"CUDA_SECRET": "env-" + CANARY}
    layers = [_history(f"|1 PIP_INDEX_URL=https://u:{CANARY}@idx /bin/sh -c pip install x")]
    engine = _engine(tiny, json.dumps(document), layers=layers)
    record, text = _build(tiny, tmp_path, engine)
    # An index with credentials the dossier would refuse, as a hand-made model could still carry it.
    python = PythonSpec.model_construct(
        **{
            **tiny.model.python.model_dump(),
            "indexes": [IndexSpec.model_construct(url=f"https://u:{CANARY}@idx/simple?key={CANARY}", access=None)],
        }
    )
    for name, written in (
        ("sbom.cdx.json", text),
        ("an SBOM from a URL with credentials", sbom_json(record, tiny.lock, python)),
    ):
        assert CANARY not in written, f"the canary leaked into {name}"
    assert "https://git.example/p.whl" in text, "the direct URL is kept, without its user-info and query"
    build_json = (tmp_path / "build.json").read_text().replace("env-" + CANARY, "")
    assert CANARY not in build_json, "build-arg values and direct URLs' credentials stay out of build.json"


def _history(created_by: str) -> LayerEntry:
    return LayerEntry(created_by=created_by, size=10)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:tok@idx.example/simple?token=x#frag", "https://idx.example/simple"),
        ("https://idx.example:8443/simple/", "https://idx.example:8443/simple/"),
        ("not a url", "not a url"),
    ],
)
def test_public_url_drops_user_info_query_and_fragment(url: str, shown: str) -> None:
    assert public_url(url) == shown


def test_a_failed_build_leaves_no_sbom_behind(tiny: LoadedDossier, tmp_path: Path) -> None:
    _build(tiny, tmp_path)
    failing = _engine(tiny, log="Step 1/1 : RUN x\n", error="boom")
    record = run_build(tiny, failing, BuildOptions(out=tmp_path))
    assert record.status == "failed"
    assert not (tmp_path / SBOM_FILE).exists(), "an SBOM of an earlier image must not sit beside a failed build.json"


def test_older_inventories_without_architectures_still_make_purls(tiny: LoadedDossier, tmp_path: Path) -> None:
    document = inventory_output()
    inventory = parse_inventory(document)
    assert inventory.os_package_architectures == {}
    _, text = _build(tiny, tmp_path, _engine(tiny, json.dumps(document)))
    apt = next(c for c in _components(text).values() if c["name"] == "apt")
    assert apt["purl"] == "pkg:deb/debian/apt@2.6.1?distro=debian-12"


def test_malformed_architectures_from_the_image_are_dropped() -> None:
    document = inventory_output()
    document["os"]["architectures"] = {"apt": "amd64", "evil": "amd64&x=1", "../x": "amd64", "bash": 7}
    assert parse_inventory(document).os_package_architectures == {"apt": "amd64"}


def test_orch_build_names_the_sbom_it_wrote(tiny: LoadedDossier, tmp_path: Path) -> None:
    record, _ = _build(tiny, tmp_path)
    console = Console(record=True, width=200)
    print_build_summary(console, record, tmp_path)
    assert f"sbom    {tmp_path / SBOM_FILE}" in console.export_text()


def test_the_index_orch_lock_noted_for_a_package_is_its_repository_url(tiny: LoadedDossier, tmp_path: Path) -> None:
    """A lock written by `orch lock` notes each package's index (`# from URL`, credentials already redacted)."""
    record, _ = _build(tiny, tmp_path)
    body = render_body(
        [
            LockedPackage("torch==2.13.0+cpu", hashes=["a" * 64], source="https://u:tok@download.pytorch.org/whl/cpu"),
            LockedPackage("numpy==2.4.6", hashes=["b" * 64], source="https://pypi.org/simple", wheel="numpy-2.4.6.whl"),
        ],
        {},
    )
    assert lock_sources(body) == {"torch": "https://download.pytorch.org/whl/cpu", "numpy": "https://pypi.org/simple"}
    components = _components(sbom_json(record, tiny.lock, tiny.model.python, body))
    torch = components["pkg:pypi/torch@2.13.0%2Bcpu"]
    assert torch["purl"] == "pkg:pypi/torch@2.13.0%2Bcpu?repository_url=https://download.pytorch.org/whl/cpu"
    assert _props(torch)["orch:index"] == "https://download.pytorch.org/whl/cpu"
    numpy = components["pkg:pypi/numpy@2.4.6"]
    assert numpy["purl"] == "pkg:pypi/numpy@2.4.6", "PyPI is the purl type's default repository: not named"
    assert lock_sources("numpy==2.4.6\n# from https://elsewhere/simple\n") == {}, "only a note under an entry counts"


@pytest.mark.parametrize(
    ("ref", "purl"),
    [
        ("orch/debian-python:bookworm", "pkg:oci/debian-python@sha256:{d}?repository_url=orch&tag=bookworm"),
        (
            "nvcr.io/nvidia/cuda:12.4.1-runtime@sha256:{o}",
            "pkg:oci/cuda@sha256:{d}?repository_url=nvcr.io/nvidia&tag=12.4.1-runtime",
        ),
        ("localhost:5000/base", "pkg:oci/base@sha256:{d}?repository_url=localhost:5000"),
    ],
)
def test_a_base_image_reference_becomes_an_oci_purl(tiny: LoadedDossier, tmp_path: Path, ref: str, purl: str) -> None:
    record, _ = _build(tiny, tmp_path)
    digest, other = "d" * 64, "0" * 64
    base = record.base_image.model_copy(update={"ref": ref.format(o=other), "digest": f"sha256:{digest}"})
    text = sbom_json(record.model_copy(update={"base_image": base}), tiny.lock, tiny.model.python)
    assert _components(text)["base-image"]["purl"] == purl.format(d=digest)
