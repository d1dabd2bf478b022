"""`orch probe`: the four layers of a rebuilt image, each checked and reported on its own.

- image: what the image contains (build.json of `orch build`, or the inventory probe run now);
- host: the GPU driver and the daemon's GPU support, and — before any GPU container starts — whether
  the host driver can run the image's CUDA/ROCm, explained in words;
- device: what torch sees inside the container with the host GPU mapped in, and a real computation;
- sample: fingerprints verified, determinism applied, the sample command run with inputs read-only,
  then the host re-reads the outputs and compares them with the reference.

No silent CPU fallback: a dossier that expects a GPU fails at `device` when none is visible, and the
sample is `not_run`, citing it. Only a declared variant (`--variant cpu`) runs on the CPU, and the
report says so. Every container is labelled and removed, also on failure, timeout and Ctrl-C.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator import __version__
from orchestrator.checks.host import cuda_verdict, gpu_datacenter, parse_require_cuda, rocm_verdict
from orchestrator.checks.image import image_checks, reference_inventory_warning
from orchestrator.dossier.load import LoadedDossier, file_sha256, where_differ
from orchestrator.engine import Engine, ImageInfo, Mount, RunSpec, describe_exit
from orchestrator.errors import ImageNotBuilt
from orchestrator.host.collect import collect_host_facts
from orchestrator.model.build_record import BuildRecord
from orchestrator.model.checks import Check, first_failure
from orchestrator.model.device import DEVICE_FACTS, DeviceProbeReport
from orchestrator.model.host import CompatVerdict, HostFacts
from orchestrator.model.inventory import Inventory, diff_inventories
from orchestrator.model.platform import LABEL_PREFIX
from orchestrator.model.recorded import mismatch_line
from orchestrator.model.report import (
    Report,
    ReportDossier,
    ReportImage,
    StageError,
    StageName,
    StageResult,
    overall_verdict,
)
from orchestrator.plan.build import RUNTIME_UID
from orchestrator.resources import probe_source
from orchestrator.stages.build import default_tag, read_record, run_inventory
from orchestrator.untrusted import OutputMissing, UnsafeOutput, last_line, parse_json, read_output_json

DEVICE_PROBE_TIMEOUT_S = 600
#: Largest meta file (determinism.json) the host reads back from a sample: a few hundred bytes are normal.
META_MAX_BYTES = 64 << 10


@dataclass(frozen=True)
class ProbeOptions:
    out: Path
    image: str | None = None
    #: `orch rebuild`: the image was built moments ago in the same run, so its build is the image stage's work.
    built_in_this_run: bool = False
    #: `orch verify`: a failed stage stops every stage after it (a replay proves nothing past its first failure).
    stop_after_failure: bool = False


@dataclass(frozen=True)
class GpuMapping:
    """How the device probe and the sample get the host's GPUs."""

    nvidia_gpus: bool = False
    cdi_devices: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    description: str = "none (CPU platform)"


def _check(name: str, expected: str, observed: str, passed: bool, detail: str | None = None) -> Check:
    return Check(name=name, expected=expected, observed=observed, passed=passed, detail=detail)


def _stage(
    name: StageName,
    started: float,
    checks: list[Check],
    facts: dict[str, Any],
    *,
    error: StageError | None = None,
    warnings: list[str] | None = None,
) -> StageResult:
    failed = first_failure(checks)
    if error is None and failed is not None:
        error = StageError(
            step=failed.name,
            message=f"expected {failed.expected}, observed {failed.observed}"
            + (f" ({failed.detail})" if failed.detail else ""),
        )
    return StageResult(
        name=name,
        status="failed" if error is not None else "passed",
        facts=facts,
        checks=checks,
        duration_s=round(time.monotonic() - started, 3),
        first_error=error,
        warnings=warnings or [],
    )


def not_run(name: StageName, reason: str) -> StageResult:
    return StageResult(name=name, status="not_run", reason=reason)


# -- image ---------------------------------------------------------------------------------------------


