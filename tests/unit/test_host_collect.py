from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from orchestrator.engine import EngineInfo
from orchestrator.host.collect import collect_host_facts, parse_group_gids, render_nodes
from tests.unit.host_fakes import FakeRun

GROUP = """\
root:x:0:
video:x:44:alice
+nis-entry
render:x:993:alice,bob
video:x:1044:
docker:x:999:alice
"""
KFD = "sys/class/kfd/kfd/topology/nodes"
GPU_NODE = "gfx_target_version 90010\nvendor_id 4098\ndevice_id 29704\ndrm_render_minor 128\n"
CDI_SPEC = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: '0'\n- name: all\n"


def engine_info(runtimes: tuple[str, ...], cdi_spec_dirs: tuple[str, ...]) -> EngineInfo:
    return EngineInfo(
        endpoint="unix:///var/run/docker.sock",
        server_version="28.2.2",
        api_version="1.50",
        os="linux",
        runtimes=runtimes,
        cdi_spec_dirs=cdi_spec_dirs,
    )


def write(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture(autouse=True)
def _fixed_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # never the real NVML, even where it is installed
    monkeypatch.setattr(platform, "release", lambda: "6.8.0-49-generic")


def test_a_host_with_both_vendors(tmp_path: Path) -> None:
    write(tmp_path / "sys/module/nvidia/version", "550.54.14\n")
    write(
        tmp_path / "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n",
    )
    write(tmp_path / KFD / "0/properties", "gfx_target_version 0\nvendor_id 0\n")
    write(tmp_path / KFD / "1/properties", GPU_NODE)
    write(tmp_path / "sys/module/amdgpu/version", "6.8.5\n")
    write(tmp_path / "opt/rocm/.info/version", "6.2.0-66\n")
    write(tmp_path / "dev/kfd")
    for node in ("card0", "card1", "renderD129", "renderD128", "renderD1000"):
        write(tmp_path / "dev/dri" / node)
    write(tmp_path / "etc/group", GROUP)
    write(tmp_path / "etc/cdi/nvidia.yaml", CDI_SPEC)
    run = FakeRun()

    facts = collect_host_facts(engine_info(("nvidia", "runc"), ("/etc/cdi", "/var/run/cdi")), tmp_path, run)

    assert facts.kernel == "6.8.0-49-generic"
    assert facts.nvidia is not None
    assert (facts.nvidia.source, facts.nvidia.driver_version, facts.nvidia.kernel_module) == (
        "sysfs",
        "550.54.14",
        "proprietary",
    )
    assert facts.amd is not None and [g.gfx_target for g in facts.amd.gpus] == ["gfx90a"]
    assert (facts.amd.driver_version, facts.amd.rocm_version) == ("6.8.5", "6.2.0")
    assert facts.docker is not None and facts.docker.nvidia_runtime
    assert facts.docker.cdi_devices == ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]
    assert facts.kfd_present
    assert facts.dri_render_nodes == ["/dev/dri/renderD128", "/dev/dri/renderD129", "/dev/dri/renderD1000"]
    assert (facts.video_gid, facts.render_gid) == (44, 993)  # the first `video` line wins, as in getgrnam
    assert "nvidia-smi: not found" in facts.notes
    assert run.calls == [
        (
            "nvidia-smi",
            "--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version",
            "--format=csv,noheader,nounits",
        )
    ]


def test_a_cpu_only_host_without_engine_info(tmp_path: Path) -> None:
    facts = collect_host_facts(None, tmp_path, FakeRun())
    assert (facts.nvidia, facts.amd, facts.docker) == (None, None, None)
    assert not facts.kfd_present and facts.dri_render_nodes == []
    assert (facts.video_gid, facts.render_gid) == (None, None)
    assert any(note.startswith("NVIDIA: no driver found") for note in facts.notes)
    assert any(note.startswith("AMD: no GPU node") for note in facts.notes)
    assert "Docker: no engine information, the daemon's GPU support is not known" in facts.notes
    assert "/etc/group: not readable, the video/render gids are unknown" in facts.notes


def test_group_gids() -> None:
    assert parse_group_gids(GROUP, ("video", "render")) == {"video": 44, "render": 993}
    assert parse_group_gids("render:x:notanumber:\nvideo:x:44\n", ("video", "render")) == {"video": 44}
    assert parse_group_gids("", ("video",)) == {}


def test_render_nodes_ignore_other_names(tmp_path: Path) -> None:
    for node in ("renderD128", "renderDx", "card0"):
        write(tmp_path / "dev/dri" / node)
    assert render_nodes(tmp_path) == ["/dev/dri/renderD128"]
    assert render_nodes(tmp_path / "missing") == []


def test_rootless_podman_on_cgroup_v1_is_recorded_with_its_unenforced_limits(tmp_path: Path) -> None:
    from dataclasses import replace

    info = replace(engine_info(("crun", "runc"), ()), kind="podman", rootless=True, cgroup_version="1")
    facts = collect_host_facts(info, tmp_path, FakeRun())
    assert facts.docker is not None and facts.docker.engine_kind == "podman" and facts.docker.rootless
    assert facts.docker.cdi_enabled and facts.docker.cdi_spec_dirs == ["/etc/cdi", "/var/run/cdi"]
    assert "the containers' memory and pids limits are not enforced" in " ".join(facts.notes)
    v2 = collect_host_facts(replace(info, cgroup_version="2"), tmp_path, FakeRun())
    assert "not enforced" not in " ".join(v2.notes)
