"""The program: what `orch build`, `orch probe` and `orch rebuild` will do, as a tuple of frozen steps.

Every command runs in three phases:

1. *observe* (stages/observe.py): read-only facts — the base image's id, the labels of the image the tag
   names now, the code's state, the host's GPU facts, the engine's labels. `--dry-run` observes without an
   engine: the values only an engine knows are placeholders that say where they come from.
2. *plan* (this module, pure): facts + dossier + options → a tuple of steps. Every value a step needs is
   decided here: the build's labels and network, the wheel feed, the GPU mapping and each container's spec
   (hardening and limits included). A step that may be left out at run time says so as a field
   (`reuse_if_same_context`, `reuse_recorded`): the step is still in the list, and its record says
   `reused` or `skipped`.
3. *execute* (stages/execute.py): one loop over the steps, one small handler per step type.

`--dry-run` prints `plan/describe.py`'s description of these very steps, and the executor records the
steps it ran in `steps.json`, so the plan printed and the program run are one list (a test checks it for
every example, and for the feed, reuse and failed-build branches).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from orchestrator.dossier.load import LoadedDossier
from orchestrator.dossier.sources import cached_object
from orchestrator.model.build_record import CodeRef, EngineRef
from orchestrator.model.host import HostFacts
from orchestrator.model.platform import Platform
from orchestrator.plan.build import BuildSteps, created_label, make_build_steps
from orchestrator.plan.builder import choose_builder
from orchestrator.plan.extension_check import extension_check_spec
from orchestrator.plan.gpu_select import GpuSelection
from orchestrator.plan.run import GpuMapping, RunPlan, make_run_plan, plan_gpu_mapping
from orchestrator.plan.specs import Builder, EngineKind, Network, RunSpec

#: Placeholders for values only a later step (or an engine) knows; `--dry-run` shows them as they are.
BASE_ID = "<id of the base image (step base)>"
BASE_DIGEST = "<repo digest of the base image (step base), when it has one>"
BUILT_IMAGE = "<image built by step build>"
CREATED = "<kept from an earlier image of this identity under this tag, else the build's start time>"


# -- facts: what the observe phase read ---------------------------------------------------------------------


@dataclass(frozen=True)
class BuildFacts:
    """What the build's plan depends on, read before anything changes."""

    code: CodeRef
    #: The base image's id in the engine; None when it is not there (step `base` pulls it, then the rest of the
    #: program is planned again with its id: the step list stays the same, a test checks it).
    base_id: str | None
    base_repo_digests: tuple[str, ...]
    #: The labels of the image the tag names now (its `created` is kept for the same identity); None: no image.
    previous_labels: Mapping[str, str] | None
    engine_labels: Mapping[str, str]
    #: The clock's reading, RFC 3339 (the `created` label of a new identity).
    now: str
    #: The builders the engine offers, preferred first (EngineInfo.builders; a dry run assumes BuildKit).
    builders: tuple[Builder, ...] = ("classic",)
    #: Which engine builds (EngineInfo.kind): Podman's Buildah cannot join the wheel feed's network namespace.
    engine_kind: EngineKind = "docker"
    #: The engine's server and API versions and whether it runs rootless, for build.json.
    engine_version: str = ""
    engine_api_version: str = ""
    engine_rootless: bool = False


@dataclass(frozen=True)
class ProbeFacts:
    """What the probe's plan depends on: the image (when it exists before the run) and this host."""

    image_ref: str
    #: The image's id; None when the image is built by this very program (rebuild).
    image_id: str | None
    host: HostFacts
    #: `--gpus` or a scheduler's allocation, already checked against `host` (None on the CPU platform).
    selection: GpuSelection | None
    engine_labels: Mapping[str, str] = field(default_factory=dict)
    #: A dry run asks no engine: said in the host step's description.
    host_notes: tuple[str, ...] = ()
    #: The host's cache of remote items ($ORCH_CACHE_DIR/sources or ~/.cache/orch/sources): step `fetch` fills it, the sample
    #: mounts from it.
    sources_cache: Path | None = None


@dataclass(frozen=True)
class BuildOptionsPlan:
    """The user's build options, as the plan takes them (the CLI's `BuildOptions` without the wheel cache)."""

    out: Path
    tag: str
    network: Network | None = None
    no_cache: bool = False
    ca_bundle: Path | None = None
    #: `--builder`: None lets the engine's capabilities decide (plan/build.py `choose_builder`).
    builder: Builder | None = None
    #: The engine's tag namespace (ORCH_TAG_NAMESPACE): the wheels image's tag is under it too.
    tag_namespace: str = "orch"


# -- the steps ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    #: The step's name in `--dry-run` and in `steps.json`.
    name: ClassVar[str]
    #: True when the step calls the engine, False for work on the host.
    engine: ClassVar[bool] = True


