"""Realistic runs for `orch compare` tests (importable as `tests.compare_sample`).

A `Run` is the handful of facts that differ between two runs of tiny-embeddings; `make_report` and
`make_record` turn it into the `report.json` and `build.json` that `orch rebuild` writes, with the facts
shaped as `orchestrator.stages.probe` and `orchestrator.stages.build` shape them. The defaults are the CPU reference
(examples/tiny-embeddings/dossier.yaml); `cuda_reference()` and `cpu_variant_of_cuda()` are the CUDA
dossier and its declared `cpu` variant.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.model.build_record import (
    BaseImageRef,
    BuildRecord,
    CacheStats,
    CodeRef,
    ContextRef,
    DossierRef,
    ImageRef,
    WheelRef,
)
from orchestrator.model.checks import Check
from orchestrator.model.environment import ENVIRONMENT_FILE, EnvironmentFile, EnvironmentSummary, fold_digest
from orchestrator.model.inventory import BackendFacts, Inventory, PipCheck
from orchestrator.model.report import Report, ReportDossier, ReportImage, StageError, StageResult, overall_verdict
from tests.paths import EXAMPLES

DOSSIERS = EXAMPLES / "tiny-embeddings"

CPU_FREEZE = (
    "filelock==4.3.1",
    "fsspec==2026.9.0",
    "jinja2==3.1.6",
    "markupsafe==3.0.4",
    "mpmath==1.3.0",
    "networkx==3.6.1",
    "numpy==2.4.6",
    "pip==25.2",
    "setuptools==84.2.1",
    "sympy==1.14.0",
    "torch==2.13.0+cpu",
    "typing-extensions==4.16.0",
)
CUDA_FREEZE = (
    "filelock==3.16.1",
    "fsspec==2024.12.0",
    "jinja2==3.1.5",
    "markupsafe==3.0.2",
    "mpmath==1.3.0",
    "networkx==3.4.2",
    "numpy==2.2.1",
    "nvidia-cublas-cu12==12.4.5.8",
    "nvidia-cuda-runtime-cu12==12.4.127",
    "nvidia-cudnn-cu12==9.1.0.70",
    "pip==25.2",
    "sympy==1.13.1",
    "torch==2.6.0+cu124",
    "triton==3.2.0",
    "typing-extensions==4.12.2",
)


#: A few installed files, as the inventory probe lists them (a link's target hashed, prefixed `link:`).
ENVIRONMENT = (
    ("/opt/app/embed.py", "a0" * 32),
    ("/opt/venv/bin/python", "link:" + "b1" * 32),
    ("/opt/venv/lib/python3.11/site-packages/numpy/__init__.py", "c2" * 32),
    ("/opt/venv/lib/python3.11/site-packages/numpy/__pycache__/__init__.cpython-311.pyc", "d3" * 32),
    ("/opt/venv/lib/python3.11/site-packages/torch/__init__.py", "e4" * 32),
)


@dataclass(frozen=True)
class Run:
    name: str = "tiny-embeddings"
    dossier: Path = DOSSIERS / "dossier.yaml"
    identity: str = "a1" * 32
    variant: str | None = None
    platform: str = "cpu"
    version: str | None = None
    image_id: str = "sha256:" + "1b" * 32
    python: str = "3.11.2"
    freeze: tuple[str, ...] = CPU_FREEZE
    torch: str = "2.13.0+cpu"
    torch_cuda: str | None = None
    cuda_toolkit: str | None = None
    nvidia_driver: str | None = None  # the host's; None: no NVIDIA driver
    devices: tuple[str, ...] = ()
    compute_device: str = "cpu"
    matmul_diff: float = 1.9e-05
    conv2d_diff: float = 3.1e-06
    cosine: float = 0.99999994
    cosine_min: float = 0.99999
    sample_bytes: int = 896
    #: The image's installed files (path → sha256), folded into its environment digest.
    environment: tuple[tuple[str, str], ...] = ENVIRONMENT


def environment_of_run(run: Run) -> EnvironmentFile:
    files = dict(run.environment)
    summary = EnvironmentSummary(
        digest=fold_digest(files),
        files=len(files),
        roots=["/opt/venv", "/opt/app"],
        normalised={"source mtime in timestamp-based __pycache__/*.pyc": 1},
    )
    return EnvironmentFile(summary=summary, files=files)


def cuda_reference() -> Run:
    return Run(
        name="tiny-embeddings-cuda",
        dossier=DOSSIERS / "dossier-cuda.yaml",
        identity="c0" * 32,
        platform="cuda",
        version="12.4",
        image_id="sha256:" + "2c" * 32,
        python="3.11.11",
        freeze=CUDA_FREEZE,
        torch="2.6.0+cu124",
        torch_cuda="12.4",
        cuda_toolkit="12.4.1",
        nvidia_driver="550.54.15",
        devices=("NVIDIA H100 80GB HBM3",),
        compute_device="cuda:0",
        matmul_diff=2.4e-05,
        conv2d_diff=4.8e-06,
        cosine=0.999998,
        cosine_min=0.9999,
    )


def cpu_variant_of_cuda() -> Run:
    """The CUDA dossier's declared `cpu` variant, run on a machine without an NVIDIA GPU."""
    return replace(
        cuda_reference(),
        identity="5e" * 32,
        variant="cpu",
        platform="cpu",
        version=None,
        image_id="sha256:" + "3d" * 32,
        python="3.11.2",
        freeze=CPU_FREEZE,
        torch="2.13.0+cpu",
        torch_cuda=None,
        cuda_toolkit=None,
        nvidia_driver=None,
        devices=(),
        compute_device="cpu",
        matmul_diff=1.9e-05,
        conv2d_diff=3.1e-06,
        cosine=0.9999997,
    )


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _stage(name: str, checks: list[Check], facts: dict[str, object], duration: float) -> StageResult:
    failed = next((check for check in checks if not check.passed), None)
    error = (
        StageError(step=failed.name, message=f"expected {failed.expected}, observed {failed.observed}")
        if failed
        else None
    )
    return StageResult.model_validate(
        {
            "name": name,
            "status": "failed" if failed else "passed",
            "facts": facts,
            "checks": checks,
            "duration_s": duration,
            "first_error": error,
        }
    )