def resolve_image(engine: Engine, loaded: LoadedDossier, options: ProbeOptions) -> ImageInfo:
    ref = options.image or default_tag(loaded)
    image = engine.image(ref)
    if image is None and options.image is not None:
        raise ImageNotBuilt(
            f"the image {ref} given with --image is not in the engine",
            hint="Check the reference (`docker images`), or leave out --image to probe the image `orch build` "
            "made for this dossier.",
        )
    if image is None:
        # The tag carries the identity prefix: any change to the dossier, a file it references or --variant
        # asks for an image that was never built, even when an older one of the same name exists.
        raise ImageNotBuilt(
            f"the app image {ref} for this dossier identity ({loaded.short_identity}) is not built",
            hint="Build it first: `orch build DOSSIER --out DIR`, or build and probe in one go with `orch rebuild`.",
        )
    return image


def image_stage(
    engine: Engine, loaded: LoadedDossier, image: ImageInfo, out: Path, *, built_in_this_run: bool = False
) -> tuple[StageResult, Inventory | None]:
    """The image's contents against the dossier.

    Its duration: when `orch rebuild` built the image in this run, the build is this stage's work, so the
    build's time (from build.json) is counted in; a probe of an earlier build counts only its own time and
    records the build's in the facts, so no 112 s build is ever shown as a 0.00 s stage.
    """
    started = time.monotonic()
    inventory: Inventory | None = None
    source = "inventory probe"
    build_facts: dict[str, Any] = {}
    build_json = out / "build.json"
    if build_json.is_file():
        record = read_record(build_json)
        if record.image is not None and record.image.id == image.id:
            build_s = record.durations_s.get("total")
            if build_s is not None:
                build_facts["build_seconds"] = build_s
                build_facts["built"] = (
                    "in this run (orch rebuild): the stage's duration includes the build"
                    if built_in_this_run
                    else "earlier: the build's time is recorded in build.json, not in this stage's duration"
                )
                if built_in_this_run:
                    started -= build_s
            if record.inventory is not None:
                inventory, source = record.inventory, "build.json of this image"
    if not build_facts:
        build_facts["built"] = "earlier: no build.json of this image in the output folder, its build time is not known"
    if inventory is None:
        inventory, error = run_inventory(engine, image.id)
        if inventory is None:
            return _stage(
                "image",
                started,
                [],
                {"image": image.id},
                error=StageError(step="inventory probe", message=error or "no inventory"),
            ), None
    diff = None
    if loaded.model.python.reference_inventory:
        reference = loaded.resolve(loaded.model.python.reference_inventory).read_text(encoding="utf-8").splitlines()
        diff = diff_inventories(reference, inventory.pip_freeze, loaded.model.python.reference_inventory)
    identity = image.labels.get(f"{LABEL_PREFIX}.dossier.identity")
    checks = [
        _check(
            "image built from this dossier",
            f"identity {loaded.short_identity}",
            f"identity {identity[:12]}" if identity else "no orch identity label",
            identity == loaded.identity,
        ),
        *image_checks(loaded, inventory, diff),
    ]
    facts = {
        "image": image.id,
        "tags": list(image.tags),
        "size_bytes": image.size,
        "inventory_source": source,
        "python": inventory.python_version,
        "torch": inventory.backend.torch,
        "torch_cuda": inventory.backend.torch_cuda,
        "torch_hip": inventory.backend.torch_hip,
        "cuda_toolkit": inventory.backend.cuda_toolkit,
        "rocm": inventory.backend.rocm,
        "os": inventory.os_release.get("PRETTY_NAME"),
        "packages": len(inventory.pip_freeze),
        "os_packages": len(inventory.os_packages),
        **build_facts,
    }
    warning = reference_inventory_warning(loaded)
    return _stage("image", started, checks, facts, warnings=[warning] if warning else None), inventory


# -- host ----------------------------------------------------------------------------------------------