@dataclass(frozen=True)
class EnsureBase(Step):
    name: ClassVar[str] = "base"
    ref: str
    pinned_id: str | None
    #: Already in the engine when observed (then this step only checks the pinned id).
    present: bool


@dataclass(frozen=True)
class RenderContext(Step):
    name: ClassVar[str] = "render"
    engine: ClassVar[bool] = False
    build: BuildSteps


@dataclass(frozen=True)
class EnsureWheels(Step):
    """BuildKit's wheels image (plan/wheels_image.py): the tagged one when it holds the wheels the render step
    collected (its digest label says so), else built from them, `FROM scratch`, through the context server.
    In every build program; `build.wheels` None (the classic builder, an online install) skips it."""

    name: ClassVar[str] = "wheels"
    build: BuildSteps


@dataclass(frozen=True)
class BuildImage(Step):
    name: ClassVar[str] = "build"
    build: BuildSteps
    #: The tag's image is reused when it has this identity and this context digest (not with --no-cache).
    reuse_if_same_context: bool


@dataclass(frozen=True)
class InventoryProbe(Step):
    name: ClassVar[str] = "inventory"
    spec: RunSpec
    #: build.json of the same image id in the output folder already holds the inventory: read it instead.
    reuse_recorded: bool = True


@dataclass(frozen=True)
class ImageChecks(Step):
    name: ClassVar[str] = "image-checks"
    engine: ClassVar[bool] = False
    reference_inventory: str | None


@dataclass(frozen=True)
class WriteBuildRecord(Step):
    name: ClassVar[str] = "build-record"
    engine: ClassVar[bool] = False
    folder: Path
    build: BuildSteps
    builder_engine: EngineRef | None = None


@dataclass(frozen=True)
class RemoteSource:
    """One data or weights item with a `uri`, as step `fetch` gets it (the credential's variable by name only)."""

    label: str
    uri: str
    sha256: str
    access: str | None
    #: Where it sits in the cache once fetched (what the sample mounts).
    cached: Path


@dataclass(frozen=True)
class FetchSources(Step):
    """The dossier's remote items in the host's cache before anything is built or started: each found there
    (hashed again) or fetched from its source and checked against its sha256 (orchestrator/remote/). Only in a
    program whose dossier has such items."""

    name: ClassVar[str] = "fetch"
    engine: ClassVar[bool] = False
    cache: Path
    items: tuple[RemoteSource, ...]


@dataclass(frozen=True)
class ImageStage(Step):
    """The probe's image stage. After a build in the same program it reads the build's result in memory
    (no file read back, no check run twice); otherwise build.json of this image, or the inventory probe."""

    name: ClassVar[str] = "image"
    spec: RunSpec
    after_build: bool


@dataclass(frozen=True)
class HostStage(Step):
    name: ClassVar[str] = "host"
    engine: ClassVar[bool] = False
    mapping: GpuMapping
    selection: GpuSelection | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviceStage(Step):
    """The device probe (and the extensions' check). `sample_alongside`: the sample's container starts at the
    same time, in its own container, and its result counts only if this stage passes (see
    `sample_runs_alongside`)."""

    name: ClassVar[str] = "device"
    run: RunPlan
    extension_check: RunSpec | None
    sample_alongside: bool = False


@dataclass(frozen=True)
class SampleStage(Step):
    name: ClassVar[str] = "sample"
    run: RunPlan
    fingerprinted: tuple[str, ...]


@dataclass(frozen=True)
class WriteReport(Step):
    name: ClassVar[str] = "report"
    engine: ClassVar[bool] = False
    folder: Path


@dataclass(frozen=True)
class HandOver(Step):
    """Only when the report passed; the image is saved from the engine the whole program used."""

    name: ClassVar[str] = "handover"
    folder: Path
    tag: str
    #: Sign the hand-over's attestations with this key (`--sign`); read when the step runs, never copied.
    sign_key: Path | None = None


Program = tuple[Step, ...]


def names(program: Program) -> list[str]:
    return [step.name for step in program]


# -- the programs -------------------------------------------------------------------------------------------


def plan_build_steps(loaded: LoadedDossier, facts: BuildFacts, options: BuildOptionsPlan) -> BuildSteps:
    return make_build_steps(
        loaded,
        out=options.out,
        code=facts.code,
        created=created_label(facts.previous_labels, loaded.identity, facts.now),
        base_id=facts.base_id or BASE_ID,
        base_repo_digests=facts.base_repo_digests,
        engine_labels=facts.engine_labels,
        tag=options.tag,
        network=options.network,
        no_cache=options.no_cache,
        ca_bundle=options.ca_bundle,
        built_image=BUILT_IMAGE,
        builder=choose_builder(options.builder, facts.builders),
        tag_namespace=options.tag_namespace,
        wheel_feed=facts.engine_kind != "podman",
    )


