"""What the reference environment is: its interpreter and packages (with install sources), torch's
backend versions, the settings that change numerics, and the code's revision. Run on the reference host.

The interpreter is asked through orch's own inventory probe (standard library only; the same one the
rebuilt image answers, so the two inventories compare), plus `pip config list` for the indexes and a
guarded torch import for what only an import tells (cuDNN, the arch list).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.errors import BadInput
from orchestrator.resources import probe_source

#: Environment variables that change numerical results or which devices a run sees.
NUMERICS_PREFIXES = (
    "PYTORCH_", "TORCH_", "CUBLAS_", "CUDNN_", "NVIDIA_TF32", "ONEDNN_", "DNNL_", "MIOPEN_", "HIP", "ROCR_", "HSA_",
    "MKL_", "OPENBLAS_", "ATEN_",
)  # fmt: skip
NUMERICS_NAMES = ("OMP_NUM_THREADS", "CUDA_LAUNCH_BLOCKING", "PYTHONHASHSEED", "TF_ENABLE_ONEDNN_OPTS", "KMP_AFFINITY")
VISIBLE_SUFFIX = "_VISIBLE_DEVICES"

TORCH_SCRIPT = r"""
import json
try:
    import torch
except Exception as exc:
    print(json.dumps({"importable": False, "error": repr(exc)[:300]}))
else:
    out = {"importable": True, "version": torch.__version__,
           "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception as exc:
        out["cudnn"] = None
    # MIOpen, ROCm's cuDNN, next to it: only a ROCm build has one (torch.version.hip set), and torch exposes its
    # version under different names across releases; None when the build has none or tells none.
    out["miopen"] = None
    if out["hip"]:
        for ask in (getattr(getattr(torch.backends, "miopen", None), "version", None),
                    getattr(torch._C, "_miopen_version", None)):
            if callable(ask):
                try:
                    found = ask()
                except Exception:
                    continue
                if isinstance(found, (int, str)) and not isinstance(found, bool):
                    out["miopen"] = found
                    break
    try:
        out["arch_list"] = torch.cuda.get_arch_list()
    except Exception:
        out["arch_list"] = []
    out["cpu_capability"] = getattr(torch.backends.cpu, "get_cpu_capability", lambda: None)()
    print(json.dumps(out))
"""


def _run(command: list[str], cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False, cwd=cwd, timeout=timeout)
    except FileNotFoundError:
        raise BadInput(f"{command[0]}: no such program") from None
    except subprocess.TimeoutExpired:
        raise BadInput(f"{' '.join(command[:3])} ran for more than {timeout} s") from None


def observe_interpreter(python: Path) -> dict[str, Any]:
    """The inventory probe's document for `python`, with `pip config list` and torch's own answers."""
    if not python.is_file():
        raise BadInput(f"--python {python}: no such interpreter", hint="Give the reference venv's bin/python.")
    with tempfile.TemporaryDirectory(prefix="orch-record-") as scratch:
        probe = Path(scratch) / "inventory.py"
        probe.write_text(probe_source("inventory.py"), encoding="utf-8")
        done = _run([str(python), str(probe)])
    try:
        document: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        raise BadInput(
            f"--python {python}: the inventory probe printed no JSON (exit {done.returncode})",
            hint=(done.stderr.strip().splitlines() or ["is it a CPython interpreter?"])[-1],
        ) from None
    config = _run([str(python), "-m", "pip", "config", "list"])
    document["pip_config"] = config.stdout.splitlines() if config.returncode == 0 else []
    torch = _run([str(python), "-c", TORCH_SCRIPT])
    try:
        document["torch"] = json.loads(torch.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        document["torch"] = {"importable": False, "error": torch.stderr.strip()[-300:]}
    return document


#: A variable of the numerics table whose name says it holds a secret (`PYTORCH_HUB_TOKEN`): never recorded.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE|AUTH", re.IGNORECASE)
#: A value that looks like a credential whatever its name: a known token format, or one long run of
#: letters and digits (numerics settings are short words, numbers and `key:value` lists).
_SECRET_VALUE = re.compile(
    r"(?:hf|ghp|gho|ghs|ghu|github_pat|glpat|sk|xox[abpr])[_-][A-Za-z0-9_-]{10,}|AKIA[0-9A-Z]{16}"
    r"|(?=[A-Za-z0-9+/_=-]*[0-9])(?=[A-Za-z0-9+/_=-]*[A-Za-z])[A-Za-z0-9+/_=-]{32,}"
)
#: What a value that looks like a credential is recorded as.
WITHHELD = "<withheld: looks like a credential>"


def _numerics_name(key: str) -> bool:
    return key.startswith(NUMERICS_PREFIXES) or key in NUMERICS_NAMES or key.endswith(VISIBLE_SUFFIX)


def numerics_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of the numerics table (NUMERICS_PREFIXES, NUMERICS_NAMES, `*_VISIBLE_DEVICES`) and their
    values, except what may be a secret: a name that says so is left out, a value that looks like one is
    recorded as WITHHELD (`withheld_numerics` names both, for the record's notes)."""
    return {
        key: WITHHELD if _SECRET_VALUE.search(value) else value
        for key, value in sorted(environ.items())
        if _numerics_name(key) and not _SECRET_NAME.search(key)
    }


def withheld_numerics(environ: Mapping[str, str]) -> list[str]:
    """The numerics variables `numerics_environment` left out or withheld, by name (their values never shown)."""
    return [
        key
        for key, value in sorted(environ.items())
        if _numerics_name(key) and (_SECRET_NAME.search(key) or _SECRET_VALUE.search(value))
    ]


def code_revision(code: Path) -> dict[str, Any]:
    """git commit, whether the tree is dirty and the hash of its diff, and the remote (credentials redacted later)."""
    head = _run(["git", "-C", str(code), "rev-parse", "HEAD"])
    if head.returncode != 0:
        return {"git": False, "note": "not a git work tree: the code is fingerprinted by its files only"}
    status = _run(["git", "-C", str(code), "status", "--porcelain", "--", "."])
    diff = subprocess.run(
        ["git", "-C", str(code), "diff", "HEAD", "--binary", "--", "."], capture_output=True, check=False
    )
    untracked = [line[3:] for line in status.stdout.splitlines() if line.startswith("??")]
    sha = hashlib.sha256(diff.stdout)
    for name in sorted(untracked):
        sha.update(name.encode())
    remote = _run(["git", "-C", str(code), "remote", "get-url", "origin"])
    dirty = bool(status.stdout.strip())
    return {
        "git": True,
        "commit": head.stdout.strip(),
        "dirty": dirty,
        "diff_sha256": sha.hexdigest() if dirty else None,
        "untracked": untracked,
        "remote": remote.stdout.strip() if remote.returncode == 0 else None,
    }


def host_facts() -> dict[str, Any]:
    """OS, architecture, CPU and GPU driver facts through the collectors `orch doctor` uses (no engine needed)."""
    import platform

    from orchestrator.host.collect import collect_host_facts

    facts = collect_host_facts(None).model_dump(mode="json")
    facts["machine"] = platform.machine()
    facts["os"] = _os_release()
    facts["notes"] = [note for note in facts.get("notes", []) if not note.startswith("Docker:")]
    return facts


def _os_release() -> dict[str, str]:
    try:
        text = Path("/etc/os-release").read_text(encoding="utf-8")
    except OSError:
        return {}
    pairs = (line.partition("=") for line in text.splitlines())
    return {key: value.strip('"') for key, _, value in pairs if key in ("ID", "VERSION_ID", "PRETTY_NAME")}


def environ_now() -> dict[str, str]:
    return dict(os.environ)
