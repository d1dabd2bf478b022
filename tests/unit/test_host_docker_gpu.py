from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.host.docker_gpu import cdi_spec_devices, collect_docker_gpu, docker_gpu_facts, read_cdi_devices

# The shape `nvidia-ctk cdi generate` writes (default device-name strategy: index, UUID, and "all").
NVIDIA_SPEC = """\
---
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidia-modeset
  - path: /dev/nvidia-uvm
  - path: /dev/nvidiactl
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: GPU-4a8c1a7e-3c2d-5f4e-9b1a-0c2d3e4f5a6b
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: all
kind: nvidia.com/gpu
"""
# The shape `amd-ctk cdi generate --output=/etc/cdi/amd.json` writes.
AMD_SPEC = {
    "cdiVersion": "0.5.0",
    "kind": "amd.com/gpu",
    "devices": [
        {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/dri/renderD128"}, {"path": "/dev/kfd"}]}},
        {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/dri/renderD128"}, {"path": "/dev/kfd"}]}},
    ],
}
NVIDIA_DEVICES = [
    "nvidia.com/gpu=0",
    "nvidia.com/gpu=GPU-4a8c1a7e-3c2d-5f4e-9b1a-0c2d3e4f5a6b",
    "nvidia.com/gpu=all",
]


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("runtimes", "nvidia"),
    [(["io.containerd.runc.v2", "nvidia", "runc"], True), (["io.containerd.runc.v2", "runc"], False), ([], False)],
)
def test_nvidia_runtime(tmp_path: Path, runtimes: list[str], nvidia: bool) -> None:
    facts = docker_gpu_facts(runtimes, [], tmp_path)
    assert facts.nvidia_runtime is nvidia
    assert facts.runtimes == sorted(runtimes)


def test_devices_from_the_daemons_spec_dirs(tmp_path: Path) -> None:
    write(tmp_path / "etc/cdi/nvidia.yaml", NVIDIA_SPEC)
    write(tmp_path / "var/run/cdi/amd.json", json.dumps(AMD_SPEC))
    write(tmp_path / "etc/cdi/README.txt", "not a spec")
    facts = docker_gpu_facts(["runc"], ["/etc/cdi", "/var/run/cdi"], tmp_path)
    assert facts.cdi_devices == sorted(["amd.com/gpu=0", "amd.com/gpu=all", *NVIDIA_DEVICES])
    assert facts.cdi_spec_dirs == ["/etc/cdi", "/var/run/cdi"]


def test_only_the_listed_dirs_are_read(tmp_path: Path) -> None:
    write(tmp_path / "etc/cdi/nvidia.yaml", NVIDIA_SPEC)
    write(tmp_path / "var/run/cdi/amd.json", json.dumps(AMD_SPEC))
    assert docker_gpu_facts([], ["/var/run/cdi"], tmp_path).cdi_devices == ["amd.com/gpu=0", "amd.com/gpu=all"]


def test_defaults_when_the_daemon_lists_no_dirs(tmp_path: Path) -> None:
    write(tmp_path / "var/run/cdi/nvidia.yaml", NVIDIA_SPEC)
    facts, notes = collect_docker_gpu(["runc"], [], tmp_path)
    assert facts.cdi_devices == NVIDIA_DEVICES
    assert facts.cdi_spec_dirs == []  # what the daemon said: it lists none
    assert len(notes) == 1 and "CDI may be off in this daemon" in notes[0]


def test_no_specs_no_devices_no_notes(tmp_path: Path) -> None:
    assert collect_docker_gpu(["nvidia"], [], tmp_path) == (docker_gpu_facts(["nvidia"], [], tmp_path), [])
    assert docker_gpu_facts(["nvidia"], [], tmp_path).cdi_devices == []


def test_a_broken_spec_is_a_note_and_the_others_still_count(tmp_path: Path) -> None:
    write(tmp_path / "etc/cdi/broken.yaml", "kind: [unclosed\n")
    write(tmp_path / "etc/cdi/nokind.json", json.dumps({"devices": [{"name": "0"}]}))
    write(tmp_path / "etc/cdi/nvidia.yml", NVIDIA_SPEC)
    devices, notes = read_cdi_devices(["/etc/cdi"], tmp_path)
    assert devices == NVIDIA_DEVICES
    assert [note.split(":")[0] for note in notes] == ["CDI spec /etc/cdi/broken.yaml", "CDI spec /etc/cdi/nokind.json"]


def test_unquoted_numeric_names_count() -> None:
    assert cdi_spec_devices({"kind": "nvidia.com/gpu", "devices": [{"name": 0}, {"name": True}, {}]}) == [
        "nvidia.com/gpu=0"
    ]


def test_a_spec_must_be_a_mapping_with_a_kind() -> None:
    with pytest.raises(ValueError, match="mapping"):
        cdi_spec_devices(["kind"])
    with pytest.raises(ValueError, match="kind"):
        cdi_spec_devices({"kind": "gpu", "devices": []})