def build_program(loaded: LoadedDossier, facts: BuildFacts, options: BuildOptionsPlan) -> Program:
    """`orch build`: the base, the context, the image (or the same one reused), its inventory and checks, build.json."""
    build = plan_build_steps(loaded, facts, options)
    return (
        EnsureBase(
            ref=loaded.base_image.from_line, pinned_id=loaded.base_image.image_id, present=facts.base_id is not None
        ),
        RenderContext(build=build),
        EnsureWheels(build=build),
        BuildImage(build=build, reuse_if_same_context=not build.no_cache),
        InventoryProbe(spec=build.inventory),
        ImageChecks(reference_inventory=loaded.model.python.reference_inventory),
        WriteBuildRecord(
            folder=options.out,
            build=build,
            builder_engine=EngineRef(
                kind=facts.engine_kind,
                version=facts.engine_version,
                api_version=facts.engine_api_version,
                rootless=facts.engine_rootless,
            ),
        ),
    )


def sample_runs_alongside(platform: Platform, stop_after_failure: bool) -> bool:
    """Whether the sample's container starts together with the device probe's, rather than after it passed.

    Only on the CPU platform: there the device stage checks the torch build and two small operations, and
    cannot find that the sample would fall back from a GPU to the CPU; on CUDA and ROCm the sample never
    starts before the device stage saw the GPU (no silent CPU fallback, not even for the seconds the probe
    takes). Not for `orch verify` (`stop_after_failure`): a replay runs nothing past its first failure.
    Either way a failed device stage leaves the sample `not_run`: a sample started alongside is stopped and
    its outputs are removed unread. The two are separate containers (own processes, file systems, no shared
    mount), so the probe cannot change what the sample computes; tests/integration/test_probe_alongside.py
    compares the outputs of both orders byte for byte."""
    return platform == "cpu" and not stop_after_failure


def probe_program(
    loaded: LoadedDossier,
    out: Path,
    facts: ProbeFacts,
    *,
    write_report: bool = True,
    handover: Path | None = None,
    sign_key: Path | None = None,
    stop_after_failure: bool = False,
) -> Program:
    """`orch probe` (and the probe half of `orch rebuild`): the four stages, the report, the hand-over.

    The GPU mapping and every container's spec are decided here, from the observed host, before any container
    (or, in a rebuild, any build) starts.
    """
    image = facts.image_id or BUILT_IMAGE
    platform = loaded.model.system.platform
    mapping = plan_gpu_mapping(platform, facts.host, facts.selection)
    docker = facts.host.docker
    run = make_run_plan(
        loaded,
        image,
        mapping,
        out,
        rootless_engine=docker is not None and docker.rootless,
        sources_cache=facts.sources_cache,
    )
    fingerprinted = [str(item.path) for item in loaded.model.expect.inputs]
    fingerprinted += [str(a.path or a.uri or a.name) for a in (*loaded.model.data, *loaded.model.weights)]
    steps: list[Step] = [*fetch_step(loaded, facts.sources_cache)]
    steps += [
        ImageStage(spec=run.inventory, after_build=facts.image_id is None),
        HostStage(mapping=mapping, selection=facts.selection, notes=facts.host_notes),
        DeviceStage(
            run=run,
            extension_check=extension_check_spec(loaded, run.device),
            sample_alongside=sample_runs_alongside(platform, stop_after_failure),
        ),
        SampleStage(run=run, fingerprinted=tuple(fingerprinted)),
    ]
    if write_report:
        steps.append(WriteReport(folder=out))
    if handover is not None:
        steps.append(HandOver(folder=handover, tag=facts.image_ref, sign_key=sign_key))
    return tuple(steps)


def fetch_step(loaded: LoadedDossier, cache: Path | None) -> list[FetchSources]:
    """Step `fetch` when the dossier has remote items (and a cache to put them in), else nothing."""
    items = tuple(
        RemoteSource(f"{kind} {a.name}", a.uri, a.sha256, a.access, cached_object(cache, a.sha256))
        for kind, group in (("data", loaded.model.data), ("weights", loaded.model.weights))
        for a in group
        if a.uri is not None and cache is not None
    )
    return [FetchSources(cache=cache, items=items)] if items and cache is not None else []


def rebuild_program(
    loaded: LoadedDossier,
    build: BuildFacts,
    probe: ProbeFacts,
    options: BuildOptionsPlan,
    *,
    handover: Path | None = None,
    sign_key: Path | None = None,
) -> Program:
    """`orch rebuild`: the remote items fetched (before a build that could take an hour fails on a revoked
    credential), the build, then the probe of the image it makes, the report, the hand-over."""
    probing = probe_program(loaded, options.out, probe, handover=handover, sign_key=sign_key)
    fetch = tuple(step for step in probing if isinstance(step, FetchSources))
    return (
        *fetch,
        *build_program(loaded, build, options),
        *(step for step in probing if not isinstance(step, FetchSources)),
    )
