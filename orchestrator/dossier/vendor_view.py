"""Rows of the vendor tables for people: `orch tables` prints them, the same facts docs/dossier.md shows."""

from __future__ import annotations

from packaging.version import Version

from orchestrator import vendor


def _cells(values: tuple[str, ...]) -> str:
    return ", ".join(values) if values else "—"


def torch_rows() -> list[tuple[str, str, str, str, str]]:
    releases = sorted(vendor.torch_releases().values(), key=lambda release: Version(release.series))
    return [
        (r.series, _cells(r.cuda), _cells(r.rocm), f"CUDA {r.pypi_cuda}" if r.pypi_cuda else "—", r.min_python)
        for r in releases
    ]


def image_rows() -> list[tuple[str, str, str, str, str, str, str]]:
    return [
        (
            image.ref,
            image.platform or "any",
            image.backend_version or "—",
            image.os,
            image.glibc,
            _cells(image.python_versions),
            "yes" if image.default else "",
        )
        for image in vendor.base_images()
    ]


def torch_table_json() -> list[dict[str, object]]:
    releases = sorted(vendor.torch_releases().values(), key=lambda release: Version(release.series))
    return [
        {
            "series": r.series,
            "cuda": list(r.cuda),
            "rocm": list(r.rocm),
            "pypi_cuda": r.pypi_cuda,
            "min_python": r.min_python,
            "indexes": {
                **{f"cuda {v}": vendor.torch_index_url(vendor.torch_local_tag("cuda", v)) for v in r.cuda},
                **{f"rocm {v}": vendor.torch_index_url(vendor.torch_local_tag("rocm", v)) for v in r.rocm},
                "cpu": vendor.torch_index_url("cpu"),
            },
        }
        for r in releases
    ]


def images_table_json() -> list[dict[str, object]]:
    return [
        {
            "ref": image.ref,
            "platform": image.platform,
            "backend_version": image.backend_version,
            "os": image.os,
            "glibc": image.glibc,
            "python_versions": list(image.python_versions),
            "default": image.default,
        }
        for image in vendor.base_images()
    ]
