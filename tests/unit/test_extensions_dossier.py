"""The dossier's `build` section (compiled extensions): schema, coherence, identity, and the rendered builder."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.checks.extension import extension_check_lines
from orchestrator.checks.image import extension_checks
from orchestrator.dossier.load import dossier_identity, load_dossier
from orchestrator.errors import DossierError
from orchestrator.model.checks import Check
from orchestrator.model.inventory import Inventory, parse_inventory
from orchestrator.plan.build import default_build_network, make_plan
from orchestrator.plan.extension_check import extension_check_spec
from orchestrator.plan.specs import RunSpec
from orchestrator.render.dockerfile import render_dockerfile

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cpp-extension"
PROBES = Path(__file__).resolve().parents[2] / "probes"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    target = tmp_path / "cpp-extension"
    shutil.copytree(EXAMPLE, target)
    return target


def _edit(folder: Path, change: dict[str, object]) -> Path:
    path = folder / "dossier.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["build"] = {**doc["build"], **change}
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_example_loads_with_its_extension_and_check(folder: Path) -> None:
    loaded = load_dossier(folder / "dossier.yaml")
    assert loaded.model.build is not None
    (extension,) = loaded.model.build.extensions
    assert (extension.name, extension.language, extension.sources) == ("gate_ext", "cpp", ["csrc/gate.cpp"])
    assert loaded.model.build.keep_toolchain is False


def test_a_toolchain_change_changes_the_identity(folder: Path) -> None:
    before = load_dossier(folder / "dossier.yaml").identity
    after = load_dossier(_edit(folder, {"toolchain": {"gcc": "11"}})).identity
    assert before != after


def test_an_unset_build_section_is_left_out_of_the_identity(folder: Path) -> None:
    # build is left out of the identity while unset, as determinism.cpu is: older identities hold.
    loaded = load_dossier(folder / "dossier.yaml")
    without = loaded.model.model_copy(update={"build": None})
    dumped = without.model_dump(mode="json")
    dumped.pop("build")
    dumped["determinism"].pop("cpu")
    dumped["python"].pop("installer")
    payload = {"dossier": dumped, "files": dict(sorted(loaded.files.items())), "variant": None}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert dossier_identity(without, loaded.files, None) == hashlib.sha256(canonical.encode()).hexdigest()
    assert dossier_identity(without, loaded.files, None) != loaded.identity


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"toolchain": {"gcc": "13"}}, "build.toolchain.gcc", "choose 11 or 12"),
        ({"keep_toolchain": True}, "build", "keep_toolchain: true is not supported"),
        ({"env": {"CC": "clang"}}, "build", "must not set CC"),
        ({"cuda_archs": ["8.0"]}, "build", "no extension has CUDA sources"),
        ({"rocm_archs": ["gfx90a"]}, "build", "no extension has HIP sources"),
        ({"toolchain": {"gcc": "12", "ninja": True}}, "build.toolchain.ninja", "pin ninja in the lock"),
    ],
)
def test_incoherent_build_sections_are_refused_naming_the_field(
    folder: Path, change: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(DossierError) as caught:
        load_dossier(_edit(folder, change))
    assert caught.value.field is not None and caught.value.field.startswith(field)
    assert words in str(caught.value)


def test_a_missing_source_is_refused_with_its_field(folder: Path) -> None:
    (folder / "app" / "csrc" / "gate.cpp").unlink()
    with pytest.raises(DossierError) as caught:
        load_dossier(folder / "dossier.yaml")
    assert caught.value.field == "build.extensions[0].sources[0]"


def test_cuda_sources_need_the_cuda_platform(folder: Path) -> None:
    (folder / "app" / "csrc" / "gate.cu").write_text("// kernel\n")
    path = folder / "dossier.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["build"]["extensions"][0]["sources"] = ["csrc/gate.cu"]
    doc["build"]["toolchain"]["nvcc"] = "12.4.131"
    doc["build"]["cuda_archs"] = ["8.0", "9.0"]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(DossierError) as caught:
        load_dossier(path)
    assert "CUDA sources (.cu) need system.platform cuda" in str(caught.value)


def test_the_builder_gets_the_toolchain_after_the_venv_and_the_runtime_only_the_artefact(folder: Path) -> None:
    plan = make_plan(load_dossier(folder / "dossier.yaml"))
    text = render_dockerfile(plan)
    builder, final = text.split("# ---- final image", 1)
    # wheelhouse mode: the .deb files the host collected, installed without apt's archive (stages/debhouse.py)
    assert "apt-get update" not in builder and "apt-get install" not in builder
    assert "# g++-12 gcc-12 python3.11-dev and what they need" in builder
    toolchain = builder.index(
        "COPY toolchain-debs /tmp/orch/toolchain-debs\nRUN dpkg -i /tmp/orch/toolchain-debs/*.deb"
    )
    # the toolchain step comes after pip's install, so a toolchain change keeps the venv layers
    assert builder.index("pip install") < toolchain < builder.index("build_extensions.py /tmp/orch")
    assert 'CC="gcc-12" CXX="g++-12" MAX_JOBS="2"' in builder
    assert "gcc" not in final.split("LABEL", 1)[0].replace("gate", "")
    assert "toolchain-debs" not in final
    assert "COPY --from=builder /opt/orch/ext /opt/orch/ext" in final
    assert plan.toolchain_debs and default_build_network(plan) == "none"  # nothing left that needs a network


def test_an_online_build_installs_the_toolchain_with_apt_on_the_default_network(folder: Path) -> None:
    path = folder / "dossier.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["python"]["install"] = "online"
    path.write_text(yaml.safe_dump(doc))
    plan = make_plan(load_dossier(path))
    builder = render_dockerfile(plan).split("# ---- final image", 1)[0]
    assert "apt-get install -y --no-install-recommends g++-12 gcc-12 python3.11-dev" in builder
    assert "toolchain-debs" not in builder
    assert not plan.toolchain_debs and default_build_network(plan) == "default"  # apt needs the archive


def test_only_the_toolchain_line_changes_with_gcc(folder: Path) -> None:
    twelve = render_dockerfile(make_plan(load_dossier(folder / "dossier.yaml"))).splitlines()
    eleven = render_dockerfile(make_plan(load_dossier(_edit(folder, {"toolchain": {"gcc": "11"}})))).splitlines()
    changed = [i for i, (a, b) in enumerate(zip(twelve, eleven, strict=True)) if a != b]
    first_toolchain = next(i for i, line in enumerate(twelve) if "g++-12" in line)
    assert changed and min(i for i in changed if "identity" not in twelve[i]) == first_toolchain


def _inventory_with(artefacts: list[dict[str, object]] | None) -> Inventory:
    document: dict[str, object] = {"python": {"version": "3.11.2"}, "pip": {}, "os": {}, "backend": {}}
    if artefacts is not None:
        document["extensions"] = {"artefacts": artefacts, "toolchain": {"gcc": "gcc-12 (Debian 12.2.0-14) 12.2.0"}}
    return parse_inventory(document)


def test_the_image_stage_checks_each_extension_by_its_bytes(folder: Path) -> None:
    loaded = load_dossier(folder / "dossier.yaml")
    good = {
        "name": "gate_ext",
        "file": "gate_ext.so",
        "recorded_sha256": "a" * 64,
        "sha256": "a" * 64,
        "compilers": ["GCC: 12.2.0"],
    }
    (ok,) = extension_checks(loaded, _inventory_with([good]))
    assert ok.passed and ok.name == "extension gate_ext in the image" and ok.detail == "GCC: 12.2.0"
    (removed,) = extension_checks(loaded, _inventory_with([{**good, "sha256": None, "compilers": []}]))
    assert not removed.passed and removed.observed == "missing"
    (changed,) = extension_checks(loaded, _inventory_with([{**good, "sha256": "b" * 64}]))
    assert not changed.passed
    (absent,) = extension_checks(loaded, _inventory_with(None))
    assert not absent.passed and absent.observed == "no record in the image"


def _tiny_elf(comment: bytes) -> bytes:
    """A little-endian ELF64 with three sections (null, .shstrtab, .comment): what elf_comment walks."""
    names = b"\0.shstrtab\0.comment\0"
    body = names + comment
    shoff = 64 + len(body)
    header = bytearray(64)
    header[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 1)
    sections = bytes(64)
    sections += struct.pack("<IIQQQQ", 1, 3, 0, 0, 64, len(names)).ljust(64, b"\0")
    sections += struct.pack("<IIQQQQ", 11, 1, 0, 0, 64 + len(names), len(comment)).ljust(64, b"\0")
    return bytes(header) + body + sections


def test_the_probe_reads_the_compilers_from_the_objects_elf_comment(tmp_path: Path) -> None:
    probe = _load_probe()
    built = tmp_path / "gate_ext.so"
    built.write_bytes(_tiny_elf(b"GCC: (Debian 12.2.0-14+deb12u1) 12.2.0\0GCC: (GNU) 12.2.0\0"))
    assert probe.elf_comment(str(built)) == ["GCC: (Debian 12.2.0-14+deb12u1) 12.2.0", "GCC: (GNU) 12.2.0"]
    (tmp_path / "plain").write_bytes(b"not an elf at all")
    assert probe.elf_comment(str(tmp_path / "plain")) == []


def _load_probe() -> Any:
    spec = importlib.util.spec_from_file_location("orch_inventory_probe", PROBES / "inventory.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_extension_check_runs_in_the_device_probes_container_with_the_dossiers_checks(folder: Path) -> None:
    loaded = load_dossier(folder / "dossier.yaml")
    device = RunSpec(image="img", command=["python"], environment={"A": "1"}, labels={"io.orch.probe": "device"})
    spec = extension_check_spec(loaded, device)
    assert spec is not None and spec.image == "img" and spec.labels["io.orch.probe"] == "extension-check"
    (check,) = json.loads(spec.environment["ORCH_EXT_CHECKS"])
    assert check == {
        "name": "gate_ext",
        "function": "gate",
        "reference": "gate_reference:gate",
        "inputs": [[256, 64], [256, 64]],
        "rtol": 1e-5,
        "atol": 1e-6,
    }
    assert spec.environment["A"] == "1" and "extension_check" not in " ".join(device.command)
    without = loaded.model.model_copy(update={"build": None})
    assert extension_check_spec(replace(loaded, model=without), device) is None


def _lines(
    found: dict[str, object] | None, failure: str | None = None, compiled: list[str] | None = None
) -> list[Check]:
    build = load_dossier(EXAMPLE / "dossier.yaml").model.build
    assert build is not None
    return extension_check_lines(build, found, failure, {"gate_ext": compiled} if compiled is not None else None)


def test_the_extension_line_passes_within_the_tolerance_and_fails_beyond_it() -> None:
    ok = {"name": "gate_ext", "device": "cpu", "max_abs_diff": 2.4e-7, "ok": True, "compiled_archs": None}
    (line,) = _lines({"results": [ok]})
    assert line.passed and line.name == "extension gate_ext: gate matches gate_reference:gate"
    assert line.observed == "max |Δ| = 2.4e-07 on cpu"
    (line,) = _lines({"results": [{**ok, "max_abs_diff": 0.5, "ok": False}]})
    assert not line.passed and "0.5" in line.observed


def test_a_missing_extension_names_itself_and_the_first_error() -> None:
    missing = {"name": "gate_ext", "error": "import: ModuleNotFoundError: No module named 'gate_ext'"}
    (line,) = _lines({"results": [missing]})
    assert not line.passed
    assert line.observed == "gate_ext: import: ModuleNotFoundError: No module named 'gate_ext'"
    (line,) = _lines(None, "the probe exited 137: Killed")
    assert not line.passed and line.observed == "the probe exited 137: Killed"


def test_a_gpu_outside_the_compiled_archs_is_said_so() -> None:
    # The compiled archs are the inventory's, read from the object's .nv_fatbin (by extension name).
    failed = {"name": "gate_ext", "error": "run: RuntimeError: no kernel image is available"}
    (line,) = _lines({"device_arch": "sm_90", "results": [failed]}, compiled=["sm_80"])
    assert not line.passed and line.detail == "built for sm_80, this GPU is sm_90, no PTX"
    # PTX at or below the GPU's arch is JIT-compiled by the driver: no arch gap to report
    (line,) = _lines({"device_arch": "sm_90", "results": [failed]}, compiled=["sm_80", "compute_80"])
    assert line.detail is None
    (line,) = _lines({"device_arch": "sm_90", "results": [failed]})
    assert line.detail is None  # a CPU-only object (no fatbin): nothing to say about archs
