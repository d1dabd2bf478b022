"""Determinism settings for the sample, applied inside every Python process the sample starts.

Mounted read-only at /orch/probe-site and put first on PYTHONPATH, so the interpreter imports it at
start-up, before the sample's own code: seeds, deterministic algorithms, TF32 and matmul precision from
ORCH_DETERMINISM (JSON). Environment-level settings (PYTHONHASHSEED, CUBLAS_WORKSPACE_CONFIG) are set on
the container. What was applied is written once to /orch/meta/determinism.json for the report.
"""

import json
import os


def _apply():
    settings = json.loads(os.environ.get("ORCH_DETERMINISM") or "{}")
    if not settings:
        return
    applied = {"seed": settings.get("seed"), "pid": os.getpid()}
    seed = int(settings.get("seed", 0))
    import random

    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
        applied["numpy_seeded"] = True
    except Exception:
        applied["numpy_seeded"] = False
    try:
        import torch

        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(bool(settings.get("deterministic_algorithms", True)))
        tf32 = bool(settings.get("tf32", False))
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.deterministic = bool(settings.get("deterministic_algorithms", True))
        torch.backends.cudnn.benchmark = False
        torch.set_float32_matmul_precision(settings.get("matmul_precision", "highest"))
        applied.update(
            torch=torch.__version__,
            deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
            tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
            tf32_cudnn=torch.backends.cudnn.allow_tf32,
            matmul_precision=torch.get_float32_matmul_precision(),
            cpu_capability=torch.backends.cpu.get_cpu_capability(),
            threads=torch.get_num_threads(),
        )
    except ImportError:
        applied["torch"] = None
    except Exception as exc:  # reported, never fatal to the sample
        applied["torch_error"] = f"{type(exc).__name__}: {exc}"
    knobs = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    applied["env"] = {k: os.environ.get(k) for k in ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", *knobs)}
    meta = os.environ.get("ORCH_META_DIR", "/orch/meta")
    try:
        fd = os.open(os.path.join(meta, "determinism.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return  # written by the first process already, or no meta folder (host mode without one)
    with os.fdopen(fd, "w") as handle:
        json.dump(applied, handle)


_apply()
