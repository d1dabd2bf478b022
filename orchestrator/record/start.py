"""`orch init`: a first dossier for a user with no recorded reference yet, from the vendor tables.

Pure: the choices (base image, Python, torch series and index) are made from orchestrator/data, and an
impossible combination is refused with the working ones named. The command writes the two files.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from orchestrator import vendor
from orchestrator.errors import BadInput
from orchestrator.model.platform import Platform

_PREFERRED_PYTHON = "3.11"


@dataclass(frozen=True)
class StartChoices:
    name: str
    platform: Platform
    backend_version: str | None
    python: str
    base_image: str
    base_in_table: bool
    torch_series: str
    torch_index: str | None  # None: PyPI's own torch (a CUDA build of exactly this version)


def _defaults_for(platform: Platform) -> list[str]:
    return sorted(
        {i.backend_version or "-" for i in vendor.base_images() if i.default and i.platform == platform},
        key=lambda v: Version(v) if v != "-" else Version("0"),
    )


def choose(
    name: str,
    platform: Platform,
    backend_version: str | None,
    python: str | None,
    base_image: str | None,
) -> StartChoices:
    if platform == "cpu" and backend_version:
        raise BadInput("--version is for cuda and rocm: a cpu dossier has none")
    if platform != "cpu" and not backend_version:
        raise BadInput(
            f"--platform {platform} needs --version; orch's table has base images for {platform} "
            f"{', '.join(_defaults_for(platform))} (orch tables)"
        )
    if base_image:
        row = vendor.find_base_image(base_image)
        offered = row.python_versions if row else ((python,) if python else ())
        if not offered:
            raise BadInput(f"{base_image} is not in orch's table: give --python X.Y, the Python it provides")
    else:
        default = vendor.default_base_image(platform, backend_version)
        if default is None:
            raise BadInput(
                f"orch has no default base image for {platform} {backend_version or ''}".rstrip()
                + f"; defaults exist for {platform} {', '.join(_defaults_for(platform))}. Choose one of those "
                "versions, or give --base-image REF with --python (orch tables)"
            )
        base_image, offered = default.ref, default.python_versions
        row = default
    chosen = python or (_PREFERRED_PYTHON if _PREFERRED_PYTHON in offered else offered[-1])
    if chosen not in offered:
        carriers = [
            f"{i.ref} ({i.platform or 'any'} {i.backend_version or ''})".replace(" )", ")")
            for i in vendor.base_images()
            if chosen in i.python_versions and i.platform in (platform, None)
        ]
        raise BadInput(
            f"Python {chosen} does not fit {base_image}, which provides {', '.join(offered)}; "
            + (f"base images with Python {chosen}: {', '.join(carriers)}" if carriers else "use " + offered[-1])
        )
    series, index = _torch(platform, backend_version, chosen)
    return StartChoices(name, platform, backend_version, chosen, base_image, row is not None, series, index)


def _torch(platform: Platform, version: str | None, python: str) -> tuple[str, str | None]:
    releases = sorted(vendor.torch_releases().values(), key=lambda r: Version(r.series), reverse=True)
    fits = [r for r in releases if Version(python) >= Version(r.min_python)]
    if platform == "cpu":
        return fits[0].series, vendor.torch_index_url("cpu")
    for release in fits:
        offered = release.cuda if platform == "cuda" else release.rocm
        if version in offered:
            return release.series, vendor.torch_index_url(vendor.torch_local_tag(platform, version))
        if platform == "cuda" and release.pypi_cuda == version:
            return release.series, None
    working = sorted({v for r in fits for v in (r.cuda if platform == "cuda" else r.rocm)}, key=Version)
    raise BadInput(
        f"no torch series in orch's table is built for {platform} {version} on Python {python}; "
        f"{platform} versions with builds: {', '.join(working)} (orch tables)"
    )


def dossier_text(c: StartChoices) -> str:
    backend = f'\n  version: "{c.backend_version}"' if c.backend_version else ""
    python_line = "" if c.base_in_table else f'\n    python: "{c.python}"'
    index = (
        f"  indexes:\n    # torch's own index for the {c.platform} build; the lock takes torch from it first.\n"
        f"    - url: {c.torch_index}\n"
        if c.torch_index
        else "  # PyPI's own torch is the CUDA build for this version: no extra index.\n"
    )
    return f"""\
# Written by `orch init`: a start for {c.name}, from orch's tables (orch tables). Next:
#   1. put the app in app/ (entry point below), a small identified input in sample/, and run it once
#      to write the reference outputs into reference/;
#   2. list the app's direct dependencies in requirements.in (torch is already there) and run
#      `orch lock dossier.yaml`;
#   3. replace every "TO CONFIRM" (orch validate lists them), then `orch rebuild dossier.yaml --out DIR`.
# With a reference run already done, `orch record` writes all of this from it instead (docs/record.md).
dossier: 1
name: {c.name}
description: "TO CONFIRM: what this run computes and what its outputs are used for."

code:
  source: app
  entrypoint: main.py

python:
  version: "{c.python}"
  # Computed by `orch lock` from requirements.in for this dossier's target: never written by hand.
  requirements: requirements.lock
  # The host downloads the locked, hashed wheels; the build runs with no network.
  install: wheelhouse
{index}
system:
  platform: {c.platform}{backend}
  base_image:
    ref: {c.base_image}{python_line}

expect:
  command: [python, main.py, --input, /orch/input/sample/sample.jsonl, --output, /orch/output]
  inputs:
    - path: sample/sample.jsonl
      sha256: "TO CONFIRM: sha256sum sample/sample.jsonl"
  outputs:
    - name: result
      file: result.npy
      format: npy
      finite: true
      compare:
        metric: max_abs
        max: 0.0
        reference: reference/result.npy
        justification: "TO CONFIRM: the tolerance, from measured reruns (orch record --repeat N), and why it fits the use."
"""


def requirements_text(c: StartChoices) -> str:
    where = f"from {c.torch_index}" if c.torch_index else "PyPI's own CUDA build"
    return (
        f"# The app's direct dependencies, loose; `orch lock dossier.yaml` computes requirements.lock from them.\n"
        f"# torch {c.torch_series}: the newest series built for {c.platform} {c.backend_version or ''} on "
        f"Python {c.python} ({where}).\n".replace("  on", " on")
        + f"torch=={c.torch_series}.*\n"
    )
