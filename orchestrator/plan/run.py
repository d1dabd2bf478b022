"""The run plan: every container a probe starts, decided before the first one starts.

Pure: the GPU mapping comes from `HostFacts` passed in, the image from the caller. One `RunSpec` per
container — inventory, device, sample — with its image, command, mounts, environment, limits, network
and labels. The probe stages execute these specs; `--dry-run` prints them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.dossier.load import LoadedDossier
from orchestrator.dossier.sources import cached_object
from orchestrator.model.host import DockerGpuFacts, HostFacts
from orchestrator.model.platform import Platform
from orchestrator.plan.gpu_select import GpuSelection
from orchestrator.plan.specs import LABEL_PREFIX, Mount, RunSpec
from orchestrator.resources import probe_source

INVENTORY_TIMEOUT_S = 300
#: The inventory probe prints every installed file with its sha256 (the environment digest's list, at most
#: model.environment.MAX_FILES): ~150 bytes a file, 45 MB at the bound, kept whole so its JSON parses.
INVENTORY_LOG_BYTES = 64 << 20
DEVICE_PROBE_TIMEOUT_S = 600
PROBE_LABEL = f"{LABEL_PREFIX}.probe"


#: The CDI kinds of the vendors' own spec generators (gpu-domain §3.3): `nvidia-ctk cdi generate`, `amd-ctk cdi generate`.
NVIDIA_CDI_KIND = "nvidia.com/gpu"
AMD_CDI_KIND = "amd.com/gpu"
#: What an administrator runs when the CDI specs lack a selected GPU (docs/gpu-hosts.md "CDI").
CDI_GENERATE = {
    NVIDIA_CDI_KIND: "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
    AMD_CDI_KIND: "sudo amd-ctk cdi generate --output=/etc/cdi/amd.json",
}

Mechanism = Literal["none", "cdi", "nvidia-runtime", "device-nodes"]


@dataclass(frozen=True)
class GpuMapping:
    """How the device probe and the sample get the host's GPUs."""

    nvidia_gpus: bool = False
    #: Selected NVIDIA GPUs (host indices or UUIDs); empty with `nvidia_gpus` means all of them.
    nvidia_device_ids: tuple[str, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    description: str = "none (CPU platform)"
    #: How the GPUs arrive: CDI device names, the nvidia runtime's device request, device nodes, or not at all.
    mechanism: Mechanism = "none"
    #: When CDI was wanted but a selected GPU has no CDI device: the command that writes the spec.
    cdi_hint: str | None = None

    @property
    def maps_nvidia(self) -> bool:
        return self.nvidia_gpus or bool(self.nvidia_device_ids) or bool(self.cdi_devices)


def _cdi_wanted(kind: str, selection: GpuSelection | None, host: HostFacts) -> tuple[str, ...]:
    """The CDI names of the selection: `kind=all`, or one per selected GPU (index, GPU-/MIG- UUID).

    `nvidia-ctk cdi generate` names each GPU by index, by UUID or both (`--device-name-strategy`): a GPU
    selected by index is named by its UUID when the specs offer only that name."""
    if selection is None or selection.all:
        return (f"{kind}=all",)
    offered = set(host.docker.cdi_devices) if host.docker is not None else set()
    uuids = {str(gpu.index): gpu.uuid for gpu in (host.nvidia.gpus if host.nvidia else []) if gpu.uuid}
    names = []
    for gpu in selection.device_ids:
        by_index, by_uuid = f"{kind}={gpu}", f"{kind}={uuids.get(gpu)}"
        names.append(by_uuid if by_index not in offered and gpu in uuids and by_uuid in offered else by_index)
    return tuple(names)


def _cdi_gap(docker: DockerGpuFacts | None, wanted: tuple[str, ...]) -> str | None:
    """Why CDI cannot map `wanted` on this engine (None: it can)."""
    if docker is None:
        return "the engine's GPU support is not known"
    if not docker.cdi_enabled:
        return "the daemon does not resolve CDI"
    missing = [name for name in wanted if name not in docker.cdi_devices]
    if missing:
        return f"the CDI specs name no {', '.join(missing)}"
    return None


def plan_gpu_mapping(
    platform: Platform, host: HostFacts, selection: GpuSelection | None = None, cdi_kind: str | None = None
) -> GpuMapping:
    """How containers get the host's GPUs: all of them, or the `selection` (`--gpus`, a scheduler's allocation;
    see plan/gpu_select.py). The description says which GPUs, by which mechanism and why, for the report.

    CDI first, on an engine that resolves it and whose specs name every selected GPU (Podman always; Docker
    with CDI on): the runtime then injects exactly the spec's nodes, environment and mounts. Otherwise the
    older way: the nvidia runtime's device request (Docker only), or AMD's device nodes. `cdi_kind` replaces
    the vendor's kind (`nvidia.com/gpu`, `amd.com/gpu`): a site's own spec generator, or a test's."""
    why = f" ({selection.reason})" if selection is not None else ""
    if platform == "cuda":
        return _nvidia_mapping(host, selection, cdi_kind or NVIDIA_CDI_KIND, why)
    if platform == "rocm":
        return _amd_mapping(host, selection, cdi_kind or AMD_CDI_KIND, why)
    return GpuMapping()


def _by_cdi(wanted: tuple[str, ...], why: str, how: str, groups: tuple[str, ...] = ()) -> GpuMapping:
    described = f"CDI devices {', '.join(wanted)} ({how})"
    if groups:
        described += f", groups {', '.join(groups)}"
    return GpuMapping(cdi_devices=wanted, group_add=groups, mechanism="cdi", description=described + why)


def _nvidia_mapping(host: HostFacts, selection: GpuSelection | None, kind: str, why: str) -> GpuMapping:
    chosen = selection is not None and not selection.all
    if selection is not None and chosen and not selection.device_ids:
        return GpuMapping(description=f"none: no GPU selected{why}")
    docker = host.docker
    wanted = _cdi_wanted(kind, selection, host)
    gap = _cdi_gap(docker, wanted)
    if gap is None:
        return _by_cdi(wanted, why, "the engine resolves CDI")
    if docker is not None and docker.nvidia_runtime and docker.engine_kind == "docker":
        if selection is not None and chosen:
            return GpuMapping(
                nvidia_gpus=True,
                nvidia_device_ids=selection.device_ids,
                mechanism="nvidia-runtime",
                description=f"GPU(s) {', '.join(selection.device_ids)} through the nvidia runtime (not CDI: {gap}){why}",
            )
        return GpuMapping(
            nvidia_gpus=True,
            mechanism="nvidia-runtime",
            description=f"GPU device request (--gpus all) through the nvidia runtime (not CDI: {gap}){why}",
        )
    if docker is not None and not docker.cdi_enabled and all(name in docker.cdi_devices for name in wanted):
        # A Docker older than 26 does not list its CDI spec dirs even with CDI on: try the specs' names.
        return _by_cdi(wanted, why, "the daemon lists no CDI spec dirs: CDI may be off")
    podman = docker is not None and docker.engine_kind == "podman"
    runtime = "Podman has no nvidia runtime request" if podman else "the daemon has no nvidia runtime"
    hint = CDI_GENERATE.get(kind) if docker is not None and docker.cdi_enabled else None
    return GpuMapping(description=f"none: {gap}, and {runtime}{why}", cdi_hint=hint)


def _amd_mapping(host: HostFacts, selection: GpuSelection | None, kind: str, why: str) -> GpuMapping:
    if not host.kfd_present:
        return GpuMapping(description="none: /dev/kfd does not exist on this host")
    groups = tuple(str(gid) for gid in (host.video_gid, host.render_gid) if gid is not None)
    wanted = _cdi_wanted(kind, selection, host)
    gap = _cdi_gap(host.docker, wanted)
    if gap is None:
        return _by_cdi(wanted, why, "the engine resolves CDI", groups)
    chosen = selection is not None and not selection.all
    devices = selection.devices if selection is not None and chosen else ("/dev/kfd", *host.dri_render_nodes)
    return GpuMapping(
        devices=devices,
        group_add=groups,
        mechanism="device-nodes",
        description=f"/dev/kfd and {len(devices) - 1} render node(s), groups {', '.join(groups) or 'none'}"
        f" (not CDI: {gap}){why}",
    )


def probe_command(name: str) -> list[str]:
    """A probe script run by the image's own interpreter, isolated from the image's environment variables."""
    return ["python", "-I", "-c", probe_source(name)]


def inventory_spec(image: str) -> RunSpec:
    return RunSpec(
        image=image,
        # --environment: also hash every installed file (the environment digest, model/environment.py).
        command=[*probe_command("inventory.py"), "--environment"],
        timeout_s=INVENTORY_TIMEOUT_S,
        labels={PROBE_LABEL: "inventory"},
        max_log_bytes=INVENTORY_LOG_BYTES,
    )


def cpu_knob_environment(loaded: LoadedDossier) -> dict[str, str]:
    """The CPU knobs the dossier pins (determinism.cpu), as the environment torch and oneDNN read at start-up."""
    cpu = loaded.model.determinism.cpu
    return cpu.environment() if cpu is not None else {}


def device_spec(loaded: LoadedDossier, image: str, mapping: GpuMapping) -> RunSpec:
    platform, version = loaded.model.system.platform, loaded.model.system.version
    return RunSpec(
        image=image,
        command=probe_command("device.py"),
        # Under the sample's CPU knobs, so the capability it reports is the one the sample gets.
        environment={
            "ORCH_PROBE_EXPECT": json.dumps({"platform": platform, "version": version}),
            **cpu_knob_environment(loaded),
        },
        timeout_s=DEVICE_PROBE_TIMEOUT_S,
        labels={PROBE_LABEL: "device"},
        nvidia_gpus=mapping.nvidia_gpus,
        nvidia_device_ids=mapping.nvidia_device_ids,
        cdi_devices=mapping.cdi_devices,
        devices=mapping.devices,
        group_add=mapping.group_add,
    )


@dataclass(frozen=True)
class SampleFolders:
    """The host folders the sample's container writes into (output, meta) or reads its probe site from."""

    output: Path
    meta: Path
    site: Path
    log: Path
    #: The engine runs rootless (Podman as a user, rootless Docker): the container's uid 10001 is one of the
    #: user's sub-ids on the host, so the folders it writes are opened to all rather than given to uid 10001.
    rootless_engine: bool = False
    #: The host's cache of remote items (orchestrator/remote/cache.py): an item with a `uri` is mounted from
    #: there (where step `fetch` put it). None: remote items are not mounted (and their fingerprints fail).
    sources_cache: Path | None = None

    @classmethod
    def under(cls, out: Path, rootless_engine: bool = False, sources_cache: Path | None = None) -> SampleFolders:
        return cls(
            out / "sample-output",
            out / "sample-meta",
            out / "probe-site",
            out / "sample.log",
            rootless_engine,
            sources_cache,
        )


def sample_mounts(
    loaded: LoadedDossier, output: Path, meta: Path, site: Path, sources_cache: Path | None = None
) -> list[Mount]:
    model = loaded.model
    # A data, weights or input folder is mounted as one tree, read-only.
    mounts = [Mount(loaded.resolve(item.path, kind="any"), f"/orch/input/{item.path}") for item in model.expect.inputs]
    for kind, group in (("data", model.data), ("weights", model.weights)):
        for a in group:
            if a.path is not None:
                mounts.append(Mount(loaded.resolve(a.path, kind="any"), f"/orch/{kind}/{a.name}"))
            elif sources_cache is not None:
                # Where step `fetch` puts it, by its fingerprint: the same path for every dossier naming these bytes.
                mounts.append(Mount(cached_object(sources_cache, a.sha256), f"/orch/{kind}/{a.name}"))
    mounts += [
        Mount(output, "/orch/output", read_only=False),
        Mount(meta, "/orch/meta", read_only=False),
        Mount(site, "/orch/probe-site"),
    ]
    return mounts


def sample_environment(loaded: LoadedDossier) -> dict[str, str]:
    determinism = loaded.model.determinism
    env = {
        "ORCH_DETERMINISM": determinism.model_dump_json(),
        "PYTHONHASHSEED": str(determinism.seed),
        "PYTHONPATH": "/orch/probe-site",
        "HF_HUB_OFFLINE": "1",
    }
    if determinism.cublas_workspace_config:
        env["CUBLAS_WORKSPACE_CONFIG"] = determinism.cublas_workspace_config
        env["HIPBLAS_WORKSPACE_CONFIG"] = determinism.cublas_workspace_config
    env.update(cpu_knob_environment(loaded))
    return env


def sample_spec(loaded: LoadedDossier, image: str, mapping: GpuMapping, folders: SampleFolders) -> RunSpec:
    expect = loaded.model.expect
    return RunSpec(
        image=image,
        command=expect.command,
        mounts=sample_mounts(loaded, folders.output, folders.meta, folders.site, folders.sources_cache),
        environment=sample_environment(loaded),
        timeout_s=expect.timeout_s,
        mem_limit=f"{expect.limits.memory_mib}m",
        labels={PROBE_LABEL: "sample"},
        nvidia_gpus=mapping.nvidia_gpus,
        nvidia_device_ids=mapping.nvidia_device_ids,
        cdi_devices=mapping.cdi_devices,
        devices=mapping.devices,
        group_add=mapping.group_add,
        shm_size="1g",
    )


@dataclass(frozen=True)
class RunPlan:
    """Every container `orch probe` may start for one image, in order."""

    image: str
    mapping: GpuMapping
    #: Run only when no build.json of this image in the output folder already holds its inventory.
    inventory: RunSpec
    #: Not run when the host's driver cannot run the image's CUDA (the host stage says why).
    device: RunSpec
    #: Run only when the device stage passed and every fingerprint matches.
    sample: RunSpec
    folders: SampleFolders


def make_run_plan(
    loaded: LoadedDossier,
    image: str,
    mapping: GpuMapping,
    out: Path,
    rootless_engine: bool = False,
    sources_cache: Path | None = None,
) -> RunPlan:
    """`mapping` comes from `plan_gpu_mapping(platform, host facts)`; `out` is the probe's output folder;
    `sources_cache` the host's cache of remote items."""
    folders = SampleFolders.under(out, rootless_engine, sources_cache)
    return RunPlan(
        image=image,
        mapping=mapping,
        inventory=inventory_spec(image),
        device=device_spec(loaded, image, mapping),
        sample=sample_spec(loaded, image, mapping, folders),
        folders=folders,
    )
