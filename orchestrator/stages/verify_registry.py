"""`orch verify REGISTRY/REPOSITORY@sha256:… --report REPORT.json`: replay a published image.

The nightly case: last night pushed an image and kept its report; this morning, on another machine,
someone replays exactly that image. The reference must name a digest (a tag can move: refused as bad
input, exit 2, before any engine is reached). The report says which image and which dossier identity
were judged; the dossier is `--dossier` or the path the report records. Checked before the engine:
the reference's grammar, the report's schema, the dossier loading with the report's identity. Then the
digest is pulled (no tag is created), its image id must be the report's, and its identity label the
dossier's — only then is it tagged `orch-handover:<id>`, probed, and compared with the report, layer
by layer, exactly as `orch verify FOLDER` does.

With `--trust FILE`, the image's attestations are fetched from the registry first (`attestations_registry`)
and must be signed by a trusted key, name this digest and the report's image id as their subject, and
attest the given report file's sha256 — before the image is pulled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.attest.keys import TrustedKey
from orchestrator.attest.statements import REPORT_NAME
from orchestrator.dossier.load import LoadedDossier, load_dossier
from orchestrator.dossier.paths import file_sha256
from orchestrator.engine import Engine, RegistryAuth
from orchestrator.errors import AttestationRefused, BadInput, ImageReferenceError
from orchestrator.model.image_ref import parse_pinned
from orchestrator.model.report import Report
from orchestrator.report.write import read_report, write_report
from orchestrator.stages.attestations import check_statements
from orchestrator.stages.attestations_registry import attestation_tag, fetch_attestations
from orchestrator.stages.execute import run_probe
from orchestrator.stages.probe import ProbeOptions
from orchestrator.stages.verify import VerifyResult, adopt_image, judge_replay, pull_pinned


@dataclass(frozen=True)
class CheckedReference:
    pinned: str
    report_path: Path
    shipped: Report
    loaded: LoadedDossier


def pinned_reference(text: str) -> str:
    """`name@sha256:…` as given, or BadInput (exit 2) saying why: a tag alone, or not a reference."""
    try:
        return parse_pinned(text).pinned or text
    except ImageReferenceError as exc:
        raise BadInput(f"{text[:200]}: {exc}") from None


def check_reference(text: str, report_path: Path, dossier: Path | None = None) -> CheckedReference:
    """Everything that needs no engine: the reference, the report, the dossier and its identity."""
    pinned = pinned_reference(text)
    shipped = read_report(report_path)
    if shipped.image is None:
        raise BadInput(f"{report_path} records no image; give the report of a probe of the pushed image")
    dossier_path = dossier or Path(shipped.dossier.path)
    loaded = load_dossier(dossier_path, variant=shipped.dossier.variant)
    if loaded.identity != shipped.dossier.identity:
        raise BadInput(
            f"{dossier_path} has identity {loaded.short_identity}, but {report_path} is about "
            f"{shipped.dossier.identity[:12]}",
            hint="Give the dossier the report was made from with --dossier.",
        )
    return CheckedReference(pinned=pinned, report_path=report_path.resolve(), shipped=shipped, loaded=loaded)


def verify_reference(
    checked: CheckedReference,
    engine: Engine,
    out: Path,
    *,
    on_stage: Callable[[str], None] | None = None,
    gpus: str | None = None,
    environ: Mapping[str, str] | None = None,
    auth: RegistryAuth | None = None,
    trusted: list[TrustedKey] | None = None,
) -> VerifyResult:
    stage = on_stage or (lambda _: None)
    shipped = checked.shipped
    assert shipped.image is not None  # check_reference
    image_id = shipped.image.id
    attribution = "unattributed: not checked (give --trust FILE to require the image's signed attestations)"
    if trusted is not None:
        stage("attestations")
        attribution = check_registry_attestations(engine, checked, trusted, auth)
    stage("pull image")
    image = adopt_image(
        engine,
        image_id=image_id,
        identity=shipped.dossier.identity,
        loaded=checked.loaded,
        image_tag=shipped.image.ref,
        fetch=lambda: pull_pinned(engine, checked.pinned, image_id, auth, str(checked.report_path)),
        source=checked.pinned,
    )
    stage("probe")
    report = run_probe(
        checked.loaded,
        engine,
        ProbeOptions(out=out, image=image_id, stop_after_failure=True, gpus=gpus, environ=dict(environ or {})),
        on_stage=on_stage,
    )
    paths = write_report(report, out)
    layers, numbers = judge_replay(checked.report_path.parent, shipped, report)
    reproduced = all(layer.verdict == "reproduced" for layer in layers) and report.verdict == shipped.verdict
    return VerifyResult(
        manifest=None,
        report=report,
        layers=layers,
        number_differences=numbers,
        reproduced=reproduced,
        report_paths=paths,
        image=image,
        attribution=attribution,
    )


def check_registry_attestations(
    engine: Engine, checked: CheckedReference, trusted: list[TrustedKey], auth: RegistryAuth | None
) -> str:
    """The attestations stored beside `checked.pinned`: trusted signer, this image, this very report."""
    assert checked.shipped.image is not None
    envelopes = fetch_attestations(engine, checked.pinned, auth)
    repository, tag = attestation_tag(checked.pinned)
    attribution, files = check_statements(
        envelopes, trusted, image_id=checked.shipped.image.id, pinned=checked.pinned, display=f"{repository}:{tag} "
    )
    attested = files.get(REPORT_NAME)
    if attested is None or attested != file_sha256(checked.report_path):
        raise AttestationRefused(
            f"{checked.report_path} is not the report the attestations name (its sha256 differs, or none is named)",
            hint="Give the report.json that was published with this image.",
        )
    return attribution.line()