def make_report(run: Run) -> Report:
    image = _stage(
        "image",
        [
            Check(
                name="image built from this dossier",
                expected=f"identity {run.identity[:12]}",
                observed=f"identity {run.identity[:12]}",
                passed=True,
            ),
            Check(name="pip check", expected="no broken requirements", observed="clean", passed=True),
        ],
        {
            "image": run.image_id,
            "tags": [f"orch/{run.name}:{run.identity[:12]}"],
            "size_bytes": 1_204_311_552,
            "inventory_source": "build.json of this image",
            "python": run.python,
            "torch": run.torch,
            "torch_cuda": run.torch_cuda,
            "torch_hip": None,
            "cuda_toolkit": run.cuda_toolkit,
            "rocm": None,
            "os": "Debian GNU/Linux 12 (bookworm)",
            "packages": len(run.freeze),
            "os_packages": 118,
            "environment": environment_of_run(run).summary,
        },
        2.1,
    )
    nvidia = (
        {
            "source": "nvml",
            "driver_version": run.nvidia_driver,
            "cuda_driver_version": "12.4",
            "kernel_module": "open",
            "gpus": [{"index": i, "name": name, "compute_capability": "9.0"} for i, name in enumerate(run.devices)],
        }
        if run.nvidia_driver
        else None
    )
    host_checks = (
        [Check(name="no accelerator needed", expected="CPU platform", observed="CPU platform", passed=True)]
        if run.platform == "cpu"
        else [
            Check(
                name="NVIDIA driver present",
                expected="an NVIDIA kernel driver",
                observed=f"{run.nvidia_driver} (nvml), {len(run.devices)} GPU(s)" if run.nvidia_driver else "none",
                passed=run.nvidia_driver is not None,
            )
        ]
    )
    host = _stage(
        "host",
        host_checks,
        {"kernel": "6.8.0-57-generic", "nvidia": nvidia, "amd": None, "docker": None, "kfd_present": False},
        0.2,
    )
    compute = {
        "device": run.compute_device,
        "rtol": 1e-4,
        "atol": 1e-4,
        "matmul": {"ok": True, "max_abs_diff": run.matmul_diff, "seconds": 0.01},
        "conv2d": {"ok": True, "max_abs_diff": run.conv2d_diff, "seconds": 0.01},
    }
    device_checks = [
        Check(
            name=f"matmul on {run.compute_device} matches float64",
            expected="|Δ| ≤ 0.0001 + 0.0001·|reference|",
            observed=f"max |Δ| = {run.matmul_diff:.3g}",
            passed=True,
        ),
    ]
    device = _stage(
        "device",
        device_checks,
        {
            "torch": {"version": run.torch, "cuda": run.torch_cuda, "hip": None},
            "accelerator": {"available": bool(run.devices), "device_count": len(run.devices)},
            "devices": [{"index": i, "name": name, "capability": "9.0"} for i, name in enumerate(run.devices)],
            "compute": compute,
        },
        4.2,
    )
    sample = _stage(
        "sample",
        [
            Check(
                name="input sample/sample.jsonl fingerprint",
                expected="sha256 3fc49cc507b286d7…",
                observed="sha256 3fc49cc507b286d7…",
                passed=True,
            ),
            Check(
                name="embeddings: written",
                expected="embeddings.npy (npy)",
                observed=f"{run.sample_bytes} bytes",
                passed=True,
            ),
            Check(name="embeddings: shape", expected="[12, 16]", observed="[12, 16]", passed=True),
            Check(name="embeddings: dtype", expected="float32", observed="float32", passed=True),
            Check(
                name="embeddings: cosine vs reference/embeddings.npy",
                expected=f"cosine ≥ {_fmt(run.cosine_min)} for every row",
                observed=f"min cosine = {_fmt(run.cosine)} (row 'q-07')",
                passed=run.cosine >= run.cosine_min,
            ),
        ],
        {"command": ["python", "embed.py"], "exit_code": 0, "seconds": 1.3},
        1.9,
    )
    stages = {"image": image, "host": host, "device": device, "sample": sample}
    return Report(
        orch_version="0.1.0",
        created="2026-03-14T09:26:53Z",
        dossier=ReportDossier(
            name=run.name,
            path=str(run.dossier),
            identity=run.identity,
            variant=run.variant,
            platform=run.platform,
            backend_version=run.version,
        ),
        image=ReportImage(ref=f"orch/{run.name}:{run.identity[:12]}", id=run.image_id),
        verdict=overall_verdict(stages),
        stages=stages,
    )


