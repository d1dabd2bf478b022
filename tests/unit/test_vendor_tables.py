"""Every vendor table in orchestrator/data/ is read through orchestrator/vendor.py and fits its pydantic model."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator import vendor
from tests.paths import REPO

DATA = REPO / "orchestrator" / "data"


def _committed() -> list[str]:
    return sorted(path.name for path in DATA.glob("*.json"))


def test_every_committed_data_file_has_a_model_and_every_model_a_file() -> None:
    assert _committed() == sorted(vendor.TABLES), "a data file without a model in vendor.TABLES, or the reverse"


@pytest.mark.parametrize("name", _committed())
def test_every_committed_data_file_fits_its_model(name: str) -> None:
    raw = json.loads((DATA / name).read_text(encoding="utf-8"))
    parsed = vendor.TABLES[name].model_validate(raw)
    # Nothing in the file is left unread: the model forbids extra fields, so the round trip keeps every key.
    assert parsed.model_dump(by_alias=True, exclude_unset=True, mode="json") == raw


def _base_images_with(**changed: Any) -> dict[str, Any]:
    raw = json.loads((DATA / "base_images.json").read_text(encoding="utf-8"))
    raw["images"][0] = {**raw["images"][0], **changed}
    return raw


@pytest.mark.parametrize(
    "changed",
    [
        {"digest": "sha256:TOO-SHORT"},
        {"python_source": "pip"},
        {"platform": "tpu"},
        {"unknown_column": 1},
    ],
)
def test_a_row_that_does_not_fit_is_refused(changed: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        vendor.BaseImagesFile.model_validate(_base_images_with(**changed))


def test_a_table_is_read_as_its_own_model_only() -> None:
    assert vendor.table("installers.json", vendor.InstallersFile).uv.wheels["x86_64"].sha256
    with pytest.raises(KeyError):
        vendor.table("installers.json", vendor.BaseImagesFile)


def test_the_data_centre_classes_come_from_the_data_file() -> None:
    classes = vendor.nvidia_gpu_classes()
    assert classes.datacenter.search("NVIDIA H100 80GB HBM3")
    assert classes.datacenter.search("Tesla V100-SXM2-16GB")
    assert not classes.datacenter.search("NVIDIA A1000X")  # whole words only: A100 is not A1000X
    assert classes.consumer.search("NVIDIA GeForce RTX 4090")
