"""`orch verify DIR`: replay a hand-over folder on this machine and compare with what was shipped.

The folder is untrusted input (a checksum file is not a signature), so everything that can be
checked without an engine is checked first, and nothing is loaded or run until all of it holds:

1. the folder (`handover_folder`): every name normal and inside, no symlink or special file anywhere,
   every file listed and unchanged, nothing added, manifest.json consistent with SHA256SUMS;
2. the shipped dossier: every path it references lies inside the folder's dossier/ and is one of its
   checked files (read from the YAML before the dossier loader hashes anything), and its identity is
   the manifest's;
3. the shipped report: its identity, image id and verdict are the manifest's; the shipped SBOM
   (build/sbom.cdx.json) is a CycloneDX document of the manifest's image;
4. the image tarball's own manifest and config (`image_tar`): the config digest is the manifest's
   image id, the tar names only the manifest's tag, the image carries the dossier identity;
5. with `--trust FILE`, the signed attestations (`attestations`): both envelopes signed by a trusted key,
   about the manifest's image, and every attested file unchanged; without it, a line saying the folder is
   unattributed.

A hand-over whose manifest records a repository digest (`orch handover --push`) may have no
image.tar.gz; then (or with `--from-registry`) step 4 is replaced by pulling that digest — never a
tag — and the pulled image's id must be the manifest's before it is tagged or run.

Then the image is loaded with no tag (none of the verifying host's tags can move) and tagged by id
as `orch-handover:<id>`, the probes run again from the shipped dossier — each stage stopping the ones
after it when it fails — and the new report is compared with the shipped one, layer by layer.
Every refusal in steps 1 to 4 is `HandoverDamaged` (exit 1) naming the file and what is wrong.

Why one module of ~440 lines: it is the replay's one sequence, in the order above; the checks that stand
alone already live beside it (`handover_folder`, `image_tar`, `verify_registry`).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from orchestrator.attest.keys import TrustedKey
from orchestrator.compare.environment import environment_verdict
from orchestrator.compare.layers import compare_layers
from orchestrator.compare.read import Side, environment_of, read_environment_file
from orchestrator.dossier.load import LoadedDossier, load_dossier, referenced_paths
from orchestrator.dossier.models import Dossier
from orchestrator.dossier.yaml_source import read_yaml
from orchestrator.engine import Engine, PullRequest, RegistryAuth, RemoveImage
from orchestrator.errors import BadInput, EnvironmentFailure, HandoverDamaged, YamlSourceError
from orchestrator.model.comparison import UNINTENDED
from orchestrator.model.environment import ENVIRONMENT_FILE, EnvironmentDiff
from orchestrator.model.image_ref import split_reference
from orchestrator.model.manifest import Manifest
from orchestrator.model.report import STAGES, Report
from orchestrator.plan.build import default_tag
from orchestrator.remote.fetch import remote_items
from orchestrator.report.write import read_report, write_report
from orchestrator.stages.attestations import Attribution, check_folder_attestations, unattributed_line
from orchestrator.stages.execute import run_probe
from orchestrator.stages.handover import IMAGE_FILE
from orchestrator.stages.handover_folder import MAX_SUMS_BYTES, check_folder, check_folder_files
from orchestrator.stages.handover_remote import get_handed_over
from orchestrator.stages.image_tar import IDENTITY_LABEL, ImageTarFacts, inspect_image_tar, untagged_stream
from orchestrator.stages.probe import ProbeOptions

#: The repository a verified image is tagged in, by its own id: a name only orch uses, which no
#: hand-over chooses and which can only ever point at the image whose id it spells.
HANDOVER_REPOSITORY = "orch-handover"
SHIPPED_REPORT = "report/report.json"
SHIPPED_SBOM = "build/sbom.cdx.json"


@dataclass(frozen=True)
class CheckedHandover:
    """A hand-over folder whose files, dossier, report and image tarball were all checked."""

    folder: Path
    manifest: Manifest
    loaded: LoadedDossier
    shipped: Report
    #: The checked tarball; None when the image comes from the registry.
    image: ImageTarFacts | None
    #: `registry/repository@sha256:…` to pull the image from, instead of loading image.tar.gz.
    pull_from: str | None = None
    #: Who signed it (checked against --trust), or None when no trust file was given.
    attribution: Attribution | None = None
    #: What is said of the signer without --trust ("unattributed: …"); None when it was checked.
    unattributed: str | None = None


@dataclass(frozen=True)
class LayerVerdict:
    stage: str
    shipped: str
    replayed: str
    verdict: str  # "reproduced", "differs"


@dataclass(frozen=True)
class LoadedImage:
    reference: str  # orch-handover:<id>
    #: The dossier's own tag (orch/<name>:<identity>), when it was free or already this image's.
    dossier_tag: str | None
    #: Why the dossier's tag was not set (it names another image here, and tags are never moved).
    tag_left: str | None = None


@dataclass(frozen=True)
class VerifyResult:
    #: The hand-over's manifest; None for `orch verify REFERENCE --report REPORT.json`.
    manifest: Manifest | None
    report: Report
    layers: list[LayerVerdict]
    #: (check, shipped observed, replayed observed) for sample and device checks whose numbers differ.
    number_differences: list[tuple[str, str, str]]
    reproduced: bool
    report_paths: dict[str, Path]
    image: LoadedImage
    #: The replayed image's environment digest against the hand-over's: same, or the files that differ;
    #: None when either side records no digest (a hand-over from before it), with the reason.
    environment: EnvironmentDiff | None = None
    environment_note: str | None = None
    #: Who signed what was verified (`--trust`), or why it is unattributed.
    attribution: str | None = None


def check_sums(folder: Path) -> Manifest:
    """The manifest of a folder whose every file is listed, unchanged, and inside it (see handover_folder)."""
    return check_folder(folder)


def _check_dossier_paths(folder: Path, manifest: Manifest) -> None:
    """Every path the shipped dossier names is a checked file (or folder of them) under dossier/.

    Read from the YAML before `load_dossier`, which would hash what the paths point at: a dossier
    naming /etc/passwd must be refused without that file being opened.
    """
    listed = {entry.path for entry in manifest.files}
    where = f"dossier/{manifest.dossier_file}"
    path = folder / where
    if path.stat().st_size > MAX_SUMS_BYTES:
        raise HandoverDamaged(f"{where} is larger than {MAX_SUMS_BYTES >> 20} MiB; no dossier is")
    try:
        document = read_yaml(path.read_bytes())
        model = Dossier.model_validate(document.data)
    except (YamlSourceError, ValidationError, ValueError) as exc:
        raise HandoverDamaged(f"{where}: the shipped dossier does not load ({str(exc).splitlines()[0]})") from None
    base = posixpath.dirname(where)
    for field, relative, kind in referenced_paths(model):
        target = posixpath.normpath(posixpath.join(base, relative))
        as_folder = any(name.startswith(target + "/") for name in listed)
        present = {"folder": as_folder, "file": target in listed, "any": as_folder or target in listed}[kind]
        inside = (
            "\0" not in relative and not relative.startswith("/") and (target + "/").startswith("dossier/") and present
        )
        if not inside:
            what = {"folder": "folder", "file": "file", "any": "file or folder"}[kind]
            raise HandoverDamaged(
                f"{where} [{field}]: {relative[:120]!r} is not a {what} of the hand-over's "
                "dossier/; a shipped dossier may reference only files inside the folder"
            )


def _check_shipped_report(folder: Path, manifest: Manifest) -> Report:
    if SHIPPED_REPORT not in {entry.path for entry in manifest.files}:
        raise HandoverDamaged(f"the hand-over has no {SHIPPED_REPORT}")
    try:
        shipped = read_report(folder / SHIPPED_REPORT)
    except BadInput as exc:
        raise HandoverDamaged(
            f"{SHIPPED_REPORT}: {exc.message.removeprefix(str(folder / SHIPPED_REPORT) + ': ')}"
        ) from None
    if shipped.dossier.identity != manifest.identity:
        raise HandoverDamaged(
            f"{SHIPPED_REPORT} is about dossier {shipped.dossier.identity[:12]}, the manifest's is {manifest.identity[:12]}"
        )
    if shipped.image is None or shipped.image.id != manifest.image_id:
        raise HandoverDamaged(f"{SHIPPED_REPORT} is about another image than the manifest's {manifest.image_id[:19]}")
    if shipped.verdict != manifest.report_verdict:
        raise HandoverDamaged(f"{SHIPPED_REPORT} says {shipped.verdict}, the manifest says {manifest.report_verdict}")
    environment = environment_of(Side(path=folder / SHIPPED_REPORT, report=shipped))
    shipped_digest = environment.digest if environment is not None else None
    if manifest.environment_digest is not None and shipped_digest != manifest.environment_digest:
        raise HandoverDamaged(
            f"{SHIPPED_REPORT} records environment {shipped_digest}, the manifest {manifest.environment_digest}"
        )
    return shipped


def _check_shipped_sbom(folder: Path, manifest: Manifest) -> None:
    """build/sbom.cdx.json, when shipped (hand-overs before it have none), is a CycloneDX BOM of this image."""
    if SHIPPED_SBOM not in {entry.path for entry in manifest.files}:
        return
    path = folder / SHIPPED_SBOM
    if path.stat().st_size > MAX_SUMS_BYTES:
        raise HandoverDamaged(f"{SHIPPED_SBOM} is larger than {MAX_SUMS_BYTES >> 20} MiB; orch writes far less")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        described = document["metadata"]["component"]["version"] if document.get("bomFormat") == "CycloneDX" else None
    except (ValueError, KeyError, TypeError):
        raise HandoverDamaged(f"{SHIPPED_SBOM} is not a CycloneDX JSON document naming its image") from None
    if described != manifest.image_id:
        raise HandoverDamaged(f"{SHIPPED_SBOM} describes another image than the manifest's {manifest.image_id[:19]}")


def check_handover(
    folder: Path, *, from_registry: bool = False, trusted: list[TrustedKey] | None = None
) -> CheckedHandover:
    """Everything about a hand-over that needs no engine, in the order that opens nothing unchecked."""
    folder = folder.resolve()
    checked_folder = check_folder_files(folder)
    manifest = checked_folder.manifest
    attribution = unattributed = None
    if trusted is not None:
        attribution = check_folder_attestations(
            folder,
            checked_folder.present,
            checked_folder.listed,
            trusted,
            image_id=manifest.image_id,
            pinned=manifest.repository_digest,
        )
    else:
        unattributed = unattributed_line(folder, checked_folder.present)
    if from_registry and manifest.repository_digest is None:
        raise BadInput(
            f"--from-registry: {folder}/manifest.json records no repository digest (the hand-over was not pushed)"
        )
    _check_dossier_paths(folder, manifest)
    try:
        loaded = load_dossier(folder / "dossier" / manifest.dossier_file, variant=manifest.variant)
    except BadInput as exc:
        raise HandoverDamaged(f"the shipped dossier does not load: {exc.message}") from None
    if loaded.identity != manifest.identity:
        raise HandoverDamaged(
            f"the shipped dossier's identity is {loaded.short_identity}, the manifest says {manifest.identity[:12]}"
        )
    shipped = _check_shipped_report(folder, manifest)
    _check_shipped_sbom(folder, manifest)
    if from_registry or not (folder / IMAGE_FILE).is_file():
        # check_folder let the tarball be missing only when the manifest records the digest.
        return CheckedHandover(
            folder=folder,
            manifest=manifest,
            loaded=loaded,
            shipped=shipped,
            image=None,
            pull_from=manifest.repository_digest,
            attribution=attribution,
            unattributed=unattributed,
        )
    image = inspect_image_tar(
        folder / IMAGE_FILE, image_id=manifest.image_id, tag=manifest.image_tag, identity=manifest.identity
    )
    return CheckedHandover(
        folder=folder,
        manifest=manifest,
        loaded=loaded,
        shipped=shipped,
        image=image,
        attribution=attribution,
        unattributed=unattributed,
    )


def pull_pinned(engine: Engine, pinned: str, image_id: str, auth: RegistryAuth | None, what: str) -> None:
    """Pull `name@sha256:…` and make sure it is image `image_id`; a pulled image that is not is removed again.

    The registry checks the layers against the manifest and the engine the config against the image
    id, so equal ids mean the very image the hand-over (or report) names, whatever the registry holds.
    """
    was_here = engine.image(pinned) is not None
    pulled = engine.pull(PullRequest.by_digest(pinned, auth))
    if pulled.id != image_id:
        if not was_here:
            engine.remove(RemoveImage(pinned))
        raise HandoverDamaged(
            f"{pinned} is image {pulled.id[:19]}, but {what} names {image_id[:19]}; nothing was run from it"
        )


def load_checked_image(engine: Engine, checked: CheckedHandover, auth: RegistryAuth | None = None) -> LoadedImage:
    """Load the checked tarball with no tag (or pull the manifest's digest), then tag it by id.

    No tag that exists here is ever moved. It is tagged `orch-handover:<id>`, and also with the
    dossier's own tag (`orch/<name>:<identity>`, what `orch probe DOSSIER` looks for) when the manifest
    names that tag and it is free here.
    """
    manifest = checked.manifest
    pull_from = checked.pull_from

    def fetch() -> None:
        if pull_from is not None:
            pull_pinned(engine, pull_from, manifest.image_id, auth, "manifest.json")
        elif engine.image(manifest.image_id) is None:
            engine.load(untagged_stream(checked.folder / IMAGE_FILE))

    return adopt_image(
        engine,
        image_id=manifest.image_id,
        identity=manifest.identity,
        loaded=checked.loaded,
        image_tag=manifest.image_tag,
        fetch=fetch,
        source=pull_from or IMAGE_FILE,
    )


def adopt_image(
    engine: Engine,
    *,
    image_id: str,
    identity: str,
    loaded: LoadedDossier,
    image_tag: str,
    fetch: Callable[[], None],
    source: str,
) -> LoadedImage:
    """Bring a checked image in with `fetch` (load untagged, or pull by digest), check it, tag it by id."""
    tag = image_id.removeprefix("sha256:")
    reference = f"{HANDOVER_REPOSITORY}:{tag}"
    holder = engine.image(reference)
    if holder is not None and holder.id != image_id:
        raise EnvironmentFailure(
            f"{reference} on this engine is image {holder.id[:19]}, not {image_id[:19]}",
            hint=f"Someone tagged another image with orch's hand-over name; remove that tag (docker rmi {reference}).",
        )
    fetch()
    image = engine.image(image_id)
    if image is None:
        raise HandoverDamaged(f"{source} did not load as image {image_id}")
    if image.labels.get(IDENTITY_LABEL) != identity:
        raise HandoverDamaged(f"image {image_id[:19]} carries another dossier identity than the manifest")
    if holder is None:
        engine.tag(image_id, HANDOVER_REPOSITORY, tag)
    own = default_tag(loaded, engine.settings.tag_namespace)
    if image_tag != own:
        return LoadedImage(reference, None)
    present = engine.image(own)
    if present is None:
        repository, version, _ = split_reference(own)
        engine.tag(image_id, repository, version or "latest")
    elif present.id != image_id:
        return LoadedImage(reference, None, f"{own} names another image here ({present.id[:19]}); it was left as it is")
    return LoadedImage(reference, own)


def judge_replay(
    folder: Path, shipped: Report, replayed: Report
) -> tuple[list[LayerVerdict], list[tuple[str, str, str]]]:
    """Each layer of the replay against the shipped report, by `orch compare`'s own rows (`compare_layers`).

    A layer is reproduced when its status is the same and none of its numbers regressed or changed; the
    numbers that differ (also within tolerance) are listed. `orch compare shipped replayed` judges the
    same rows, so the two can never disagree about a layer.
    """
    layers = compare_layers(
        Side(path=folder / SHIPPED_REPORT, report=shipped), Side(path=folder / "replayed", report=replayed)
    )
    broken_numbers = {row.stage for row in layers.numbers if row.verdict in UNINTENDED}
    status = {row.stage: row for row in layers.stages}
    verdicts = []
    for name in STAGES:
        a, b = shipped.stages.get(name), replayed.stages.get(name)
        row = status.get(name)
        same = row is not None and row.verdict == "same" and name not in broken_numbers
        verdicts.append(
            LayerVerdict(
                stage=name,
                shipped=a.status if a else "not recorded",
                replayed=b.status if b else "not recorded",
                verdict="reproduced" if same else "differs",
            )
        )
    numbers = [
        (row.name, row.a_observed or "not checked", row.b_observed or "not checked")
        for row in layers.numbers
        if row.a_observed != row.b_observed
    ]
    return verdicts, numbers


def judge_environment(
    checked: CheckedHandover, replayed: Report, out: Path
) -> tuple[EnvironmentDiff | None, str | None]:
    """The replayed image's environment digest against the shipped one (`orch compare`'s own verdict).

    The shipped list is the hand-over's build/environment.json (checked against SHA256SUMS, and used only
    when it folds to the shipped digest); the replayed one is what the image stage wrote into `out`.
    """
    shipped = environment_of(Side(path=checked.folder / SHIPPED_REPORT, report=checked.shipped))
    again = environment_of(Side(path=out / "report.json", report=replayed))
    if shipped is None or again is None:
        side = "the hand-over" if shipped is None else "the replay"
        return None, f"not compared: {side} records no environment digest"
    files_shipped, _ = read_environment_file(checked.folder / "build" / ENVIRONMENT_FILE, shipped)
    files_again, _ = read_environment_file(out / ENVIRONMENT_FILE, again)
    diff, _, _ = environment_verdict(shipped, again, files_shipped, files_again, None)
    return diff, None


def verify_handover(
    folder: Path,
    engine: Engine,
    out: Path,
    *,
    on_stage: Callable[[str], None] | None = None,
    checked: CheckedHandover | None = None,
    gpus: str | None = None,
    environ: Mapping[str, str] | None = None,
    from_registry: bool = False,
    auth: RegistryAuth | None = None,
) -> VerifyResult:
    stage = on_stage or (lambda _: None)
    stage("checks")
    checked = checked or check_handover(folder, from_registry=from_registry)
    manifest = checked.manifest
    if manifest.remote or remote_items(checked.loaded.model):
        # Before any image is loaded: each remote item from the folder's copy or its source, fingerprint checked.
        stage("fetch remote items")
        get_handed_over(checked.folder, manifest, checked.loaded, environ=None)
    stage("pull image" if checked.pull_from else "load image")
    image = load_checked_image(engine, checked, auth)
    stage("probe")
    report = run_probe(
        checked.loaded,
        engine,
        ProbeOptions(out=out, image=manifest.image_id, stop_after_failure=True, gpus=gpus, environ=dict(environ or {})),
        on_stage=on_stage,
    )
    paths = write_report(report, out)
    layers, numbers = judge_replay(checked.folder, checked.shipped, report)
    environment, environment_note = judge_environment(checked, report, out)
    reproduced = (
        all(layer.verdict == "reproduced" for layer in layers)
        and report.verdict == checked.shipped.verdict
        and (environment is None or environment.same)
    )
    return VerifyResult(
        manifest=manifest,
        report=report,
        layers=layers,
        number_differences=numbers,
        reproduced=reproduced,
        report_paths=paths,
        image=image,
        environment=environment,
        environment_note=environment_note,
    )
