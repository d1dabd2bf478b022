"""Where a night's cells run: a Docker endpoint's own daemon, or a Slurm partition.

`target_from_spec` turns a plan's target entry (nightly/target_specs.py) into a `Target` (nightly/cell.py).
"""

from __future__ import annotations

from orchestrator.nightly.cell import Target
from orchestrator.nightly.target_specs import DockerTargetSpec, SlurmTargetSpec


def target_from_spec(spec: DockerTargetSpec | SlurmTargetSpec) -> Target:
    if isinstance(spec, DockerTargetSpec):
        from orchestrator.nightly.targets.docker_endpoint import DockerTarget

        return DockerTarget(spec)
    from orchestrator.nightly.targets.slurm import SlurmTarget

    return SlurmTarget(spec)
