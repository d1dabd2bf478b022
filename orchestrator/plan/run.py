"""The run plan: every container a probe starts, decided before the first one starts.

Pure: the GPU mapping comes from `HostFacts` passed in, the image from the caller. One `RunSpec` per
container — inventory, device, sample — with its image, command, mounts, environment, limits, network
and labels. The probe stages execute these specs; `--dry-run` prints them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from orchestrator.dossier.load import LoadedDossier
from orchestrator.model.host import HostFacts
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

    @property
    def maps_nvidia(self) -> bool:
        return self.nvidia_gpus or bool(self.nvidia_device_ids) or bool(self.cdi_devices)


def plan_gpu_mapping(platform: Platform, host: HostFacts, selection: GpuSelection | None = None) -> GpuMapping:
    """How containers get the host's GPUs: all of them, or the `selection` (`--gpus`, a scheduler's allocation;
    see plan/gpu_select.py). The description says which GPUs and why, for the report."""
    chosen = selection is not None and not selection.all
    why = f" ({selection.reason})" if selection is not None else ""
    if platform == "cuda":
        docker = host.docker
        offered = list(docker.cdi_devices if docker else [])
        if docker is not None and docker.nvidia_runtime:
            if selection is not None and chosen:
                ids = ", ".join(selection.device_ids) or "none"
                return GpuMapping(
                    nvidia_gpus=bool(selection.device_ids),
                    nvidia_device_ids=selection.device_ids,
                    description=f"GPU(s) {ids} through the nvidia runtime{why}",
                )
            return GpuMapping(
                nvidia_gpus=True, description=f"GPU device request (--gpus all) through the nvidia runtime{why}"
            )
        if selection is not None and chosen:
            wanted = tuple(f"nvidia.com/gpu={gpu}" for gpu in selection.device_ids)
            missing = [name for name in wanted if name not in offered]
            if wanted and not missing:
                return GpuMapping(cdi_devices=wanted, description=f"CDI devices {', '.join(wanted)}{why}")
            if wanted:
                return GpuMapping(description=f"none: the CDI specs name no {', '.join(missing)}{why}")
            return GpuMapping(description=f"none: no GPU selected{why}")
        cdi = tuple(d for d in offered if d.startswith("nvidia.com/gpu=all"))
        if cdi:
            return GpuMapping(cdi_devices=cdi, description=f"CDI devices {', '.join(cdi)}{why}")
        return GpuMapping(description="none: the daemon has no nvidia runtime and no NVIDIA CDI devices")
    if platform == "rocm":
        if not host.kfd_present:
            return GpuMapping(description="none: /dev/kfd does not exist on this host")
        groups = tuple(str(gid) for gid in (host.video_gid, host.render_gid) if gid is not None)
        devices = selection.devices if selection is not None and chosen else ("/dev/kfd", *host.dri_render_nodes)
        return GpuMapping(
            devices=devices,
            group_add=groups,
            description=f"/dev/kfd and {len(devices) - 1} render node(s), groups {', '.join(groups) or 'none'}{why}",
        )
    return GpuMapping()


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

    @classmethod
    def under(cls, out: Path) -> SampleFolders:
        return cls(out / "sample-output", out / "sample-meta", out / "probe-site", out / "sample.log")


def sample_mounts(loaded: LoadedDossier, output: Path, meta: Path, site: Path) -> list[Mount]:
    model = loaded.model
    # A data, weights or input folder is mounted as one tree, read-only.
    mounts = [Mount(loaded.resolve(item.path, kind="any"), f"/orch/input/{item.path}") for item in model.expect.inputs]
    for kind, group in (("data", model.data), ("weights", model.weights)):
        mounts += [
            Mount(loaded.resolve(a.path, kind="any"), f"/orch/{kind}/{a.name}") for a in group if a.path is not None
        ]
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
        mounts=sample_mounts(loaded, folders.output, folders.meta, folders.site),
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


def make_run_plan(loaded: LoadedDossier, image: str, mapping: GpuMapping, out: Path) -> RunPlan:
    """`mapping` comes from `plan_gpu_mapping(platform, host facts)`; `out` is the probe's output folder."""
    folders = SampleFolders.under(out)
    return RunPlan(
        image=image,
        mapping=mapping,
        inventory=inventory_spec(image),
        device=device_spec(loaded, image, mapping),
        sample=sample_spec(loaded, image, mapping, folders),
        folders=folders,
    )
