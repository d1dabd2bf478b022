"""`orch doctor`: can this machine run this dossier's image on its GPU? Host facts only, no sample."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.checks.failures import explanations_for_report, unexplained
from orchestrator.checks.host_layer import (
    ImageNeeds,
    compat_verdict,
    cpu_variant_of,
    driver_fits,
    gpu_mapped,
    image_needs,
)
from orchestrator.dossier.load import LoadedDossier
from orchestrator.engine import Engine, EngineInfo
from orchestrator.host.capture import Capture
from orchestrator.host.collect import collect_host_facts
from orchestrator.model.host import CompatVerdict, HostFacts
from orchestrator.model.platform import Platform
from orchestrator.plan.build import default_tag
from orchestrator.plan.run import plan_gpu_mapping
from orchestrator.stages.probe import gpu_selection


class Diagnosis(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: HostFacts
    dossier: str | None = None
    platform: Platform | None = None
    image: str | None = None
    compatibility: CompatVerdict | None = None
    gpu_mapping: str | None = None
    can_run: bool | None = None
    reason: str | None = None
    #: Failures found in a host capture's logs and failed commands, explained by the failure catalogue
    #: (data/failures.json), or named as unknown (id "unknown") with their raw text.
    explanations: list[dict[str, str]] = Field(default_factory=list)


def diagnose(
    engine: Engine | None,
    loaded: LoadedDossier | None,
    *,
    host_facts: Callable[[EngineInfo | None], HostFacts] | None = None,
    gpus: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Diagnosis:
    """`host_facts` reads this machine (default: `collect_host_facts`, looked up at call time), or a host
    capture (`orch doctor --from`). `engine` None: no daemon to ask (a capture read elsewhere): the image is
    taken as not built. `gpus`/`environ`: the GPU selection, as for `orch probe --gpus`."""
    host = (host_facts or collect_host_facts)(engine.info() if engine is not None else None)
    if loaded is None:
        return Diagnosis(host=host)
    platform = loaded.model.system.platform
    tag = default_tag(loaded, engine.settings.tag_namespace) if engine is not None else default_tag(loaded)
    image = engine.image(tag) if engine is not None else None
    selection = gpu_selection(platform, host, gpus, environ or {})
    mapping = plan_gpu_mapping(platform, host, selection)
    if platform == "cpu":
        return Diagnosis(
            host=host,
            dossier=loaded.model.name,
            platform=platform,
            image=tag if image else None,
            gpu_mapping=mapping.description,
            can_run=True,
            reason="CPU platform: no GPU needed",
        )
    # Before the image is built, the CUDA it will need is the one the dossier declares.
    needs = image_needs(image.env, None) if image else ImageNeeds()
    if needs.cuda is None and platform == "cuda":
        needs = replace(needs, cuda=loaded.model.system.version)
    if platform == "rocm":
        needs = replace(needs, rocm=loaded.model.system.version)
    verdict = compat_verdict(platform, host, needs, cpu_variant=cpu_variant_of(loaded))
    mapped = gpu_mapped(platform, mapping)
    fits = driver_fits(verdict)
    ok = fits and mapped
    reason = (
        verdict.explanation
        if not fits
        else (None if mapped else f"the driver fits, but the daemon cannot map the GPU: {mapping.description}")
    )
    return Diagnosis(
        host=host,
        dossier=loaded.model.name,
        platform=platform,
        image=tag if image else None,
        compatibility=verdict,
        gpu_mapping=mapping.description,
        can_run=ok,
        reason=reason,
    )


def capture_explanations(capture: Capture) -> list[dict[str, str]]:
    """What a host capture's failures mean: its logs (a start error, a probe's stderr) and the output of every
    captured command that failed (nvidia-smi that cannot talk to the driver, an NVML mismatch), each explained by
    the failure catalogue, each cause once; a failure no entry knows is named with its raw text and the next
    diagnostic step (a command only when it exited non-zero: a warning on stderr alone is not a failure)."""
    texts = [(f"log {name}", text, True) for name, text in capture.logs().items()]
    texts += [("command " + " ".join(argv), text, code != 0) for argv, code, text in capture.failed_commands()]
    found: list[dict[str, str]] = []
    for where, text, failed in texts:
        explained = explanations_for_report({where: text})
        found += [entry for entry in explained if entry["id"] not in {seen["id"] for seen in found}]
        if not explained and failed and text.strip():
            found.append(unexplained("captured-command", text, where=where))
    return found
