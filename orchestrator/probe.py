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

from orchestrator import __version__
from orchestrator.build import default_tag, read_record, run_inventory
from orchestrator.build_record import BuildRecord
from orchestrator.checks import Check, first_failure
from orchestrator.dossier.load import LoadedDossier, file_sha256
from orchestrator.engine import Engine, ImageInfo, Mount, RunSpec
from orchestrator.errors import BaseImageMissing
from orchestrator.host.collect import collect_host_facts
from orchestrator.host.compat import cuda_verdict, gpu_datacenter, parse_require_cuda, rocm_verdict
from orchestrator.host.facts import CompatVerdict, HostFacts
from orchestrator.image_checks import image_checks
from orchestrator.inventory import Inventory, diff_inventories
from orchestrator.plan import LABEL_PREFIX, RUNTIME_UID
from orchestrator.report.model import (
    Report,
    ReportDossier,
    ReportImage,
    StageError,
    StageName,
    StageResult,
    overall_verdict,
)
from orchestrator.resources import probe_source

DEVICE_PROBE_TIMEOUT_S = 600


@dataclass(frozen=True)
class ProbeOptions:
    out: Path
    image: str | None = None
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
    )


def not_run(name: StageName, reason: str) -> StageResult:
    return StageResult(name=name, status="not_run", reason=reason)


# -- image ---------------------------------------------------------------------------------------------


def resolve_image(engine: Engine, loaded: LoadedDossier, options: ProbeOptions) -> ImageInfo:
    ref = options.image or default_tag(loaded)
    image = engine.image(ref)
    if image is None:
        raise BaseImageMissing(
            f"image {ref} is not in the engine",
            hint="Build it first: `orch build DOSSIER --out DIR` (or `orch rebuild`), or pass --image REF.",
        )
    return image


def image_stage(
    engine: Engine, loaded: LoadedDossier, image: ImageInfo, out: Path
) -> tuple[StageResult, Inventory | None]:
    started = time.monotonic()
    inventory: Inventory | None = None
    source = "inventory probe"
    build_json = out / "build.json"
    if build_json.is_file():
        record = read_record(build_json)
        if record.image is not None and record.image.id == image.id and record.inventory is not None:
            inventory, source = record.inventory, "build.json of this image"
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
    }
    return _stage("image", started, checks, facts), inventory


# -- host ----------------------------------------------------------------------------------------------


def image_backend(image: ImageInfo, inventory: Inventory | None) -> tuple[str | None, str | None, str | None]:
    """(CUDA the image needs, NVIDIA_REQUIRE_CUDA, ROCm the image carries), from its env and inventory."""
    cuda = image.env.get("CUDA_VERSION") or (inventory.backend.torch_cuda if inventory else None)
    rocm = (inventory.backend.rocm if inventory else None) or (
        inventory.backend.torch_hip.split("-")[0] if inventory and inventory.backend.torch_hip else None
    )
    return cuda, image.env.get("NVIDIA_REQUIRE_CUDA"), rocm


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
        verdict = rocm_verdict(rocm, host.amd, host.kfd_present)
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
    for line in reversed([line for line in stdout.splitlines() if line.strip()]):
        try:
            value = json.loads(line)
        except ValueError:
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
    outcome = engine.run(
        RunSpec(
            image=image.id,
            command=["python", "-I", "-c", probe_source("device.py")],
            environment={"ORCH_PROBE_EXPECT": json.dumps({"platform": platform, "version": version})},
            timeout_s=DEVICE_PROBE_TIMEOUT_S,
            labels={f"{LABEL_PREFIX}.probe": "device"},
            nvidia_gpus=mapping.nvidia_gpus,
            cdi_devices=mapping.cdi_devices,
            devices=mapping.devices,
            group_add=mapping.group_add,
        )
    )
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
    found = _probe_json(outcome.stdout)
    if found is None:
        stderr = [line for line in outcome.stderr.splitlines() if line.strip()]
        return _stage(
            "device",
            started,
            [],
            {},
            error=StageError(
                step="device probe", message=f"exited {outcome.exit_code}: {stderr[-1] if stderr else 'no output'}"
            ),
        )
    facts = {
        key: found.get(key) for key in ("torch", "accelerator", "devices", "arch_list", "visible", "env", "compute")
    }
    facts["gpu_mapping"] = mapping.description
    return _stage("device", started, device_checks(platform, version, found, mapping), facts)


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
                    expected[:16] + "…",
                    f"remote ({uri}): fetch it to a local path first",
                    False,
                )
            )
            continue
        observed = file_sha256(loaded.resolve(path))
        checks.append(
            _check(f"{label} fingerprint", f"sha256 {expected[:16]}…", f"sha256 {observed[:16]}…", observed == expected)
        )
    return checks


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
    return env


