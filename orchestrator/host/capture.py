"""A host capture: every raw output orch reads on a GPU host, in a folder a user can send (`orch doctor --capture`),
and the reader that diagnoses that folder anywhere (`orch doctor --from`).

Layout (format "orch-host-capture/1"):

    manifest.json           what was captured: commands (argv, exit status, stored stdout), files, env, logs
    root/…                  copies of the files orch reads, at their host paths (root/proc/driver/nvidia/version);
                            device nodes (/dev/kfd, /dev/dri/renderD*) as empty placeholder files
    commands/NN-name.txt    each command's stdout
    logs/*.txt              failure messages (a docker start error, a probe's stderr) to explain with the catalogue

Nothing secret: no environment dump — only the GPU/numerics variables named in CAPTURED_ENV, by name; /etc/group
reduced to its video and render lines without members; `docker info` reduced to runtimes and CDI spec dirs.
The collectors read the captured copy through the same `root` and `run` seams they use on a live host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Re-exported until orchestrator/cli and stages/probe.py import it from orchestrator.errors (issue 22 merge).
from orchestrator.errors import CaptureError
from orchestrator.host.amd import AMDGPU_MODULE_VERSION, KERNEL_RELEASE, KFD_NODES, ROCM_INFO_VERSION
from orchestrator.host.capture_intake import FORMAT, confined_spec_dir, take_in
from orchestrator.host.collect import DaemonGpuSettings, RawHost, host_facts, render_nodes
from orchestrator.host.docker_gpu import DEFAULT_CDI_SPEC_DIRS
from orchestrator.host.nvidia import PROC_DRIVER_VERSION, SYS_MODULE_VERSION, TEGRA_RELEASE_FILE, read_l4t_release
from orchestrator.host.nvidia_smi import FULL_QUERY_FIELDS, QUERY_FIELDS, parse_nvidia_smi_csv
from orchestrator.host.tools import Runner, run_tool, subprocess_runner
from orchestrator.model.host import HostFacts, NvidiaDriverFacts

#: The environment variables a capture records (by name, never a dump): GPU selection, the container toolkit's
#: requirement switches, ROCm overrides, scheduler allocations and the numerics knobs the report compares.
CAPTURED_ENV: tuple[str, ...] = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_REQUIRE_CUDA",
    "NVIDIA_DISABLE_REQUIRE",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "HSA_OVERRIDE_GFX_VERSION",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "CUBLAS_WORKSPACE_CONFIG",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)

#: Commands a capture runs (each optional: a missing tool is recorded as such).
CAPTURE_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("nvidia-smi",),
    ("nvidia-smi", "-q"),
    ("nvidia-smi", f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"),
    ("nvidia-smi", f"--query-gpu={','.join(FULL_QUERY_FIELDS)}", "--format=csv,noheader,nounits"),
    ("nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader,nounits"),
    ("amd-smi", "version"),
    ("rocm-smi", "--showdriverversion"),
    ("rocminfo",),
    ("docker", "info"),
)

#: The only `docker info` lines a capture keeps: the rest can name registries, proxies (with credentials) and
#: host paths that the diagnosis does not need.
DOCKER_INFO_KEEP: tuple[str, ...] = ("Runtimes:", "Default Runtime:", "CDI spec directories:", "Server Version:")

#: Files a capture copies (relative to /); KFD node properties are added by walking the topology.
CAPTURE_FILES: tuple[str, ...] = (
    PROC_DRIVER_VERSION,
    SYS_MODULE_VERSION,
    TEGRA_RELEASE_FILE,
    AMDGPU_MODULE_VERSION,
    ROCM_INFO_VERSION,
    KERNEL_RELEASE,
    "proc/cpuinfo",
)


# ---------------------------------------------------------------------------------------------- writing


def write_capture(
    target: Path,
    root: Path = Path("/"),
    run: Runner = subprocess_runner,
    environ: Mapping[str, str] | None = None,
    logs: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Capture this host into `target` (created; must be empty or absent). Returns the manifest."""
    target.mkdir(parents=True, exist_ok=True)
    if any(target.iterdir()):
        raise CaptureError(f"{target}: the capture folder must be empty")
    env = os.environ if environ is None else environ
    manifest: dict[str, Any] = {"format": FORMAT, "commands": [], "files": [], "devices": [], "logs": []}
    for number, argv in enumerate(CAPTURE_COMMANDS):
        manifest["commands"].append(_capture_command(target, number, argv, run))
    for relative in (*CAPTURE_FILES, *_kfd_files(root), *_cdi_files(root)):
        if _copy(root / relative, target / "root" / relative):
            manifest["files"].append("/" + relative)
    manifest["devices"] = _capture_devices(root, target)
    group = _group_lines(root)
    if group is not None:
        _write(target / "root/etc/group", group)
        manifest["files"].append("/etc/group (video and render lines only, members removed)")
    manifest["env"] = {name: env[name] for name in CAPTURED_ENV if name in env}
    for name, text in sorted((logs or {}).items()):
        stored = f"logs/{_safe(name)}.txt"
        _write(target / stored, text)
        manifest["logs"].append({"name": name, "file": stored})
    _write(target / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def _capture_command(target: Path, number: int, argv: Sequence[str], run: Runner) -> dict[str, Any]:
    entry: dict[str, Any] = {"argv": list(argv)}
    try:
        result = run(list(argv), capture_output=True, text=True, check=False, timeout=30)
    except FileNotFoundError:
        entry["missing"] = True
        return entry
    except (OSError, subprocess.TimeoutExpired) as error:
        entry["error"] = str(error)
        return entry
    stored = f"commands/{number:02d}-{_safe('_'.join(argv))[:60]}.txt"
    stdout = result.stdout or ""
    if tuple(argv[:2]) == ("docker", "info"):
        stdout = filter_docker_info(stdout)
    _write(target / stored, stdout)
    entry.update({"returncode": result.returncode, "stdout": stored})
    if result.stderr:
        entry["stderr_first_line"] = result.stderr.strip().splitlines()[0][:300] if result.stderr.strip() else ""
    return entry


def _kfd_files(root: Path) -> list[str]:
    nodes = root / KFD_NODES
    if not nodes.is_dir():
        return []
    found = []
    for properties in sorted(nodes.glob("*/properties")) + sorted(nodes.glob("*/mem_banks/*/properties")):
        found.append(str(properties.relative_to(root)))
    return found


def _cdi_files(root: Path) -> list[str]:
    found = []
    for directory in DEFAULT_CDI_SPEC_DIRS:
        folder = root / directory.lstrip("/")
        if folder.is_dir():
            found += [
                str(p.relative_to(root)) for p in sorted(folder.iterdir()) if p.suffix in (".yaml", ".yml", ".json")
            ]
    return found


def _capture_devices(root: Path, target: Path) -> list[str]:
    devices = []
    if (root / "dev/kfd").exists():
        devices.append("/dev/kfd")
    devices += render_nodes(root)
    for device in devices:
        _write(target / "root" / device.lstrip("/"), "")
    return devices


def _group_lines(root: Path) -> str | None:
    try:
        text = (root / "etc/group").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    kept = []
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[0] in ("video", "render"):
            kept.append(f"{fields[0]}:x:{fields[2]}:")
    return "\n".join(kept) + "\n"


def _copy(source: Path, destination: Path) -> bool:
    try:
        text = source.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    _write(destination, text)
    return True


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".part")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).strip("._") or "output"


