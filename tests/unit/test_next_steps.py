"""Errors and advice that name the next step: a never-built image, a CPU variant only when one exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import EngineInfo, EngineSettings
from orchestrator.model.host import HostFacts

NO_GPU_HOST = HostFacts(kernel="6.1.0", nvidia=None, amd=None, docker=None)


class _EmptyEngine:
    """An engine that holds no image at all."""

    settings = EngineSettings()

    def image(self, ref: str) -> Any:
        return None

    def info(self) -> EngineInfo:
        return EngineInfo(
            endpoint="unix:///fake", server_version="27", api_version="1.47", os="Debian", runtimes=(), cdi_spec_dirs=()
        )


def _without_variants(folder: Path, name: str) -> Path:
    text = (folder / name).read_text()
    path = folder / f"novariant-{name}"
    path.write_text(text.split("\nvariants:", 1)[0] + "\n")
    return path


def test_probe_of_a_never_built_dossier_says_the_app_image_is_not_built(tiny_example: Path, tmp_path: Path) -> None:
    from orchestrator.stages.execute import run_probe
    from orchestrator.stages.probe import ProbeOptions

    loaded = load_dossier(tiny_example / "dossier.yaml")
    with pytest.raises(Exception) as caught:
        run_probe(loaded, _EmptyEngine(), ProbeOptions(out=tmp_path / "out"))  # type: ignore[arg-type]
    error: Any = caught.value
    assert error.code == "image-not-built", "not base-image-missing: the base is not what is missing"
    text = str(error)
    assert f"orch/tiny-embeddings:{loaded.short_identity}" in text and "not built" in text
    assert "orch build" in text and "orch rebuild" in text


def test_probe_of_a_missing_image_given_with_image_names_it(tiny_example: Path, tmp_path: Path) -> None:
    from orchestrator.stages.execute import run_probe
    from orchestrator.stages.probe import ProbeOptions

    loaded = load_dossier(tiny_example / "dossier.yaml")
    with pytest.raises(Exception) as caught:
        run_probe(loaded, _EmptyEngine(), ProbeOptions(out=tmp_path / "out", image="me/app:1"))  # type: ignore[arg-type]
    error: Any = caught.value
    assert error.code == "image-not-built" and "me/app:1" in str(error) and "--image" in str(error)


def test_doctor_names_the_declared_cpu_variant(tiny_example: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.pipeline import doctor

    monkeypatch.setattr(doctor, "collect_host_facts", lambda info: NO_GPU_HOST)
    diagnosis = doctor.diagnose(_EmptyEngine(), load_dossier(tiny_example / "dossier-cuda.yaml"))  # type: ignore[arg-type]
    assert diagnosis.can_run is False and diagnosis.reason is not None
    assert "--variant cpu" in diagnosis.reason
    assert "the image's CPU variant" not in diagnosis.reason


@pytest.mark.parametrize("name", ["dossier-cuda.yaml", "dossier-rocm.yaml"])
def test_doctor_suggests_no_variant_a_dossier_does_not_declare(
    name: str, tiny_example: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.pipeline import doctor

    monkeypatch.setattr(doctor, "collect_host_facts", lambda info: NO_GPU_HOST)
    loaded = load_dossier(_without_variants(tiny_example, name))
    diagnosis = doctor.diagnose(_EmptyEngine(), loaded)  # type: ignore[arg-type]
    assert diagnosis.reason is not None
    assert not re.search(r"use the image's CPU variant|--variant", diagnosis.reason)
    assert "declares no CPU variant" in diagnosis.reason and "variants" in diagnosis.reason


def test_the_probes_host_stage_gives_the_same_advice(tiny_example: Path) -> None:
    from orchestrator.engine import ImageInfo
    from orchestrator.stages.host_stage import host_stage

    image = ImageInfo(
        id="sha256:" + "a" * 64, tags=(), labels={}, env={"CUDA_VERSION": "12.4.1"}, repo_digests=(), size=1
    )
    loaded = load_dossier(_without_variants(tiny_example, "dossier-cuda.yaml"))
    _, verdict, _ = host_stage(loaded, NO_GPU_HOST, image, None)
    assert "declares no CPU variant" in verdict.explanation
    declared = load_dossier(tiny_example / "dossier-cuda.yaml")
    _, verdict, _ = host_stage(declared, NO_GPU_HOST, image, None)
    assert "--variant cpu" in verdict.explanation


# -- torch ↔ backend and Python ↔ base image: the working choices, from the data tables -------------------


def _torch_message(platform: str, version: str, torch: str) -> str:
    from orchestrator.dossier.coherence import check_torch
    from orchestrator.dossier.lock import parse_lock
    from orchestrator.dossier.models import PythonSpec, SystemSpec

    system = SystemSpec.model_validate({"platform": platform, "version": version})
    python = PythonSpec(version="3.11", requirements="requirements.lock")
    result = check_torch(system, python, parse_lock(f"torch=={torch}\n"))
    assert result is not None
    return result.message


def test_a_torch_without_the_cuda_build_names_pypis_cuda_and_the_series_that_have_it() -> None:
    message = _torch_message("cuda", "12.4", "2.13.0+cu124")
    assert "torch 2.13 has no cuda 12.4 build" in message
    assert "PyPI's torch 2.13.0 (no local tag) is a CUDA 13.0 build" in message
    assert 'system.version: "13.0"' in message and "torch==2.13.0" in message
    assert "torch series with a cuda 12.4 build: 2.4, 2.5, 2.6" in message


def test_pypis_wheel_for_another_cuda_does_not_advise_a_build_that_does_not_exist() -> None:
    message = _torch_message("cuda", "12.4", "2.13.0")
    assert "pin torch==2.13.0+cu124" not in message, "torch's index has no cu124 build of 2.13"
    assert 'system.version: "13.0"' in message
    assert "2.4, 2.5, 2.6" in message
    # Where the build exists, pinning it stays the advice.
    assert "pin torch==2.4.1+cu124" in _torch_message("cuda", "12.4", "2.4.1")


def test_a_torch_without_the_rocm_build_names_the_series_that_have_it() -> None:
    message = _torch_message("rocm", "6.2", "2.13.0+rocm6.2")
    assert "torch series with a rocm 6.2 build: 2.5" in message


def test_python_that_does_not_fit_the_base_image_names_the_images_that_carry_it() -> None:
    from orchestrator.dossier.coherence import check_python_fits_image, resolve_base_image
    from orchestrator.dossier.models import PythonSpec, SystemSpec

    image = resolve_base_image(SystemSpec(platform="cuda", version="13.0"))
    assert not hasattr(image, "message")
    system = SystemSpec(platform="cuda", version="13.0")
    problem = check_python_fits_image(PythonSpec(version="3.11", requirements="r.lock"), image, system)  # type: ignore[arg-type]
    assert problem is not None
    message = problem.message
    assert "Python 3.11 does not fit base image nvidia/cuda:13.0.0-runtime-ubuntu24.04, which provides 3.12" in message
    assert "set python.version to 3.12" in message
    assert "orch/debian-python:bookworm" in message, "the platform-neutral base made by `orch base` carries 3.11"
    assert "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04 (cuda 12.4)" in message
    assert "system.base_image.ref" in message
