from __future__ import annotations

import pytest

from orchestrator.dossier.coherence import (
    Incoherence,
    ResolvedBaseImage,
    check_python_fits_image,
    check_torch,
    resolve_base_image,
)
from orchestrator.dossier.lock import parse_lock
from orchestrator.dossier.models import PythonSpec, SystemSpec


def _python(version: str = "3.11") -> PythonSpec:
    return PythonSpec(version=version, requirements="requirements.lock")


@pytest.mark.parametrize(
    ("platform", "version", "torch", "problem"),
    [
        ("cpu", None, "2.13.0+cpu", None),
        ("cuda", "12.4", "2.6.0+cu124", None),
        ("cuda", "12.6", "2.6.0+cu126", None),
        ("rocm", "6.2", "2.5.1+rocm6.2", None),
        ("rocm", "6.2.4", "2.6.0+rocm6.2.4", None),
        ("cuda", "13.0", "2.14.1", None),  # PyPI's own wheel is the CUDA 13.0 build
        ("cuda", "12.4", "2.14.1", "PyPI's torch 2.14.1 is built for CUDA 13.0"),
        ("cpu", None, "2.13.0", "is not a CPU build"),
        ("cuda", "12.1", "2.6.0+cu121", "cuda versions for torch 2.6: 11.8, 12.4, 12.6"),
        ("rocm", "6.2", "2.6.0+rocm6.2", "rocm versions for torch 2.6: 6.1, 6.2.4"),
        ("rocm", "6.2", "2.6.0+cu124", "is a cu124 build"),
        ("cuda", "12.4", "3.0.0+cu124", "known series"),
    ],
)
def test_torch_against_platform(platform: str, version: str | None, torch: str, problem: str | None) -> None:
    system = SystemSpec.model_validate({"platform": platform, "version": version})
    result = check_torch(system, _python(), parse_lock(f"torch=={torch}\n"))
    if problem is None:
        assert result is None
    else:
        assert isinstance(result, Incoherence) and problem in result.message, result


def test_a_lock_without_torch_has_nothing_to_check() -> None:
    system = SystemSpec(platform="cpu")
    assert check_torch(system, _python(), parse_lock("numpy==2.0.0\n")) is None


def test_torch_needs_a_recent_enough_python() -> None:
    system = SystemSpec(platform="cpu")
    result = check_torch(system, _python("3.9"), parse_lock("torch==2.10.0+cpu\n"))
    assert isinstance(result, Incoherence) and "needs Python ≥ 3.10" in result.message


def test_default_base_images_come_from_the_table() -> None:
    image = resolve_base_image(SystemSpec(platform="cuda", version="12.4"))
    assert isinstance(image, ResolvedBaseImage)
    assert image.ref == "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"
    assert image.python_source == "apt"
    assert check_python_fits_image(_python("3.11"), image) is None
    bad = check_python_fits_image(_python("3.12"), image)
    assert bad is not None and "provides 3.10, 3.11" in bad.message


def test_no_default_lists_the_versions_that_have_one() -> None:
    result = resolve_base_image(SystemSpec(platform="cuda", version="12.5"))
    assert isinstance(result, Incoherence)
    assert "cuda 12.4" in result.message and "cuda 13.0" in result.message


def test_a_digest_in_the_dossier_pins_the_from_line() -> None:
    digest = "sha256:" + "c" * 64
    system = SystemSpec.model_validate(
        {
            "platform": "cuda",
            "version": "12.4",
            "base_image": {"ref": "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04", "digest": digest},
        }
    )
    image = resolve_base_image(system)
    assert isinstance(image, ResolvedBaseImage)
    assert image.from_line == f"nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04@{digest}"


def test_a_platform_image_refuses_another_platform() -> None:
    system = SystemSpec.model_validate(
        {"platform": "rocm", "version": "6.2", "base_image": {"ref": "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"}}
    )
    result = resolve_base_image(system)
    assert isinstance(result, Incoherence) and "is a cuda image" in result.message


def test_an_unknown_image_with_its_python_stated_is_accepted() -> None:
    system = SystemSpec.model_validate(
        {"platform": "cpu", "base_image": {"ref": "registry.local/team/py:3.11", "python": "3.11", "glibc": "2.36"}}
    )
    image = resolve_base_image(system)
    assert isinstance(image, ResolvedBaseImage)
    assert image.python_versions == ("3.11",) and image.glibc == "2.36" and not image.from_table
