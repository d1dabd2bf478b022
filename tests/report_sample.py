"""A realistic report shared by the renderer unit tests and the golden files (importable as `tests.report_sample`).

A CUDA dossier checked on a CPU-only machine: the image builds and holds, the host has no NVIDIA
driver, torch sees no device, so the sample never runs. One user-controlled string (a label, an
entrypoint argument, the image's OS name) carries `<script>`, `&`, `|`, quotes and a backtick to prove every format escapes.
"""

from __future__ import annotations

from orchestrator.model.checks import Check
from orchestrator.model.report import Report, ReportDossier, ReportImage, StageError, StageResult

HOSTILE = '<script>alert("pwned")</script> Tom & Jerry\'s | `embeddings`'
IDENTITY = "3f9a1c2b7d4e" + "5a6b7c8d9e0f" * 4 + "0123"
IMAGE_ID = "sha256:" + "8d2e4f6a1b3c5d7e" * 4
DEVICE_ERROR = "expected an NVIDIA GPU; torch 2.14.1 (CUDA 13.0) sees 0 devices"
PACKAGES = [
    "certifi==2025.8.3",
    "filelock==3.19.1",
    "fsspec==2025.9.0",
    "jinja2==3.1.6",
    "markupsafe==3.0.2",
    "mpmath==1.3.0",
    "networkx==3.5",
    "numpy==2.3.3",
    "nvidia-cublas==13.0.0.19",
    "nvidia-cuda-runtime==13.0.48",
    "setuptools==80.9.0",
    "sympy==1.14.0",
    "torch==2.14.1+cu130",
    "typing-extensions==4.15.0",
]


def sample_report() -> Report:
    image = StageResult(
        name="image",
        status="passed",
        duration_s=3.42,
        checks=[
            Check(name="python version", expected="3.12", observed="3.12.9", passed=True),
            Check(
                name="lock installed exactly",
                expected="14 pins from requirements-cu130.lock",
                observed="all installed at the pinned version",
                passed=True,
            ),
            Check(name="pip check", expected="no broken requirements", observed="clean", passed=True),
            Check(
                name="entrypoint",
                expected=f"python -m app --title {HOSTILE}",
                observed=f"python -m app --title {HOSTILE}",
                passed=True,
                detail=f"argument from the dossier: {HOSTILE}",
            ),
        ],
        facts={
            "image": IMAGE_ID,
            "python": "3.12.9",
            "torch": "2.14.1+cu130",
            "torch_cuda": "13.0",
            "torch_hip": None,
            "packages": PACKAGES,
            "size_bytes": 4_831_205_376,
            "os": HOSTILE,  # PRETTY_NAME from the image's /etc/os-release: the image controls it
            # From build.json: the base's layers, then each step of the final stage (a LABEL adds 0 bytes).
            "layers": [
                {"step": "base image", "created_by": "ADD file:4a5b in /", "size_bytes": 116_000_000},
                {"step": "base image", "created_by": 'CMD ["bash"]', "size_bytes": 0},
                {
                    "step": "COPY --from=builder /opt/venv /opt/venv",
                    "created_by": "COPY dir:9c8d in /opt/venv",
                    "size_bytes": 4_715_000_000,
                },
                {"step": "COPY app /orch/app", "created_by": "COPY dir:1e2f in /orch/app", "size_bytes": 205_376},
                {"step": f"RUN echo {HOSTILE}", "created_by": f"RUN echo {HOSTILE}", "size_bytes": 1_000},
                {"step": "LABEL io.orch.version=0.1.0", "created_by": "LABEL io.orch.version=0.1.0", "size_bytes": 0},
            ],
        },
    )
    host = StageResult(
        name="host",
        status="failed",
        duration_s=0.21,
        first_error=StageError(step="nvidia driver", message="no NVIDIA driver found"),
        checks=[
            Check(
                name="NVIDIA driver present",
                expected=">= 580.65.06 (CUDA 13.0)",
                observed="no NVIDIA driver found",
                passed=False,
                detail="nvidia-smi: not found; /proc/driver/nvidia/version: missing",
            ),
            Check(
                name="Docker GPU support",
                expected="nvidia runtime or a CDI spec for nvidia.com/gpu",
                observed="runc only",
                passed=False,
            ),
        ],
        facts={
            "kernel": "6.8.0-57-generic",
            "nvidia": None,
            "amd": None,
            "docker": {
                "runtimes": ["io.containerd.runc.v2", "runc"],
                "nvidia_runtime": False,
                "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"],
                "cdi_devices": [],
            },
            "kfd_present": False,
            "notes": ["nvidia-smi: not found", "/proc/driver/nvidia/version: missing"],
        },
    )
    device = StageResult(
        name="device",
        status="failed",
        duration_s=7.93,
        first_error=StageError(step="torch.cuda", message=DEVICE_ERROR),
        checks=[
            Check(name="torch imports", expected="torch 2.14.1+cu130", observed="torch 2.14.1+cu130", passed=True),
            Check(
                name="GPU visible to torch",
                expected=">= 1 CUDA device",
                observed="0 devices",
                passed=False,
                detail="torch.cuda.is_available() is False",
            ),
        ],
        facts={
            "torch": {"version": "2.14.1+cu130", "cuda": "13.0", "hip": None, "cudnn": 91200},
            "accelerator": {"available": False, "device_count": 0},
            "devices": [],
            "env": {"NVIDIA_VISIBLE_DEVICES": "all"},
        },
    )
    sample = StageResult(name="sample", status="not_run", reason="device stage failed")
    return Report(
        orch_version="0.1.0",
        created="2026-03-14T09:26:53Z",
        dossier=ReportDossier(
            name="tiny-embeddings",
            path="examples/tiny-embeddings/dossier-cuda.yaml",
            identity=IDENTITY,
            variant=None,
            platform="cuda",
            backend_version="13.0",
        ),
        image=ReportImage(ref="orch/tiny-embeddings:3f9a1c2b7d4e", id=IMAGE_ID),
        verdict="failed",
        stages={"image": image, "host": host, "device": device, "sample": sample},
        notes=[f"dossier description: {HOSTILE}"],
    )
