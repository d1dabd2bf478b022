"""Where a night's cells run: a Docker endpoint's own daemon, a server's Podman, or a Slurm partition.

`target_from_spec` turns a plan's target entry (nightly/target_specs.py) into a `Target` (nightly/cell.py).
"""

from __future__ import annotations

from orchestrator.nightly.cell import Target
from orchestrator.nightly.target_specs import DockerTargetSpec, PodmanTargetSpec, SlurmTargetSpec


def target_from_spec(spec: DockerTargetSpec | PodmanTargetSpec | SlurmTargetSpec) -> Target:
    if isinstance(spec, DockerTargetSpec):
        from orchestrator.nightly.targets.docker_endpoint import DockerTarget

        return DockerTarget(spec)
    if isinstance(spec, PodmanTargetSpec):
        from orchestrator.nightly.targets.podman_endpoint import PodmanTarget

        return PodmanTarget(spec)
    from orchestrator.nightly.targets.slurm import SlurmTarget

    return SlurmTarget(spec)
