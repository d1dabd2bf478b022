"""Working choices, from the vendor tables, for an error about a combination that cannot be locked."""

from __future__ import annotations

from packaging.version import Version

from orchestrator import vendor
from orchestrator.lock.target import LockTarget


def torch_choices(target: LockTarget) -> str:
    """Which torch builds exist for the target's platform and Python (orchestrator/data/torch_platforms.json)."""
    releases = sorted(vendor.torch_releases().values(), key=lambda release: Version(release.series))
    fits_python = [r for r in releases if Version(target.python) >= Version(r.min_python)]
    if target.platform == "cpu":
        series = [r.series for r in fits_python]
        where = f"pinned torch==X.Y.Z+cpu from {vendor.torch_index_url('cpu')}"
    elif target.platform == "cuda":
        version = target.backend_version or ""
        series = [r.series for r in fits_python if version in r.cuda]
        pypi = [r.series for r in fits_python if r.pypi_cuda == version]
        where = f"pinned torch==X.Y.Z+{target.torch_tag} from {vendor.torch_index_url(target.torch_tag)}"
        if pypi:
            where += f"; PyPI's own torch is a CUDA {version} build for {', '.join(pypi)}"
    else:
        version = target.backend_version or ""
        series = [r.series for r in fits_python if version in r.rocm]
        where = f"pinned torch==X.Y.Z+{target.torch_tag} from {vendor.torch_index_url(target.torch_tag)}"
    backend = target.platform if target.backend_version is None else f"{target.platform} {target.backend_version}"
    if not series:
        other = _other_versions(target)
        return (
            f"orch's table has no torch build for {backend} on Python {target.python}"
            + (f"; {target.platform} versions with builds: {other}" if other else "")
            + " (orch tables)"
        )
    return f"torch series built for {backend} on Python {target.python}: {', '.join(series)}, {where} (orch tables)"


def _other_versions(target: LockTarget) -> str:
    seen: list[str] = []
    for release in sorted(vendor.torch_releases().values(), key=lambda r: Version(r.series)):
        offered = release.cuda if target.platform == "cuda" else release.rocm if target.platform == "rocm" else ()
        for version in offered:
            if version not in seen:
                seen.append(version)
    return ", ".join(sorted(seen, key=Version))