def image_backend(image: ImageInfo, inventory: Inventory | None) -> tuple[str | None, str | None, str | None]:
    """(CUDA the image needs, NVIDIA_REQUIRE_CUDA, ROCm the image carries), from its env and inventory."""
    cuda = image.env.get("CUDA_VERSION") or (inventory.backend.torch_cuda if inventory else None)
    rocm = (inventory.backend.rocm if inventory else None) or (
        inventory.backend.torch_hip.split("-")[0] if inventory and inventory.backend.torch_hip else None
    )
    return cuda, image.env.get("NVIDIA_REQUIRE_CUDA"), rocm


def cpu_variant_of(loaded: LoadedDossier) -> str | None:
    """The first variant the dossier declares for the CPU platform: the only CPU fallback orch may suggest."""
    for variant in loaded.reference_model.variants:
        if variant.system is not None and variant.system.platform == "cpu":
            return variant.name
    return None


def plan_gpu_mapping(platform: str, host: HostFacts) -> GpuMapping:
    if platform == "cuda":
        docker = host.docker
        cdi = tuple(d for d in (docker.cdi_devices if docker else []) if d.startswith("nvidia.com/gpu=all"))
        if docker is not None and docker.nvidia_runtime:
            return GpuMapping(
                nvidia_gpus=True, description="GPU device request (--gpus all) through the nvidia runtime"
            )
        if cdi:
            return GpuMapping(cdi_devices=cdi, description=f"CDI devices {', '.join(cdi)}")
        return GpuMapping(description="none: the daemon has no nvidia runtime and no NVIDIA CDI devices")
    if platform == "rocm":
        if not host.kfd_present:
            return GpuMapping(description="none: /dev/kfd does not exist on this host")
        groups = tuple(str(gid) for gid in (host.video_gid, host.render_gid) if gid is not None)
        return GpuMapping(
            devices=("/dev/kfd", *host.dri_render_nodes),
            group_add=groups,
            description=f"/dev/kfd and {len(host.dri_render_nodes)} render node(s), groups {', '.join(groups) or 'none'}",
        )
    return GpuMapping()


def host_stage(
    loaded: LoadedDossier, host: HostFacts, image: ImageInfo, inventory: Inventory | None
) -> tuple[StageResult, CompatVerdict, GpuMapping]:
    started = time.monotonic()
    platform = loaded.model.system.platform
    cuda, require, rocm = image_backend(image, inventory)
    mapping = plan_gpu_mapping(platform, host)
    facts: dict[str, Any] = {
        "kernel": host.kernel,
        "nvidia": host.nvidia.model_dump() if host.nvidia else None,
        "amd": host.amd.model_dump() if host.amd else None,
        "docker": host.docker.model_dump() if host.docker else None,
        "kfd_present": host.kfd_present,
        "cpu": host.cpu.model_dump() if host.cpu else None,
        "gpu_mapping": mapping.description,
        "notes": host.notes,
    }
    checks: list[Check] = []
    if platform == "cpu":
        verdict = CompatVerdict(status="not-applicable", explanation="CPU platform: no GPU driver is needed.")
        checks.append(_check("no accelerator needed", "CPU platform", "CPU platform", True))
    elif platform == "cuda":
        gpus = host.nvidia.gpus if host.nvidia else []
        datacenter = any(gpu_datacenter(gpu.name) for gpu in gpus)
        verdict = cuda_verdict(
            cuda,
            parse_require_cuda(require) if require else None,
            host.nvidia,
            datacenter_gpu=datacenter,
            image_has_compat_libs=bool(inventory and inventory.backend.cuda_compat_libs),
            cpu_variant=cpu_variant_of(loaded),
        )
        looked = "NVML, nvidia-smi, /sys/module/nvidia/version, /proc/driver/nvidia/version"
        checks.append(
            _check(
                "NVIDIA driver present",
                "an NVIDIA kernel driver",
                f"{host.nvidia.driver_version} ({host.nvidia.source}), {len(gpus)} GPU(s)"
                if host.nvidia
                else "no NVIDIA driver found",
                host.nvidia is not None,
                None if host.nvidia else f"looked at {looked}",
            )
        )
        checks.append(
            _check(
                "driver supports the image's CUDA",
                f"CUDA {cuda}" if cuda else "the image's CUDA",
                verdict.status,
                verdict.status in ("supported", "minor-version-compat"),
                verdict.explanation,
            )
        )
        checks.append(
            _check(
                "daemon can map NVIDIA GPUs",
                "nvidia runtime or NVIDIA CDI devices",
                mapping.description,
                mapping.nvidia_gpus or bool(mapping.cdi_devices),
            )
        )
    else:
        verdict = rocm_verdict(rocm, host.amd, host.kfd_present, cpu_variant=cpu_variant_of(loaded))
        checks.append(
            _check(
                "AMD GPU driver present",
                "amdgpu with KFD (/dev/kfd) and a GPU node",
                f"{len(host.amd.gpus)} GPU(s): {', '.join(g.gfx_target for g in host.amd.gpus)}"
                if host.amd
                else "no AMD GPU driver found",
                host.amd is not None and host.kfd_present,
            )
        )
        checks.append(
            _check(
                "driver supports the image's ROCm",
                f"ROCm {rocm}" if rocm else "the image's ROCm",
                verdict.status,
                verdict.status in ("supported", "minor-version-compat"),
                verdict.explanation,
            )
        )
    facts["compatibility"] = verdict.model_dump()
    return _stage("host", started, checks, facts), verdict, mapping