# ---------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Capture:
    #: The private copy orch reads (capture_intake.py); `origin`, the folder the user gave.
    folder: Path
    manifest: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    origin: Path | None = None

    @property
    def root(self) -> Path:
        return self.folder / "root"

    def runner(self) -> Runner:
        """A `subprocess.run` stand-in answering from the captured commands; other tools are "not found"."""
        answers: dict[tuple[str, ...], tuple[int, str, str]] = {}
        for entry in self.manifest.get("commands", []):
            if entry.get("missing") or "stdout" not in entry:
                continue
            text = (self.folder / entry["stdout"]).read_text(encoding="utf-8", errors="replace")
            answers[tuple(entry["argv"])] = (int(entry.get("returncode", 0)), text, entry.get("stderr_first_line", ""))

        def replay(argv: Sequence[str], **_: Any) -> subprocess.CompletedProcess[str]:
            key = tuple(argv)
            if key not in answers:
                if any(captured[0] == argv[0] for captured in answers):
                    # The tool was on the host; this query of it was not captured (a hand-assembled capture).
                    return subprocess.CompletedProcess(list(argv), 1, "", "not in the capture")
                raise FileNotFoundError(argv[0])
            code, out, err = answers[key]
            return subprocess.CompletedProcess(list(argv), code, out, err)

        return replay

    def command_output(self, *argv: str) -> str | None:
        for entry in self.manifest.get("commands", []):
            if tuple(entry.get("argv", ())) == argv and "stdout" in entry:
                stored = str(entry["stdout"])
                return (self.folder / stored).read_text(encoding="utf-8", errors="replace")
        return None

    def failed_commands(self) -> list[tuple[list[str], int, str]]:
        """(argv, return code, output) of each captured command that failed or wrote to stderr: its output and
        the first line of its stderr, where a tool that cannot reach the driver says why."""
        failed = []
        for entry in self.manifest.get("commands", []):
            if "stdout" not in entry:
                continue
            returncode = int(entry.get("returncode", 0))
            stderr = str(entry.get("stderr_first_line", ""))
            if returncode == 0 and not stderr:
                continue
            stdout = (self.folder / str(entry["stdout"])).read_text(encoding="utf-8", errors="replace")
            failed.append(([str(arg) for arg in entry["argv"]], returncode, "\n".join(filter(None, (stdout, stderr)))))
        return failed

    def logs(self) -> dict[str, str]:
        return {
            entry["name"]: (self.folder / entry["file"]).read_text(encoding="utf-8", errors="replace")
            for entry in self.manifest.get("logs", [])
        }

    def l4t_release(self) -> str | None:
        return read_l4t_release(self.root)


