"""The checks `orch rebuild` and `orch probe` make before any build or container (issue 24).

A rebuild whose device stage cannot pass on this host would otherwise pull a base, download gigabytes of
CUDA wheels and build, only for the host stage to say "no driver". Two checks cost seconds and say it first:

- the dossier's fingerprints (the loader hashes every file it references anyway; `orch validate`'s check);
- the host verdict of `orch doctor`: the driver against the CUDA/ROCm the dossier (or its built image) needs,
  and whether the daemon can map the GPU. A CPU dossier always passes.

`--no-preflight` skips both: the build and probe then run, and the report shows where they fail (the device
stage's own failure on a CPU host, a fingerprint failure in the sample stage). `orch build` never preflights:
building a GPU image on a machine without a GPU is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine
from orchestrator.errors import HostCannotRun
from orchestrator.pipeline.doctor import Diagnosis, diagnose


def what_to_do(loaded: LoadedDossier, variant: str | None, reason: str = "") -> str:
    """The ways forward on a host that cannot run the dossier's GPU stages (the CPU variant once: the verdict's
    reason may name it already)."""
    ways = [
        f"run it on a host with the GPU it needs (`orch doctor {loaded.path.name}` there says whether it can)",
        "build the image here with `orch build` (no GPU needed) and probe it on a GPU host",
    ]
    if variant and f"--variant {variant}" not in reason:
        ways.append(
            f"run the dossier's declared CPU variant here: --variant {variant} (the report says it is a variant)"
        )
    ways.append("or pass --no-preflight to build and probe anyway and read the device stage's own failure")
    return "Next: " + "; ".join(ways) + "."


def check_host(
    engine: Engine, loaded: LoadedDossier, *, gpus: str | None, environ: Mapping[str, str], cpu_variant: str | None
) -> Diagnosis:
    """`orch doctor`'s verdict for this dossier on this host; raises HostCannotRun when it cannot run."""
    diagnosis = diagnose(engine, loaded, gpus=gpus, environ=environ)
    if diagnosis.can_run is False:
        status = f" ({diagnosis.compatibility.status})" if diagnosis.compatibility else ""
        raise HostCannotRun(
            f"this host cannot run {loaded.model.name} on its {diagnosis.platform} GPU{status}, so nothing was "
            f"built or started: {diagnosis.reason}",
            hint=what_to_do(loaded, cpu_variant, diagnosis.reason or ""),
        )
    return diagnosis