# -- device --------------------------------------------------------------------------------------------


def _probe_json(stdout: str) -> dict[str, Any] | None:
    """The probe's report: the last line of its (capped) stdout that is a JSON object."""
    for line in reversed([line for line in stdout.splitlines() if line.strip()]):
        try:
            value = parse_json(line.encode("utf-8", errors="replace"), "the probe's output")
        except UnsafeOutput:
            continue
        if isinstance(value, dict):
            return value
    return None


def device_checks(platform: str, version: str | None, found: dict[str, Any], mapping: GpuMapping) -> list[Check]:
    """Checks on the device probe's report. Pure: also used on host-mode probe output."""
    checks: list[Check] = []
    torch = found.get("torch")
    if torch is None:
        return [
            _check("torch imports", "torch importable in the image", found.get("torch_error", "not importable"), False)
        ]
    accelerator = found.get("accelerator") or {}
    count = int(accelerator.get("device_count") or 0)
    devices = found.get("devices") or []
    if platform == "cpu":
        checks.append(
            _check(
                "torch is a CPU build",
                "torch.version.cuda and .hip both None",
                f"cuda={torch.get('cuda')}, hip={torch.get('hip')}",
                torch.get("cuda") is None and torch.get("hip") is None,
            )
        )
    else:
        kind, field = ("CUDA", "cuda") if platform == "cuda" else ("ROCm/HIP", "hip")
        other = "hip" if field == "cuda" else "cuda"
        built = torch.get(field)
        checks.append(
            _check(
                f"torch is a {kind} build",
                f"torch.version.{field} = {version}…" if version else f"torch.version.{field} set",
                f"torch {torch.get('version')}: cuda={torch.get('cuda')}, hip={torch.get('hip')}",
                bool(built)
                and not torch.get(other)
                and (version is None or str(built).startswith(version.split(".")[0])),
            )
        )
        visible = found.get("visible") or {}
        seen = (
            f"{len(visible.get('nvidia') or [])} /dev/nvidia* nodes"
            if platform == "cuda"
            else f"/dev/kfd {'present' if visible.get('kfd') else 'absent'}, {len(visible.get('dri_render') or [])} render nodes"
        )
        checks.append(
            _check(
                f"{'NVIDIA' if platform == 'cuda' else 'AMD'} GPU visible in the container",
                "at least 1 device",
                f"torch sees {count} device(s); {seen}; mapping: {mapping.description}",
                count > 0,
                found.get("cuda_error"),
            )
        )
        for device in devices:
            if device.get("arch_supported") is False:
                arch = device.get("gcn_arch") or f"sm_{str(device.get('capability', '')).replace('.', '')}"
                checks.append(
                    _check(
                        f"wheel has kernels for GPU {device.get('index')}",
                        f"{arch} in torch.cuda.get_arch_list()",
                        f"not in {found.get('arch_list')}",
                        False,
                        f"{device.get('name')}: the wheel was built without kernels for this GPU",
                    )
                )
    compute = found.get("compute")
    if compute:
        for op in ("matmul", "conv2d"):
            result = compute.get(op) or {}
            observed = result.get("error") or f"max |Δ| = {result.get('max_abs_diff', float('nan')):.3g}"
            checks.append(
                _check(
                    f"{op} on {compute.get('device')} matches float64",
                    f"|Δ| ≤ {compute.get('atol')} + {compute.get('rtol')}·|reference|",
                    observed,
                    bool(result.get("ok")),
                )
            )
    elif platform != "cpu" and count > 0:
        checks.append(_check("compute on the device", "matmul and conv2d ran", "no compute result", False))
    return checks


