"""`orch tables` prints the vendor tables from the data files: the same rows docs/dossier.md shows."""

from __future__ import annotations

import json

from click.testing import CliRunner

from orchestrator import vendor
from orchestrator.cli.main import cli
from orchestrator.dossier.vendor_view import image_rows, torch_rows
from tests.paths import REPO


def test_tables_print_every_torch_series_and_base_image_with_their_builds() -> None:
    result = CliRunner().invoke(cli, ["tables"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert len(torch_rows()) == len(vendor.torch_releases()) and len(image_rows()) == len(vendor.base_images())
    for series, cuda, rocm, _pypi, _python in torch_rows():
        line = next(line for line in result.output.splitlines() if line.startswith(f"│ {series} "))
        assert cuda.split(",")[0] in line and rocm.split(",")[0] in line
    assert "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04" in result.output


def test_tables_json_gives_the_index_of_each_build() -> None:
    result = CliRunner().invoke(cli, ["tables", "--json", "--table", "torch"])
    document = json.loads(result.output)
    assert set(document) == {"torch"}
    row = next(row for row in document["torch"] if row["series"] == "2.6")
    assert row["cuda"] == ["11.8", "12.4", "12.6"] and row["pypi_cuda"] == "12.4"
    assert row["indexes"]["rocm 6.2.4"] == "https://download.pytorch.org/whl/rocm6.2.4"
    images = json.loads(CliRunner().invoke(cli, ["tables", "--json", "--table", "images"]).output)["base_images"]
    assert {"ref": "orch/debian-python:bookworm", "python_versions": ["3.11"]}.items() <= next(
        image for image in images if image["ref"] == "orch/debian-python:bookworm"
    ).items()


def test_the_markdown_tables_are_the_ones_docs_dossier_md_carries() -> None:
    markdown = CliRunner().invoke(cli, ["tables", "--markdown"]).output
    assert "| 2.6 | 11.8, 12.4, 12.6 | 6.1, 6.2.4 | CUDA 12.4 | 3.9 |" in markdown
    assert markdown in (REPO / "docs" / "dossier.md").read_text(encoding="utf-8")