def sample_stage(
    engine: Engine, loaded: LoadedDossier, image: ImageInfo, mapping: GpuMapping, out: Path
) -> StageResult:
    from orchestrator.sample_checks import sample_checks

    started = time.monotonic()
    fingerprints = verify_fingerprints(loaded)
    if first_failure(fingerprints) is not None:
        return _stage("sample", started, fingerprints, {"ran": False})
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
    outcome = engine.run(
        RunSpec(
            image=image.id,
            command=expect.command,
            mounts=sample_mounts(loaded, output, meta, site),
            environment=sample_environment(loaded),
            timeout_s=expect.timeout_s,
            labels={f"{LABEL_PREFIX}.probe": "sample"},
            nvidia_gpus=mapping.nvidia_gpus,
            cdi_devices=mapping.cdi_devices,
            devices=mapping.devices,
            group_add=mapping.group_add,
            shm_size="1g",
        )
    )
    (out / "sample.log").write_text(
        outcome.stdout + ("\n--- stderr ---\n" + outcome.stderr if outcome.stderr else ""), encoding="utf-8"
    )
    facts: dict[str, Any] = {
        "command": list(expect.command),
        "exit_code": outcome.exit_code,
        "seconds": round(outcome.duration_s, 3),
        "output_folder": str(output),
        "log": str(out / "sample.log"),
    }
    determinism = meta / "determinism.json"
    facts["determinism"] = (
        json.loads(determinism.read_text())
        if determinism.is_file()
        else "not applied (the sample started no Python process that imported the probe site)"
    )
    if outcome.timed_out:
        return _stage(
            "sample",
            started,
            fingerprints,
            facts,
            error=StageError(step="sample command", message=f"stopped at its timeout of {expect.timeout_s}s"),
        )
    if outcome.exit_code != 0:
        stderr = [line for line in outcome.stderr.splitlines() if line.strip()]
        return _stage(
            "sample",
            started,
            fingerprints,
            facts,
            error=StageError(
                step="sample command", message=f"exited {outcome.exit_code}: {stderr[-1] if stderr else 'no output'}"
            ),
        )
    return _stage("sample", started, fingerprints + sample_checks(loaded, output), facts)


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
    image_result, inventory = image_stage(engine, loaded, image, out)
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
            stderr = [line for line in done.stderr.splitlines() if line.strip()]
            device = _stage(
                "device",
                started,
                [],
                {"python": python},
                error=StageError(
                    step="device probe", message=f"exited {done.returncode}: {stderr[-1] if stderr else 'no output'}"
                ),
            )
        else:
            mapping = GpuMapping(description="host mode: the host's own devices, no container")
            facts = {
                key: found.get(key)
                for key in ("torch", "accelerator", "devices", "arch_list", "visible", "env", "compute")
            }
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
            "nvidia": host.nvidia.model_dump() if host.nvidia else None,
            "amd": host.amd.model_dump() if host.amd else None,
            "notes": host.notes,
        },
    )
    return host_result, device