def device_stage(
    engine: Engine, loaded: LoadedDossier, image: ImageInfo, verdict: CompatVerdict, mapping: GpuMapping
) -> StageResult:
    started = time.monotonic()
    platform, version = loaded.model.system.platform, loaded.model.system.version
    if platform == "cuda" and verdict.status == "unsupported" and mapping.nvidia_gpus | bool(mapping.cdi_devices):
        # Starting a GPU container now would only surface the runtime's cryptic "unsatisfied condition".
        return _stage(
            "device",
            started,
            [],
            {"compatibility": verdict.model_dump()},
            error=StageError(step="compatibility", message=verdict.explanation),
        )
    spec = RunSpec(
        image=image.id,
        command=["python", "-I", "-c", probe_source("device.py")],
        # Under the sample's CPU knobs, so the capability it reports is the one the sample gets.
        environment={
            "ORCH_PROBE_EXPECT": json.dumps({"platform": platform, "version": version}),
            **cpu_knob_environment(loaded),
        },
        timeout_s=DEVICE_PROBE_TIMEOUT_S,
        labels={f"{LABEL_PREFIX}.probe": "device"},
        nvidia_gpus=mapping.nvidia_gpus,
        cdi_devices=mapping.cdi_devices,
        devices=mapping.devices,
        group_add=mapping.group_add,
    )
    outcome = engine.run(spec)
    if outcome.timed_out:
        return _stage(
            "device",
            started,
            [],
            {},
            error=StageError(
                step="device probe", message=f"no answer within {DEVICE_PROBE_TIMEOUT_S}s; the container was stopped"
            ),
        )
    found = None if outcome.oom_killed else _probe_json(outcome.stdout)
    if found is None:
        return _stage(
            "device",
            started,
            [],
            {},
            error=StageError(
                step="device probe",
                message=describe_exit(outcome, spec, "the probe only imports torch and runs two small operations"),
            ),
        )
    try:
        report = DeviceProbeReport.model_validate(found)
    except ValidationError as exc:
        return _stage(
            "device",
            started,
            [],
            {"gpu_mapping": mapping.description},
            error=StageError(step="device probe", message=mismatch_line(exc, "the device probe")),
        )
    facts: dict[str, Any] = {key: getattr(report, key) for key in DEVICE_FACTS}
    facts["gpu_mapping"] = mapping.description
    try:
        checks = device_checks(platform, version, found, mapping)
    except (AttributeError, TypeError, ValueError, KeyError):
        # The probe runs inside the image, which a compromised package controls: a report of the wrong
        # shape is a failed stage, not a traceback.
        return _stage(
            "device",
            started,
            [],
            {"gpu_mapping": mapping.description},
            error=StageError(step="device probe", message="printed a report that is not shaped as the probe's"),
        )
    return _stage("device", started, checks, facts)


# -- sample --------------------------------------------------------------------------------------------


