"""Extension check probe: each compiled extension's operator, run on the device against its pure-PyTorch twin.

Runs inside the image (`python -I`, so PYTHONPATH is ignored: the extensions' folder and the app's folder
are put on sys.path here). ORCH_EXT_CHECKS holds the dossier's checks, ORCH_PROBE_EXPECT the platform.
Prints one JSON document; every failure is data: the extension, the first error line, and, on a GPU, the
device's arch (orch compares it with the archs the inventory read from the extension's object).
"""

import importlib
import json
import os
import sys
import traceback

EXT_DIR = "/opt/orch/ext"


def _first_error(exc):
    lines = traceback.format_exception_only(type(exc), exc)
    return " ".join(line.strip() for line in lines)[:500]


def run_check(torch, check, device):
    result = {"name": check["name"], "function": check["function"], "device": device}
    try:
        module = importlib.import_module(check["name"])
        operator = getattr(module, check["function"])
    except Exception as exc:  # the artefact is missing or does not load: say which and why
        result["error"] = "import: " + _first_error(exc)
        return result
    try:
        module_name, function_name = check["reference"].split(":")
        reference = getattr(importlib.import_module(module_name), function_name)
    except Exception as exc:
        result["error"] = "reference " + check["reference"] + ": " + _first_error(exc)
        return result
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(*shape, generator=generator).to(device) for shape in check["inputs"]]
    try:
        observed = operator(*inputs)
        if device != "cpu":
            torch.cuda.synchronize()
    except Exception as exc:
        result["error"] = "run: " + _first_error(exc)
        return result
    expected = reference(*inputs)
    if observed.shape != expected.shape:
        result["error"] = f"shape {list(observed.shape)}, the reference's is {list(expected.shape)}"
        return result
    diff = (observed.double() - expected.double()).abs()
    bound = check["atol"] + check["rtol"] * expected.double().abs()
    result["max_abs_diff"] = float(diff.max().item()) if diff.numel() else 0.0
    result["ok"] = bool((diff <= bound).all().item())
    return result


def main():
    sys.path[:0] = [EXT_DIR, os.getcwd()]
    checks = json.loads(os.environ.get("ORCH_EXT_CHECKS", "[]"))
    expect = json.loads(os.environ.get("ORCH_PROBE_EXPECT", "{}"))
    report = {"probe": "extension-check", "probe_version": 1, "results": []}
    try:
        import torch
    except Exception as exc:
        report["error"] = "torch: " + _first_error(exc)
        print(json.dumps(report))
        return
    device = "cpu"
    if expect.get("platform") in ("cuda", "rocm"):
        if not torch.cuda.is_available():
            report["error"] = "no GPU visible to torch"
            print(json.dumps(report))
            return
        device = "cuda:0"
        major, minor = torch.cuda.get_device_capability(0)
        report["device_arch"] = f"sm_{major}{minor}"
    for check in checks:
        report["results"].append(run_check(torch, check, device))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
