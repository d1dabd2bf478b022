"""Can a ROCm container reach the AMD GPUs? /dev/kfd, render nodes, the numeric video/render gids, and the
overrides that change what the runtime believes the GPU is. Pure: host facts and the environment in, findings out.
The KMD ↔ ROCm support window itself is `checks.rocm_verdict.rocm_verdict` (AMD's user/kernel-space matrix).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from orchestrator.model.host import HostFacts

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class AccessFinding:
    severity: Severity
    sentence: str


def amd_access_findings(host: HostFacts, env: Mapping[str, str]) -> list[AccessFinding]:
    findings: list[AccessFinding] = []
    gpus = host.amd.gpus if host.amd is not None else []
    if not host.kfd_present:
        findings.append(
            AccessFinding(
                "error", "/dev/kfd is missing: load the amdgpu driver's KFD; no ROCm container can reach a GPU."
            )
        )
    if gpus and not host.dri_render_nodes:
        findings.append(
            AccessFinding("error", "no /dev/dri/renderD* node: the GPUs cannot be mapped into a container.")
        )
    elif gpus and len(host.dri_render_nodes) < len(gpus):
        findings.append(
            AccessFinding(
                "warning",
                f"{len(gpus)} AMD GPU(s) in KFD but only {len(host.dri_render_nodes)} render node(s): "
                "some GPUs cannot be selected.",
            )
        )
    for group, gid in (("video", host.video_gid), ("render", host.render_gid)):
        if gid is None:
            findings.append(
                AccessFinding(
                    "warning",
                    f"no `{group}` group in /etc/group: the container gets no --group-add for it; "
                    "device access may be denied (HSA status 4104).",
                )
            )
    override = env.get("HSA_OVERRIDE_GFX_VERSION")
    if override:
        real = ", ".join(sorted({gpu.gfx_target for gpu in gpus})) or "unknown"
        findings.append(
            AccessFinding(
                "warning",
                f"HSA_OVERRIDE_GFX_VERSION={override} is set (GPU reports {real}): the runtime will load code objects "
                "built for another target. AMD does not support this; results may differ or crash, and the report "
                "records it.",
            )
        )
    return findings