def verify_fingerprints(loaded: LoadedDossier) -> list[Check]:
    """Inputs, data and weights are hashed on the host before anything runs; a mismatch stops the sample."""
    checks: list[Check] = []
    model = loaded.model
    items: list[tuple[str, str | None, str | None, str]] = [
        (f"input {item.path}", item.path, None, item.sha256) for item in model.expect.inputs
    ]
    items += [
        (f"{kind} {a.name}", a.path, a.uri, a.sha256)
        for kind, group in (("data", model.data), ("weights", model.weights))
        for a in group
    ]
    for label, path, uri, expected in items:
        if path is None:
            checks.append(
                _check(
                    f"{label} fingerprint",
                    f"sha256 {expected}",
                    f"remote ({uri}): fetch it to a local path first",
                    False,
                )
            )
            continue
        observed = file_sha256(loaded.resolve(path))
        checks.append(
            _check(
                f"{label} fingerprint",
                f"sha256 {expected}",  # in full: two hashes cut short can look the same
                f"sha256 {observed}",
                observed == expected,
                None if observed == expected else where_differ(expected, observed),
            )
        )
    return checks


def fingerprint_facts(checks: list[Check]) -> dict[str, dict[str, str]]:
    """Both hashes of every fingerprint check, for report.json's facts (what a script compares)."""
    return {
        check.name: {
            "expected": check.expected.removeprefix("sha256 "),
            "observed": check.observed.removeprefix("sha256 "),
        }
        for check in checks
    }


def _prepare_output(folder: Path) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    if os.geteuid() == 0:
        os.chown(folder, RUNTIME_UID, RUNTIME_UID)
    else:
        folder.chmod(0o777)  # the sample runs as uid 10001 inside the container


def sample_mounts(loaded: LoadedDossier, output: Path, meta: Path, site: Path) -> list[Mount]:
    model = loaded.model
    mounts = [Mount(loaded.resolve(item.path), f"/orch/input/{item.path}") for item in model.expect.inputs]
    for kind, group in (("data", model.data), ("weights", model.weights)):
        mounts += [Mount(loaded.resolve(a.path), f"/orch/{kind}/{a.name}") for a in group if a.path is not None]
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


def cpu_knob_environment(loaded: LoadedDossier) -> dict[str, str]:
    """The CPU knobs the dossier pins (determinism.cpu), as the environment torch and oneDNN read at start-up."""
    cpu = loaded.model.determinism.cpu
    return cpu.environment() if cpu is not None else {}


