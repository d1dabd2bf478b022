"""`orch doctor --capture` collection and the `--from` reader: every raw output, a manifest, nothing secret."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from orchestrator.host.capture import (
    CAPTURE_COMMANDS,
    CaptureError,
    facts_from_capture,
    filter_docker_info,
    parse_docker_info,
    read_capture,
    write_capture,
)
from tests.unit.host_fakes import FakeRun, ok

BANNER = "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4     |\n"
CSV = "0, NVIDIA H100 80GB HBM3, GPU-aaa, 00000000:1B:00.0, 81559, 550.54.15\n"
DOCKER_INFO = """Client:
 Version:    27.1.1
Server:
 Server Version: 27.1.1
 Runtimes: io.containerd.runc.v2 nvidia runc
 Default Runtime: runc
 HTTP Proxy: http://user:s3cret@proxy.example:3128
 Registry Mirrors:
  https://mirror.example/
 CDI spec directories:
  /etc/cdi
  /var/run/cdi
"""


def host_root(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    files = {
        "proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 2024\n",
        "sys/module/nvidia/version": "550.54.15\n",
        "proc/sys/kernel/osrelease": "6.8.0-45-generic\n",
        "proc/cpuinfo": "processor\t: 0\nmodel name\t: AMD EPYC 9654\nflags\t\t: avx2 avx512f\n",
        "etc/group": "root:x:0:\nvideo:x:44:alice,bob\nrender:x:993:alice\nsudo:x:27:alice\n",
        "etc/cdi/nvidia.yaml": "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n",
        "sys/class/kfd/kfd/topology/nodes/1/properties": "simd_count 304\ngfx_target_version 90402\nvendor_id 4098\n",
        "dev/kfd": "",
        "dev/dri/renderD128": "",
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def fake_run() -> FakeRun:
    return FakeRun(
        {
            ("nvidia-smi",): ok(BANNER),
            CAPTURE_COMMANDS[2]: ok(CSV),
            ("nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader,nounits"): ok("0, 9.0\n"),
            ("docker", "info"): ok(DOCKER_INFO),
        }
    )


def test_a_capture_round_trips_into_the_same_host_facts(tmp_path: Path) -> None:
    target = tmp_path / "capture"
    environ = {"CUDA_VISIBLE_DEVICES": "0", "HSA_OVERRIDE_GFX_VERSION": "9.4.2", "AWS_SECRET_ACCESS_KEY": "x"}
    manifest = write_capture(target, host_host := host_root(tmp_path), fake_run(), environ, {"probe": "boom"})
    assert host_host.is_dir()
    assert manifest["env"] == {"CUDA_VISIBLE_DEVICES": "0", "HSA_OVERRIDE_GFX_VERSION": "9.4.2"}
    assert "/dev/kfd" in manifest["devices"] and "/dev/dri/renderD128" in manifest["devices"]
    facts = facts_from_capture(read_capture(target))
    assert facts.nvidia is not None
    assert (facts.nvidia.driver_version, facts.nvidia.cuda_driver_version) == ("550.54.15", "12.4")
    assert facts.nvidia.gpus[0].compute_capability == "9.0"
    assert facts.amd is not None and facts.amd.gpus[0].gfx_target == "gfx942"
    assert facts.kfd_present and facts.dri_render_nodes == ["/dev/dri/renderD128"]
    assert (facts.video_gid, facts.render_gid) == (44, 993)
    assert facts.docker is not None and facts.docker.nvidia_runtime
    assert facts.kernel == "6.8.0-45-generic"
    assert read_capture(target).logs() == {"probe": "boom"}


def test_nothing_secret_is_captured(tmp_path: Path) -> None:
    target = tmp_path / "capture"
    write_capture(target, host_root(tmp_path), fake_run(), {"AWS_SECRET_ACCESS_KEY": "x"})
    everything = "\n".join(p.read_text() for p in target.rglob("*") if p.is_file())
    assert "s3cret" not in everything and "mirror.example" not in everything
    assert "AWS_SECRET_ACCESS_KEY" not in everything
    assert "alice" not in everything and "sudo" not in everything  # group members and other groups dropped


def test_docker_info_is_reduced_to_runtimes_and_cdi_dirs() -> None:
    kept = filter_docker_info(DOCKER_INFO)
    assert parse_docker_info(kept) == (["io.containerd.runc.v2", "nvidia", "runc"], ["/etc/cdi", "/var/run/cdi"])
    assert "Proxy" not in kept


def test_a_capture_folder_must_be_empty(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("")
    with pytest.raises(CaptureError, match="must be empty"):
        write_capture(tmp_path, host_root(tmp_path / "h"), fake_run(), {})


def test_reading_a_folder_that_is_not_a_capture_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="orch doctor --capture"):
        read_capture(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(CaptureError, match="format is not"):
        read_capture(tmp_path)


def test_a_manifest_cannot_point_outside_its_folder(tmp_path: Path) -> None:
    manifest = {"format": "orch-host-capture/1", "commands": [{"argv": ["nvidia-smi"], "stdout": "../../etc/passwd"}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CaptureError, match="not a plain relative path inside the capture folder"):
        read_capture(tmp_path)


def test_a_capture_and_the_live_host_it_was_taken_from_give_the_same_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`orch doctor --from` is the live path: one assembly (`host_facts`) over a live `RawHost` or a captured one."""
    from orchestrator.engine import EngineInfo
    from orchestrator.host import collect

    monkeypatch.setattr(collect.platform, "release", lambda: "6.8.0-45-generic")
    root, run = host_root(tmp_path), fake_run()
    runtimes, spec_dirs = parse_docker_info(DOCKER_INFO)
    assert runtimes is not None
    info = EngineInfo("unix:///x", "27.1.1", "1.46", "linux", tuple(runtimes), tuple(spec_dirs))
    # NVML is this test machine's, not the fake host's: the capture does without it, and so does this live read.
    live = collect.host_facts(dataclasses.replace(collect.live_host(info, root, run), use_nvml=False))
    target = tmp_path / "capture"
    write_capture(target, root, run)
    captured = facts_from_capture(read_capture(target))
    assert captured.model_dump(exclude={"notes"}) == live.model_dump(exclude={"notes"})
    assert captured.notes[0] == f"read from the host capture {target}"
    assert captured.notes[1:] == live.notes