def read_capture(folder: Path) -> Capture:
    """The capture at `folder`, taken in as untrusted input (host/capture_intake.py): its manifest validated,
    its files copied into a private folder the collectors read (removed when the `Capture` goes)."""
    manifest, copy = take_in(folder)
    env = {k: str(v) for k, v in manifest.get("env", {}).items() if k in CAPTURED_ENV}
    capture = Capture(folder=copy, manifest=manifest, env=env, origin=folder)
    weakref.finalize(capture, shutil.rmtree, copy, True)
    return capture


def capture_host(capture: Capture) -> RawHost:
    """The captured host as a `RawHost`: the copied tree, the recorded tool outputs (NVML off), the recorded
    `docker info`."""
    run = capture.runner()
    runtimes, named_dirs = parse_docker_info(run_tool(run, ["docker", "info"]).stdout)
    # Read under the copy's root, never on this host: a `..` in the captured text is refused.
    spec_dirs = [confined_spec_dir(name, "the captured `docker info`") for name in named_dirs]
    return RawHost(
        root=capture.root,
        run=run,
        kernel=(_read(capture.root / KERNEL_RELEASE) or "unknown").strip(),
        daemon=None if runtimes is None else DaemonGpuSettings(runtimes, spec_dirs),
        docker_unknown="Docker: the capture holds no `docker info` runtimes",
        use_nvml=False,
        rocminfo_fallback=True,
        origin_notes=(f"read from the host capture {capture.origin or capture.folder}",),
        nvidia_fallback=lambda nvidia, notes: _with_header_queries(capture, nvidia, notes),
    )


def facts_from_capture(capture: Capture) -> HostFacts:
    """HostFacts of the captured host, by the live path's one assembly (`host_facts`) over the copy."""
    return host_facts(capture_host(capture))


def filter_docker_info(text: str) -> str:
    """`docker info` reduced to the lines a GPU diagnosis needs (DOCKER_INFO_KEEP), and the lines that continue
    them (CDI spec directories are listed one per indented line)."""
    kept: list[str] = []
    keeping = False
    for line in text.splitlines():
        stripped = line.strip()
        if any(stripped.startswith(key) for key in DOCKER_INFO_KEEP):
            kept.append(line)
            keeping = stripped.startswith("CDI spec directories:")
        elif keeping and line.startswith("  ") and stripped.startswith("/"):
            kept.append(line)
        else:
            keeping = False
    return "\n".join(kept) + ("\n" if kept else "")


def parse_docker_info(text: str | None) -> tuple[list[str] | None, list[str]]:
    """Runtimes and CDI spec dirs from `docker info` text ("Runtimes: io.containerd.runc.v2 nvidia runc")."""
    if not text:
        return None, []
    runtimes: list[str] | None = None
    spec_dirs: list[str] = []
    in_cdi = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Runtimes:"):
            runtimes = stripped.removeprefix("Runtimes:").split()
            in_cdi = False
        elif stripped.startswith("CDI spec directories:"):
            in_cdi = True
        elif in_cdi and stripped.startswith("/"):
            spec_dirs.append(stripped)
        else:
            in_cdi = False
    return runtimes, spec_dirs


def _with_header_queries(
    capture: Capture, nvidia: NvidiaDriverFacts | None, notes: list[str]
) -> NvidiaDriverFacts | None:
    """GPUs from a captured `--query-gpu=… --format=csv` with its header row, when the standard queries gave none
    (a capture assembled by hand from what a user pasted keeps the field order they used)."""
    if nvidia is not None and nvidia.gpus:
        return nvidia
    for entry in capture.manifest.get("commands", []):
        argv = entry.get("argv", [])
        if not argv or argv[0] != "nvidia-smi" or "stdout" not in entry:
            continue
        if not any(arg.startswith("--query-gpu=") for arg in argv) or any("noheader" in arg for arg in argv):
            continue
        text = (capture.folder / entry["stdout"]).read_text(encoding="utf-8", errors="replace")
        lines = text.strip().splitlines()
        if len(lines) < 2:
            continue
        fields = [field.strip().split(" [")[0] for field in lines[0].split(",")]
        gpus, driver = parse_nvidia_smi_csv("\n".join(lines[1:]), fields)
        if not gpus:
            continue
        notes.append(f"GPUs read from the captured `{' '.join(argv)}` (with its header row)")
        if nvidia is None:
            return NvidiaDriverFacts(source="nvidia-smi", driver_version=driver, gpus=gpus)
        return nvidia.model_copy(update={"gpus": gpus, "driver_version": nvidia.driver_version or driver})
    return nvidia


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