def sample_stage(
    engine: Engine, loaded: LoadedDossier, image: ImageInfo, mapping: GpuMapping, out: Path
) -> StageResult:
    from orchestrator.checks.sample import sample_checks

    started = time.monotonic()
    fingerprints = verify_fingerprints(loaded)
    if first_failure(fingerprints) is not None:
        return _stage("sample", started, fingerprints, {"ran": False, "fingerprints": fingerprint_facts(fingerprints)})
    output, meta, site = out / "sample-output", out / "sample-meta", out / "probe-site"
    _prepare_output(output)
    _prepare_output(meta)
    # Only sitecustomize.py goes on the sample's PYTHONPATH: the other probes' module names (device,
    # inventory) would shadow packages of the same name in the image.
    if site.exists():
        shutil.rmtree(site)
    site.mkdir()
    (site / "sitecustomize.py").write_text(probe_source("sitecustomize.py"), encoding="utf-8")
    site.chmod(0o755)
    expect = loaded.model.expect
    spec = RunSpec(
        image=image.id,
        command=expect.command,
        mounts=sample_mounts(loaded, output, meta, site),
        environment=sample_environment(loaded),
        timeout_s=expect.timeout_s,
        mem_limit=f"{expect.limits.memory_mib}m",
        labels={f"{LABEL_PREFIX}.probe": "sample"},
        nvidia_gpus=mapping.nvidia_gpus,
        cdi_devices=mapping.cdi_devices,
        devices=mapping.devices,
        group_add=mapping.group_add,
        shm_size="1g",
    )
    outcome = engine.run(spec)
    (out / "sample.log").write_text(
        outcome.stdout + ("\n--- stderr ---\n" + outcome.stderr if outcome.stderr else ""), encoding="utf-8"
    )
    facts: dict[str, Any] = {
        "command": list(expect.command),
        "exit_code": outcome.exit_code,
        "seconds": round(outcome.duration_s, 3),
        "output_folder": str(output),
        "log": str(out / "sample.log"),
        "fingerprints": fingerprint_facts(fingerprints),
    }
    if outcome.stdout_cut or outcome.stderr_cut:
        facts["log_cut_bytes"] = {"stdout": outcome.stdout_cut, "stderr": outcome.stderr_cut}
    meta_checks: list[Check] = []
    try:
        facts["determinism"] = read_output_json(meta, "determinism.json", META_MAX_BYTES)
    except OutputMissing:
        facts["determinism"] = "not applied (the sample started no Python process that imported the probe site)"
    except UnsafeOutput as exc:
        facts["determinism"] = "refused (see the failed check)"
        meta_checks.append(
            _check("determinism record", "a regular JSON file written by the probe site", f"refused: {exc}", False)
        )
    if outcome.timed_out:
        return _stage(
            "sample",
            started,
            fingerprints + meta_checks,
            facts,
            error=StageError(step="sample command", message=f"stopped at its timeout of {expect.timeout_s}s"),
        )
    if outcome.exit_code != 0:
        return _stage(
            "sample",
            started,
            fingerprints + meta_checks,
            facts,
            error=StageError(
                step="sample command",
                message=describe_exit(
                    outcome,
                    spec,
                    f"if the sample needs more, raise expect.limits.memory_mib in the dossier "
                    f"(now {expect.limits.memory_mib})",
                ),
            ),
        )
    return _stage("sample", started, fingerprints + meta_checks + sample_checks(loaded, output), facts)


def make_report(
    loaded: LoadedDossier, image: ReportImage | None, stages: dict[StageName, StageResult], notes: list[str]
) -> Report:
    model = loaded.model
    return Report(
        orch_version=__version__,
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        dossier=ReportDossier(
            name=model.name,
            path=str(loaded.path),
            identity=loaded.identity,
            variant=loaded.variant,
            platform=model.system.platform,
            backend_version=model.system.version,
        ),
        image=image,
        verdict=overall_verdict(stages),
        stages=stages,
        notes=notes,
    )


# -- the whole probe -----------------------------------------------------------------------------------


