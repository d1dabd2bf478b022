"""Planning: a loaded dossier becomes a frozen `BuildPlan`, before any container or file exists.

Pure: no Docker, no network, no clock. The renderer turns a plan into a Dockerfile; a unit test can
check a whole plan from a dossier file.

Why one module of 400+ lines: `BuildPlan`, the rules that choose its one-stage installs (feed, mounted wheels)
and `BuildSteps` read each other's fields; the builder choice and BuildKit's context server are plan/builder.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator import __version__
from orchestrator.dossier.coherence import ResolvedBaseImage
from orchestrator.dossier.load import LoadedDossier
from orchestrator.dossier.models import DeterminismSpec
from orchestrator.model.build_record import CodeRef
from orchestrator.model.platform import Installer, InstallMode, Platform
from orchestrator.plan import specs
from orchestrator.plan.builder import context_server_spec
from orchestrator.plan.run import inventory_spec
from orchestrator.plan.specs import Builder, BuildNetwork, Network, RunSpec, ServiceSpec, served_command
from orchestrator.plan.wheels_image import WheelsImageSpec, wheels_image_spec
from orchestrator.redact import redact
from orchestrator.vendor import InstallerWheel, uv_wheel

#: The unprivileged user the sample runs as inside every image (defined with the specs that use it).
RUNTIME_UID = specs.RUNTIME_UID
LABEL_PREFIX = specs.LABEL_PREFIX

#: Where the builder stage puts the extensions' sources, its scratch, and the one folder the final stage copies.
EXT_SOURCES = "/tmp/orch/ext-src"
EXT_OUT = "/opt/orch/ext"
#: Builder-only: where NVIDIA's toolchain wheels are installed (pip --target) and the CUDA_HOME laid out from them.
CUDA_WHEELS = "/opt/orch/cuda-wheels"
CUDA_HOME_FROM_WHEELS = "/opt/orch/cuda"
#: NVIDIA's devel images keep the toolkit here.
CUDA_HOME_DEVEL = "/usr/local/cuda"


@dataclass(frozen=True)
class ExtensionsPlan:
    """The builder's toolchain step and extension build, from the dossier's `build` section."""

    #: Debian/Ubuntu packages of the toolchain (gcc-N, g++-N, the interpreter's headers), one apt step.
    toolchain_apt_packages: tuple[str, ...]
    #: Source files and include folders, relative to the code folder (copied one by one, paths kept).
    sources: tuple[str, ...]
    #: The build step's environment: CC/CXX, the arch lists, the dossier's build.env; sorted pairs.
    env: tuple[tuple[str, str], ...]
    #: orch/extensions.json: what probes/build_extensions.py builds.
    spec_json: str
    names: tuple[str, ...]
    #: True when nvcc comes from NVIDIA's wheels (build.toolchain.requirements), installed in the builder only.
    cuda_toolchain_wheels: bool = False


def _extensions_plan(loaded: LoadedDossier, python_version: str) -> ExtensionsPlan | None:
    build = loaded.model.build
    if build is None:
        return None
    gcc = build.toolchain.gcc
    env = {"CC": f"gcc-{gcc}", "CXX": f"g++-{gcc}", **build.env}
    if build.cuda_archs:
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(build.cuda_archs)
    wheels = build.language == "cuda" and build.toolchain.requirements is not None
    cuda: dict[str, str | None] | None = None
    if build.language == "cuda":
        # torch.utils.cpp_extension finds nvcc, the headers and libcudart through CUDA_HOME, and hands nvcc
        # the dossier's compiler as its host compiler (-ccbin $CC).
        cuda_home = CUDA_HOME_FROM_WHEELS if wheels else CUDA_HOME_DEVEL
        env["CUDA_HOME"] = cuda_home
        cuda = {"home": cuda_home, "wheels": CUDA_WHEELS if wheels else None, "nvcc": build.toolchain.nvcc}
    files = sorted({source for ext in build.extensions for source in [*ext.sources, *ext.include_dirs]})
    spec = {
        "language": build.language,
        "ninja": build.toolchain.ninja,
        "cuda_archs": list(build.cuda_archs),
        "env": dict(sorted(build.env.items())),
        "cuda": cuda,
        "extensions": [
            {
                "name": ext.name,
                "language": ext.language,
                "sources": list(ext.sources),
                "include_dirs": list(ext.include_dirs),
                "cxx_flags": list(ext.cxx_flags),
                "nvcc_flags": list(ext.nvcc_flags),
            }
            for ext in build.extensions
        ],
    }
    return ExtensionsPlan(
        toolchain_apt_packages=(f"g++-{gcc}", f"gcc-{gcc}", f"python{python_version}-dev"),
        sources=tuple(files),
        env=tuple(sorted(env.items())),
        spec_json=json.dumps(spec, indent=2, sort_keys=True) + "\n",
        names=tuple(ext.name for ext in build.extensions),
        cuda_toolchain_wheels=wheels,
    )


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
    #: What installs the lock in the builder: uv (wheelhouse only, unpacked from `uv`'s wheel) or the venv's pip.
    installer: Installer
    #: uv's pinned wheel, collected into the wheelhouse with the locked ones; None when pip installs.
    uv: InstallerWheel | None
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
    #: Compiled extensions (the dossier's `build`): toolchain in the builder only, the artefact copied.
    extensions: ExtensionsPlan | None = None
    #: sha256 of the lock file the context carries (`requirements.lock`).
    lock_sha256: str = ""
    #: True: one stage; the final stage installs the venv from orch's wheel feed (`FEED_URL`, see
    #: `wheel_feed_refusal`) instead of copying it from a builder stage. `orch build` only; never `orch render`.
    wheel_feed: bool = False
    #: The builder the Dockerfile is written for (`choose_builder`).
    builder: Builder = "classic"
    #: True (BuildKit, the same plans as the feed): one stage; the install step bind-mounts the context's
    #: lock, wheels and orch/ scripts for that step only (`RUN --mount=type=bind`), so none is in a layer.
    mounted_wheels: bool = False
    #: With `mounted_wheels` in `orch build`: the image the install step mounts the wheels from
    #: (plan/wheels_image.py), so the context the engine fetches leaves wheels/ out. Empty: from the context.
    wheels_image: str = ""

    @property
    def builder_labels(self) -> tuple[tuple[str, str], ...]:
        """The builder stage's opening labels: it is a temporary image, marked so it can be found."""
        return tuple(sorted({f"{LABEL_PREFIX}.stage": "builder", **dict(self.stage_labels)}.items()))

    @property
    def toolchain_debs(self) -> bool:
        """The toolchain's Debian packages come in the context (`toolchain-debs/`), collected on the host:
        in wheelhouse mode, so that the build needs no network; online builds run apt in the builder."""
        return self.extensions is not None and self.install_mode == "wheelhouse"

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

    installer = model.python.effective_installer
    # The builder's machine is x86_64 today (TargetPlatform's default), the table's one uv wheel.
    uv = uv_wheel() if installer == "uv" else None

    labels: dict[str, str] = {
        f"{LABEL_PREFIX}.dossier.identity": loaded.identity,
        f"{LABEL_PREFIX}.dossier.name": model.name,
        f"{LABEL_PREFIX}.platform": system.platform,
        f"{LABEL_PREFIX}.backend.version": system.version or "none",
        f"{LABEL_PREFIX}.python.version": model.python.version,
        f"{LABEL_PREFIX}.install.mode": model.python.install,
        f"{LABEL_PREFIX}.installer": installer,
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
        installer=installer,
        uv=uv,
        pip_index_options=tuple(index_options),
        ca_bundle=ca_bundle and model.python.install == "online",
        builder_apt_packages=builder_packages,
        runtime_apt_packages=runtime_packages,
        entrypoint=model.code.entrypoint,
        determinism=model.determinism,
        uid=RUNTIME_UID,
        labels=tuple(sorted(labels.items())),
        extensions=_extensions_plan(loaded, model.python.version),
        lock_sha256=hashlib.sha256(loaded.resolve(model.python.requirements).read_bytes()).hexdigest(),
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


# -- what `orch build` will do with the plan --------------------------------------------------------------

CREATED_LABEL = "org.opencontainers.image.created"
#: The context digest, set by the engine's build-label option (it cannot be in the Dockerfile it digests):
#: an image that carries this build's identity and digest is reused instead of built again.
CONTEXT_DIGEST_LABEL = f"{LABEL_PREFIX}.context.digest"


def default_tag(loaded: LoadedDossier, namespace: str = "orch") -> str:
    """`<namespace>/<name>:<identity prefix>`; the identity covers the variant, so variants get their own tag.

    The namespace is the engine's (`ORCH_TAG_NAMESPACE`, engine/labels.py; default `orch`), so that two
    users of one engine do not share the tag of a dossier both rebuild.
    """
    return f"{namespace}/{loaded.model.name}:{loaded.short_identity}"


# -- the wheel feed: the locked wheels reach the install step without becoming a layer ----------------

#: The feed listens on its own container's loopback; the build's steps join that network namespace.
FEED_PORT = 8470
FEED_URL = f"http://127.0.0.1:{FEED_PORT}/"
#: The feed build's copier (probes/feed_fetch.py), written at the context's top level for the feed only.
FEED_FETCH = "feed_fetch.py"
#: What the feed serves, from the rendered context: the lock, the wheelhouse and the copier, nothing else.
FEED_PATHS = ("requirements.lock", "wheels", FEED_FETCH)


def wheel_feed_refusal(plan: BuildPlan) -> str | None:
    """Why this plan cannot install from the wheel feed (None: it can).

    The feed removes the builder stage's second copy of the venv (its commit, then `COPY --from` and a
    second commit: two thirds of a cold build, docs/benchmarks.md) while keeping the wheels out of every
    layer. It needs what the one-stage install needs: the locked wheels (wheelhouse mode), uv (it installs
    what the feed serves), a base image with its own Python (the feed runs it),
    and no apt step (the feed's namespace has no outside network); an extension build keeps its builder stage.
    """
    if plan.install_mode != "wheelhouse":
        return "online install"
    if plan.installer != "uv" or plan.uv is None:
        return "installer pip"
    if plan.base.python_source != "image":
        return f"the base's Python comes from {plan.base.python_source}"
    if plan.builder_apt_packages or plan.runtime_apt_packages:
        return "OS packages are installed with apt"
    if plan.extensions is not None:
        return "compiled extensions are built in a builder stage"
    return None


def buildkit_plan(plan: BuildPlan) -> BuildPlan:
    """The plan as BuildKit builds it: one stage whose install step bind-mounts the wheels, the lock and
    orch's install script for that step only, where the plan allows it (`wheel_feed_refusal`); otherwise
    the two-stage form. The wheels come from the context (`orch render`) unless `wheels_image` is set
    (`orch build`)."""
    return replace(plan, builder="buildkit", mounted_wheels=wheel_feed_refusal(plan) is None)


def feed_spec(plan: BuildPlan, base_id: str) -> ServiceSpec:
    command = served_command(f"python{plan.python_version}", FEED_PORT, "127.0.0.1", "/feed")
    return ServiceSpec(image=base_id, command=command)


def default_build_network(plan: BuildPlan) -> Network:
    """No network for a wheelhouse build that installs no OS package from the archive: it is then hermetic.

    apt needs the distribution's archive, so a build with OS packages (or a base whose Python comes from
    apt) gets the engine's default network; pip still installs with --no-index from the wheelhouse. The
    extensions' toolchain does not count in wheelhouse mode: its .deb files were collected on the host
    (stages/debhouse.py) and travel in the context, like the wheels.
    """
    toolchain_apt = plan.extensions is not None and not plan.toolchain_debs
    apt = bool(plan.builder_apt_packages or plan.runtime_apt_packages) or toolchain_apt
    if plan.install_mode == "wheelhouse" and not apt:
        return "none"
    return "default"


def created_label(previous: Mapping[str, str] | None, identity: str, now: str) -> str:
    """`created` is kept from an earlier image of the same identity under the same tag, so a warm rebuild
    gives the same final layer and the cache hits all the way down; otherwise it is `now`."""
    if previous is not None and previous.get(f"{LABEL_PREFIX}.dossier.identity") == identity:
        return previous.get(CREATED_LABEL) or now
    return now


def build_labels(
    loaded: LoadedDossier, code: CodeRef, *, created: str, base_id: str, base_repo_digests: Sequence[str] = ()
) -> dict[str, str]:
    """Labels that depend on this build, not on the dossier alone (those are in the Dockerfile)."""
    labels = {
        CREATED_LABEL: created,
        "org.opencontainers.image.version": loaded.short_identity,
        f"{LABEL_PREFIX}.base.id": base_id,
    }
    if code.revision:
        labels["org.opencontainers.image.revision"] = code.revision
    if code.kind == "git-url":
        labels["org.opencontainers.image.source"] = code.source
    if code.dirty_diff_sha256:
        labels[f"{LABEL_PREFIX}.code.dirty-diff"] = code.dirty_diff_sha256
    if base_repo_digests and not loaded.base_image.digest:
        labels["org.opencontainers.image.base.digest"] = base_repo_digests[0].split("@", 1)[-1]
    return {key: redact(value) for key, value in labels.items()}


@dataclass(frozen=True)
class BuildSteps:
    """Everything `orch build` hands the engine, decided before the first engine call that changes anything."""

    #: The plan with this build's labels merged in and the engine's labels opening each stage.
    plan: BuildPlan
    tag: str
    network: BuildNetwork
    no_cache: bool
    #: The folder the context is rendered into (Dockerfile, lock, app/, wheels/, orch/ca-bundle.pem).
    context_dir: Path
    ca_bundle: Path | None
    #: The inventory probe, run in the built image (its `image` is a placeholder until the build is done).
    inventory: RunSpec
    #: The wheel feed the build reads the lock and wheels from (network `wheel-feed`); None otherwise.
    feed: ServiceSpec | None = None
    builder: Builder = "classic"
    #: BuildKit: the container the engine fetches the context tar from; None for classic builds.
    context_server: ServiceSpec | None = None
    #: BuildKit with mounted wheels: the wheels image (step `wheels` makes it or finds it); None otherwise.
    wheels: WheelsImageSpec | None = None


def make_build_steps(
    loaded: LoadedDossier,
    *,
    out: Path,
    code: CodeRef,
    created: str,
    base_id: str,
    base_repo_digests: Sequence[str] = (),
    engine_labels: Mapping[str, str] | None = None,
    tag: str | None = None,
    network: Network | None = None,
    no_cache: bool = False,
    ca_bundle: Path | None = None,
    built_image: str = "<image built by this build>",
    builder: Builder = "classic",
    tag_namespace: str = "orch",
    wheel_feed: bool = True,
) -> BuildSteps:
    """The build, decided: every value comes in as an argument (the clock's `created`, the base's id).

    `wheel_feed`: the engine's builds can join a container's network namespace (`networkmode=container:…`).
    Podman's Buildah cannot (its RUN steps get their own namespace whatever the mode says), so there the
    classic build reads the wheels from the uploaded context with no network, as `--network none` does."""
    plan = make_plan(loaded, ca_bundle=ca_bundle is not None)
    labels = build_labels(loaded, code, created=created, base_id=base_id, base_repo_digests=base_repo_digests)
    plan = with_stage_labels(with_labels(plan, labels), engine_labels or {})
    build_network: BuildNetwork = network or default_build_network(plan)
    feed = server = wheels = None
    if builder == "buildkit":
        # BuildKit fetches the context from the context server and mounts the wheels into the one install
        # step from an image of their own: the feed's job, without a second container on the build's path.
        plan = buildkit_plan(plan)
        server = context_server_spec(plan.python_version, base_id)
        if plan.mounted_wheels and plan.uv is not None:
            wheels = wheels_image_spec(
                tag_namespace,
                lock_sha256=plan.lock_sha256,
                uv_wheel=plan.uv.file_name,
                uv_sha256=plan.uv.sha256,
                python_version=plan.python_version,
                platform=plan.platform,
                stage_labels=dict(plan.stage_labels),
            )
            plan = replace(plan, wheels_image=wheels.tag)
    # An explicit --network is the user's choice of how the build reaches its wheels: no feed then.
    elif network is None and wheel_feed and wheel_feed_refusal(plan) is None:
        plan = replace(plan, wheel_feed=True)
        build_network, feed = "wheel-feed", feed_spec(plan, base_id)
    return BuildSteps(
        plan=plan,
        tag=tag or default_tag(loaded),
        network=build_network,
        no_cache=no_cache,
        context_dir=out / "context",
        ca_bundle=ca_bundle,
        inventory=inventory_spec(built_image),
        feed=feed,
        builder=builder,
        context_server=server,
        wheels=wheels,
    )
