"""What the Docker daemon offers for GPUs: the `nvidia` runtime, and the devices its CDI specs name.

CDI specs are files (`nvidia-ctk cdi generate` writes /etc/cdi/nvidia.yaml; toolkit ≥ 1.18 refreshes
/var/run/cdi/nvidia.yaml; `amd-ctk cdi generate` writes /etc/cdi/amd.json). A device is addressed as
`<kind>=<name>`, e.g. `nvidia.com/gpu=0` or `nvidia.com/gpu=all` (gpu-domain §3.3). The files are read
on this machine, so the facts describe a local daemon only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from orchestrator.model.host import DockerGpuFacts
from orchestrator.plan.specs import EngineKind

#: Where CDI looks when the daemon names no spec dirs (the CDI defaults: static specs, then generated ones).
DEFAULT_CDI_SPEC_DIRS: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
_SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def docker_gpu_facts(
    runtimes: Sequence[str], cdi_spec_dirs: Sequence[str], root: Path = Path("/"), engine_kind: EngineKind = "docker"
) -> DockerGpuFacts:
    return collect_docker_gpu(runtimes, cdi_spec_dirs, root, engine_kind)[0]


def collect_docker_gpu(
    runtimes: Sequence[str], cdi_spec_dirs: Sequence[str], root: Path = Path("/"), engine_kind: EngineKind = "docker"
) -> tuple[DockerGpuFacts, list[str]]:
    """The engine's GPU facts and notes on spec files that could not be read.

    Podman resolves CDI names from the default folders and lists none in its Docker-compatible `/info`; its
    runtimes are OCI runtimes (crun, runc), never an nvidia runtime orch could request GPUs from."""
    podman = engine_kind == "podman"
    searched = list(cdi_spec_dirs) or list(DEFAULT_CDI_SPEC_DIRS)
    devices, notes = read_cdi_devices(searched, root)
    if devices and not cdi_spec_dirs and not podman:
        # The daemon reports CDISpecDirs only with CDI enabled (a feature flag before Docker 28.2): specs on
        # disk do not mean this daemon will resolve `--device nvidia.com/gpu=all`.
        notes.append(
            f"CDI specs found in {', '.join(searched)}, but the daemon lists no CDI spec dirs: CDI may be off "
            "in this daemon (enabled by default since Docker 28.2)"
        )
    facts = DockerGpuFacts(
        runtimes=sorted(runtimes),
        nvidia_runtime="nvidia" in runtimes and not podman,
        cdi_spec_dirs=list(cdi_spec_dirs) or (list(DEFAULT_CDI_SPEC_DIRS) if podman else []),
        cdi_devices=devices,
        engine_kind=engine_kind,
        cdi_enabled=podman or bool(cdi_spec_dirs),
    )
    return facts, notes


def read_cdi_devices(spec_dirs: Sequence[str], root: Path = Path("/")) -> tuple[list[str], list[str]]:
    """Fully qualified CDI device names (`kind=name`) from the spec files in `spec_dirs`, sorted, unique."""
    devices: set[str] = set()
    notes: list[str] = []
    for spec_dir in spec_dirs:
        folder = root / spec_dir.lstrip("/")
        if not folder.is_dir():
            continue
        for path in sorted(p for p in folder.iterdir() if p.suffix in _SPEC_SUFFIXES and p.is_file()):
            try:
                devices.update(cdi_spec_devices(_load_spec(path)))
            except (OSError, ValueError, yaml.YAMLError) as error:
                notes.append(f"CDI spec {spec_dir.rstrip('/')}/{path.name}: not readable ({_short(error)})")
    return sorted(devices), notes


def cdi_spec_devices(spec: Any) -> list[str]:
    """`kind` + each `devices[].name` of one parsed CDI spec, as `kind=name` ("nvidia.com/gpu=all" included)."""
    if not isinstance(spec, dict):
        raise ValueError("a CDI spec is a mapping")
    kind = spec.get("kind")
    if not isinstance(kind, str) or "/" not in kind:
        raise ValueError(f"no valid 'kind' (vendor.com/class), got {kind!r}")
    names = []
    for device in spec.get("devices") or []:
        name = device.get("name") if isinstance(device, dict) else None
        # A hand-written spec may leave `name: 0` unquoted, which YAML reads as an int.
        if isinstance(name, int) and not isinstance(name, bool):
            name = str(name)
        if isinstance(name, str) and name:
            names.append(f"{kind}={name}")
    return names


def _load_spec(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)  # json.JSONDecodeError is a ValueError
    return yaml.safe_load(text)


def _short(error: Exception) -> str:
    return str(error).splitlines()[0][:160] if str(error) else type(error).__name__
