"""Device probe: what torch sees inside the container, and a small real computation on the device.

Standard library at top level; torch is imported inside, and every failure is reported as data. Reads
the expectation from ORCH_PROBE_EXPECT (JSON: platform, version); prints one JSON document; exits 0
when it managed to report. Also runs on a host without Docker ("host mode") with the host's Python.

torch.version.cuda and torch.version.hip are recorded separately: on ROCm, torch answers through
torch.cuda too, so the API name proves nothing.
"""

import contextlib
import glob
import json
import os
import platform
import sys
import tempfile
import time
import warnings

PROBE_VERSION = 1
# Tolerances for device vs CPU results (float32, TF32 off): a few ulps of accumulated rounding over a
# 256-long dot product, with margin; a wrong kernel is off by orders of magnitude more.
RTOL, ATOL = 1e-4, 1e-4


def _visible_nodes():
    nodes = {
        "nvidia": sorted(glob.glob("/dev/nvidia[0-9]*")),
        "nvidiactl": os.path.exists("/dev/nvidiactl"),
        "kfd": os.path.exists("/dev/kfd"),
        "dri_render": sorted(glob.glob("/dev/dri/renderD*")),
    }
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
            nodes["proc_driver_nvidia"] = handle.readline().strip()
    except OSError:
        nodes["proc_driver_nvidia"] = None
    return nodes


def _env():
    keys = (
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "CUDA_VERSION",
        "NVIDIA_REQUIRE_CUDA",
        "CUBLAS_WORKSPACE_CONFIG",
        "ATEN_CPU_CAPABILITY",
        "ONEDNN_MAX_CPU_ISA",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    )
    return {key: os.environ.get(key) for key in keys if key in os.environ}


def _compute(torch, device):
    """A matmul (cuBLAS/hipBLAS) and a convolution (cuDNN/MIOpen) on `device`, compared with the CPU."""
    result = {"device": str(device), "rtol": RTOL, "atol": ATOL}
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(256, 256, generator=generator)
    b = torch.randn(256, 256, generator=generator)
    images = torch.randn(2, 3, 32, 32, generator=generator)
    kernels = torch.randn(8, 3, 3, 3, generator=generator)
    # The reference is the same computation in float64 on the CPU; the probe runs float32 on `device`.
    cases = (
        ("matmul", lambda d, t: a.to(d, t) @ b.to(d, t)),
        ("conv2d", lambda d, t: torch.nn.functional.conv2d(images.to(d, t), kernels.to(d, t), padding=1)),
    )
    for name, run in cases:
        started = time.perf_counter()
        try:
            reference = run("cpu", torch.float64)
            observed = run(device, torch.float32)
            if str(device).startswith("cuda"):
                torch.cuda.synchronize()
            observed = observed.cpu().double()
            diff = (observed - reference).abs()
            allowed = ATOL + RTOL * reference.abs()
            result[name] = {
                "ok": bool((diff <= allowed).all()) and bool(torch.isfinite(observed).all()),
                "max_abs_diff": float(diff.max()),
                "seconds": round(time.perf_counter() - started, 4),
            }
        except Exception as exc:  # a failed kernel is data: "no kernel image is available" and friends
            result[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return result


#: How much of what torch and the CUDA/HIP runtimes wrote to stderr the report keeps (its end).
STDERR_KEEP = 8000


class _Stderr:
    """What torch and the CUDA/HIP runtimes write to file descriptor 2 while the probe runs (C++ warnings, HIP
    errors), kept for the report and written back to stderr afterwards so nothing is lost."""

    def __enter__(self):
        self.text = ""
        try:
            sys.stderr.flush()
            self.file = tempfile.TemporaryFile()
            self.saved = os.dup(2)
            os.dup2(self.file.fileno(), 2)
        except OSError:
            self.file = None
        return self

    def __exit__(self, *exc):
        if self.file is None:
            return False
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        raw = self.file.read()
        self.file.close()
        self.text = raw.decode("utf-8", "replace")
        os.write(2, raw)
        return False


def main():
    # torch reports a too-old driver, a GPU it has no kernels for and a failed CUDA init as warnings or on
    # stderr ("The NVIDIA driver on your system is too old (found version 11040)"): keep both in the JSON,
    # where orch's failure catalogue explains them.
    with warnings.catch_warnings(record=True) as caught, _Stderr() as err:
        warnings.simplefilter("always")
        report = _probe()
    report["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught][:50]
    report["stderr"] = err.text[-STDERR_KEEP:]
    print(json.dumps(report))


def _probe():
    expect = json.loads(os.environ.get("ORCH_PROBE_EXPECT") or "{}")
    report = {
        "probe": "device",
        "probe_version": PROBE_VERSION,
        "expect": expect,
        "python": platform.python_version(),
        "visible": _visible_nodes(),
        "env": _env(),
    }
    try:
        import torch
    except Exception as exc:
        report["torch_error"] = f"{type(exc).__name__}: {exc}"
        return report
    report["torch"] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
    }
    try:
        report["torch"]["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception as exc:
        report["torch"]["cudnn"] = f"error: {exc!r}"
    try:
        available = torch.cuda.is_available()
        count = torch.cuda.device_count() if available else 0
    except Exception as exc:
        available, count = False, 0
        report["cuda_error"] = f"{type(exc).__name__}: {exc}"
    report["accelerator"] = {"available": available, "device_count": count}
    try:
        # The vector level of torch's own CPU kernels (DEFAULT, AVX2, AVX512, …), after ATEN_CPU_CAPABILITY.
        report["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception as exc:
        report["cpu_capability"] = f"error: {type(exc).__name__}: {exc}"
    try:
        report["arch_list"] = torch.cuda.get_arch_list()
    except Exception:
        report["arch_list"] = []
    devices = []
    for index in range(count):
        try:
            props = torch.cuda.get_device_properties(index)
            arch = getattr(props, "gcnArchName", None)
            capability = f"{props.major}.{props.minor}"
            devices.append(
                {
                    "index": index,
                    "name": props.name,
                    "capability": capability,
                    "gcn_arch": arch if report["torch"]["hip"] else None,
                    "total_memory": props.total_memory,
                    "multiprocessors": props.multi_processor_count,
                    # A wheel without kernels for this GPU fails at the first launch: say it before.
                    "arch_supported": _arch_supported(
                        report["arch_list"], capability, arch, bool(report["torch"]["hip"])
                    ),
                }
            )
        except Exception as exc:
            devices.append({"index": index, "error": f"{type(exc).__name__}: {exc}"})
    report["devices"] = devices
    platform_expected = expect.get("platform", "cpu")
    if platform_expected == "cpu":
        report["compute"] = _compute(torch, "cpu")
    elif available and count:
        report["compute"] = _compute(torch, "cuda:0")
    return report


def _arch_supported(arch_list, capability, gcn_arch, is_hip):
    if not arch_list:
        return None
    if is_hip:
        base = (gcn_arch or "").split(":")[0]
        return base in arch_list
    major, minor = capability.split(".")
    wanted = f"sm_{major}{minor}"
    # PTX for an older compute capability of the same major can be JIT-compiled by the driver.
    return wanted in arch_list or any(a.startswith("compute_" + major) for a in arch_list)


if __name__ == "__main__":
    main()
