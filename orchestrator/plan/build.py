"""Planning: a loaded dossier becomes a frozen `BuildPlan`, before any container or file exists.

Pure: no Docker, no network, no clock. The renderer turns a plan into a Dockerfile; a unit test can
check a whole plan from a dossier file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from orchestrator import __version__
from orchestrator.dossier.coherence import ResolvedBaseImage
from orchestrator.dossier.load import LoadedDossier
from orchestrator.dossier.models import DeterminismSpec
from orchestrator.model.platform import LABEL_PREFIX, InstallMode, Platform

#: The unprivileged user the sample runs as inside every image.
RUNTIME_UID = 10001


@dataclass(frozen=True)
class BuildPlan:
    name: str
    identity: str
    variant: str | None
    platform: Platform
    backend_version: str | None
    base: ResolvedBaseImage
    python_version: str
    install_mode: InstallMode
    #: pip options for online installs (index URLs hold no credentials: the dossier refuses them).
    pip_index_options: tuple[str, ...]
    #: True when the build context carries a CA bundle (`orch/ca-bundle.pem`) for the online install.
    ca_bundle: bool
    builder_apt_packages: tuple[str, ...]
    runtime_apt_packages: tuple[str, ...]
    entrypoint: str
    determinism: DeterminismSpec
    uid: int
    #: Sorted (key, value) pairs; rendered last so a label change does not bust earlier layers.
    labels: tuple[tuple[str, str], ...]
    #: Labels that open every stage (`ORCH_LABELS`, engine/labels.py), so that every layer a build
    #: creates, failed builds' included, can be found by its owner. Empty for `orch render`.
    stage_labels: tuple[tuple[str, str], ...] = ()

    @property
    def builder_labels(self) -> tuple[tuple[str, str], ...]:
        """The builder stage's opening labels: it is a temporary image, marked so it can be found."""
        return tuple(sorted({f"{LABEL_PREFIX}.stage": "builder", **dict(self.stage_labels)}.items()))

    @property
    def template(self) -> str:
        return f"{self.platform}.Dockerfile.j2"


def _python_packages(version: str) -> tuple[str, ...]:
    return (f"python{version}", f"python{version}-venv")


def make_plan(loaded: LoadedDossier, *, ca_bundle: bool = False) -> BuildPlan:
    model = loaded.model
    system = model.system
    base = loaded.base_image
    python_apt = _python_packages(model.python.version) if base.python_source == "apt" else ()
    builder_packages = tuple(sorted({*python_apt, *system.build_packages}))
    # The final stage needs the interpreter (the venv links to it), not venv/ensurepip or build tools.
    runtime_packages = tuple(sorted({*python_apt[:1], *system.os_packages}))

    index_options: list[str] = []
    if model.python.install == "online":
        indexes = [index.url for index in model.python.indexes]
        if not model.python.use_pypi:
            if indexes:
                index_options += ["--index-url", indexes[0]]
                indexes = indexes[1:]
            else:
                index_options.append("--no-index")
        for url in indexes:
            index_options += ["--extra-index-url", url]
        for link in model.python.find_links:
            index_options += ["--find-links", link]

    labels: dict[str, str] = {
        f"{LABEL_PREFIX}.dossier.identity": loaded.identity,
        f"{LABEL_PREFIX}.dossier.name": model.name,
        f"{LABEL_PREFIX}.platform": system.platform,
        f"{LABEL_PREFIX}.backend.version": system.version or "none",
        f"{LABEL_PREFIX}.python.version": model.python.version,
        f"{LABEL_PREFIX}.install.mode": model.python.install,
        f"{LABEL_PREFIX}.version": __version__,
        "org.opencontainers.image.title": model.name,
        "org.opencontainers.image.base.name": base.ref,
    }
    if loaded.variant:
        labels[f"{LABEL_PREFIX}.variant"] = loaded.variant
    if model.description:
        labels["org.opencontainers.image.description"] = model.description.strip().splitlines()[0]
    if model.code.revision:
        labels["org.opencontainers.image.revision"] = model.code.revision
    if model.code.is_git_url:
        labels["org.opencontainers.image.source"] = model.code.source
    if base.digest:
        labels["org.opencontainers.image.base.digest"] = base.digest
    torch = loaded.lock.get("torch")
    if torch is not None:
        labels[f"{LABEL_PREFIX}.torch.version"] = str(torch.version)

    return BuildPlan(
        name=model.name,
        identity=loaded.identity,
        variant=loaded.variant,
        platform=system.platform,
        backend_version=system.version,
        base=base,
        python_version=model.python.version,
        install_mode=model.python.install,
        pip_index_options=tuple(index_options),
        ca_bundle=ca_bundle and model.python.install == "online",
        builder_apt_packages=builder_packages,
        runtime_apt_packages=runtime_packages,
        entrypoint=model.code.entrypoint,
        determinism=model.determinism,
        uid=RUNTIME_UID,
        labels=tuple(sorted(labels.items())),
    )


def with_labels(plan: BuildPlan, extra: Mapping[str, str]) -> BuildPlan:
    """The plan with build-time labels (created, base id, revision) merged into its one LABEL instruction.

    `orch render` shows the dossier's labels only; `orch build` adds these, still in a single LABEL step
    rather than the one step per label that the engine's build-label option would add.
    """
    return replace(plan, labels=tuple(sorted({**dict(plan.labels), **extra}.items())))


def with_stage_labels(plan: BuildPlan, extra: Mapping[str, str]) -> BuildPlan:
    """The plan with `extra` opening each stage (and so inherited by every layer the build creates)."""
    return replace(plan, stage_labels=tuple(sorted(extra.items())))