def make_record(run: Run) -> BuildRecord:
    labels = {
        "io.orch.dossier.identity": run.identity,
        "io.orch.dossier.name": run.name,
        "io.orch.platform": run.platform,
        "io.orch.backend.version": run.version or "none",
        "io.orch.python.version": "3.11",
    }
    if run.variant:
        labels["io.orch.variant"] = run.variant
    return BuildRecord(
        orch_version="0.1.0",
        status="passed",
        dossier=DossierRef(name=run.name, path=str(run.dossier), identity=run.identity, variant=run.variant),
        image=ImageRef(
            tag=f"orch/{run.name}:{run.identity[:12]}", id=run.image_id, labels=labels, size_bytes=1_204_311_552
        ),
        base_image=BaseImageRef(ref="orch/debian-python:bookworm", id="sha256:" + "9e" * 32, digest=None),
        context=ContextRef(
            digest="4f" * 32,
            install_mode="wheelhouse",
            network="none",
            ca_bundle=False,
            wheels=[WheelRef(file="numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", sha256="89" * 32)],
        ),
        code=CodeRef(kind="local", source="app", revision=None, dirty=False, dirty_diff_sha256=None, variant=None),
        failure=None,
        cache=CacheStats(steps=14, cached=14, rebuilt=[]),
        durations_s={"build": 3.2, "inventory": 1.1, "total": 4.3},
        checks=[Check(name="pip check", expected="no broken requirements", observed="clean", passed=True)],
        inventory=Inventory(
            python_version=run.python,
            python_executable="/opt/venv/bin/python",
            libc="glibc 2.36",
            pip_freeze=list(run.freeze),
            pip_check=PipCheck(ok=True, lines=[]),
            pip_inspect=None,
            os_release={"PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)"},
            os_package_manager="dpkg",
            os_packages={"libc6": "2.36-9+deb12u10"},
            backend=BackendFacts(
                cuda_toolkit=run.cuda_toolkit, torch=run.torch, torch_cuda=run.torch_cuda, torch_hip=None
            ),
            environment=environment_of_run(run).summary,
        ),
        inventory_diff=None,
    )


def write_run(run: Run, folder: Path, *, report: bool = True, record: bool = True) -> Path:
    """The files `orch rebuild` leaves in its output folder (report.json and build.json)."""
    folder.mkdir(parents=True, exist_ok=True)
    if report:
        (folder / "report.json").write_text(make_report(run).model_dump_json(indent=2) + "\n", encoding="utf-8")
    if record:
        (folder / "build.json").write_text(make_record(run).model_dump_json(indent=2) + "\n", encoding="utf-8")
    if report or record:
        listed = environment_of_run(run)
        (folder / ENVIRONMENT_FILE).write_text(listed.model_dump_json(indent=1) + "\n", encoding="utf-8")
    return folder