def run_probe(
    loaded: LoadedDossier,
    engine: Engine,
    options: ProbeOptions,
    *,
    host_facts: Callable[[], HostFacts] | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> Report:
    stage = on_stage or (lambda _: None)
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    image = resolve_image(engine, loaded, options)
    model = loaded.model
    notes: list[str] = []
    if loaded.variant:
        declared = loaded.reference_model.variant(loaded.variant)
        note = f"variant {loaded.variant!r}, declared in the dossier: {' '.join(declared.description.split())}"
        reference_platform = loaded.reference_model.system.platform
        if model.system.platform != reference_platform:
            note += f" It runs on {model.system.platform}, not the reference's {reference_platform}."
        notes.append(note)

    stage("image")
    image_result, inventory = image_stage(engine, loaded, image, out, built_in_this_run=options.built_in_this_run)
    host_result = device_result = sample_result = None
    if options.stop_after_failure and image_result.status == "failed":
        reason = "image stage failed: the stages after it are not run"
        host_result, device_result, sample_result = (not_run(n, reason) for n in ("host", "device", "sample"))
    if host_result is None:
        stage("host")
        host = host_facts() if host_facts else collect_host_facts(engine.info())
        host_result, verdict, mapping = host_stage(loaded, host, image, inventory)
        if options.stop_after_failure and host_result.status == "failed":
            reason = "host stage failed: the stages after it are not run"
            device_result, sample_result = not_run("device", reason), not_run("sample", reason)
    if device_result is None:
        stage("device")
        device_result = device_stage(engine, loaded, image, verdict, mapping)
    if sample_result is None and device_result.status == "failed":
        assert device_result.first_error is not None
        sample_result = not_run(
            "sample", f"device stage failed ({device_result.first_error.step}): no silent CPU fallback"
        )
    if sample_result is None:
        stage("sample")
        sample_result = sample_stage(engine, loaded, image, mapping, out)

    stages: dict[StageName, StageResult] = {
        "image": image_result,
        "host": host_result,
        "device": device_result,
        "sample": sample_result,
    }
    return make_report(loaded, ReportImage(ref=options.image or default_tag(loaded), id=image.id), stages, notes)


def stages_after_failed_build(loaded: LoadedDossier, record: BuildRecord) -> Report:
    """`orch rebuild` when the build failed: the image stage carries the failure, the others are not run."""
    assert record.failure is not None
    image = StageResult(
        name="image",
        status="failed",
        facts={"build_log": "build.log", "cache": record.cache.model_dump()},
        checks=record.checks,
        duration_s=record.durations_s.get("total", 0.0),
        first_error=StageError(step=record.failure.step or "build", message=record.failure.first_error),
    )
    reason = "image stage failed: there is no image to probe"
    stages: dict[StageName, StageResult] = {
        "image": image,
        "host": not_run("host", reason),
        "device": not_run("device", reason),
        "sample": not_run("sample", reason),
    }
    return make_report(loaded, None, stages, [])


def run_host_mode(
    platform: str,
    version: str | None,
    python: str,
    *,
    host_facts: Callable[[], HostFacts],
    run: Callable[..., Any],
) -> tuple[StageResult, StageResult]:
    """Host and device stages without any container: the device probe runs with `python` on this machine.

    For GPU machines that have torch but no Docker engine: the same probe, the same checks.
    """
    import subprocess

    host = host_facts()
    started = time.monotonic()
    env = {**os.environ, "ORCH_PROBE_EXPECT": json.dumps({"platform": platform, "version": version})}
    try:
        done = run(
            [python, "-c", probe_source("device.py")],
            capture_output=True,
            text=True,
            env=env,
            timeout=DEVICE_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        device = _stage(
            "device", started, [], {"python": python}, error=StageError(step="device probe", message=str(exc))
        )
    else:
        found = _probe_json(done.stdout)
        if found is None:
            device = _stage(
                "device",
                started,
                [],
                {"python": python},
                error=StageError(
                    step="device probe", message=f"exited {done.returncode}: {last_line(done.stderr) or 'no output'}"
                ),
            )
        else:
            mapping = GpuMapping(description="host mode: the host's own devices, no container")
            try:
                report = DeviceProbeReport.model_validate(found)
            except ValidationError as exc:
                message = mismatch_line(exc, "the device probe")
                device = _stage(
                    "device", started, [], {"python": python}, error=StageError(step="device probe", message=message)
                )
            else:
                facts = {key: getattr(report, key) for key in DEVICE_FACTS}
                facts["python"] = python
                device = _stage("device", started, device_checks(platform, version, found, mapping), facts)
    host_started = time.monotonic()
    checks: list[Check] = []
    if platform == "cuda":
        checks.append(
            _check(
                "NVIDIA driver present",
                "an NVIDIA kernel driver",
                host.nvidia.driver_version or "?" if host.nvidia else "no NVIDIA driver found",
                host.nvidia is not None,
            )
        )
    elif platform == "rocm":
        checks.append(
            _check(
                "AMD GPU driver present",
                "amdgpu with KFD",
                "present" if host.amd else "no AMD GPU driver found",
                host.amd is not None,
            )
        )
    else:
        checks.append(_check("no accelerator needed", "CPU platform", "CPU platform", True))
    host_result = _stage(
        "host",
        host_started,
        checks,
        {
            "kernel": host.kernel,
            "cpu": host.cpu.model_dump() if host.cpu else None,
            "nvidia": host.nvidia.model_dump() if host.nvidia else None,
            "amd": host.amd.model_dump() if host.amd else None,
            "notes": host.notes,
        },
    )
    return host_result, device
