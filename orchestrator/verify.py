"""`orch verify DIR`: replay a hand-over folder on this machine and compare with what was shipped.

1. checksums: every file of SHA256SUMS present and unchanged, no file added, manifest consistent;
2. the image loaded from image.tar.gz and its id confirmed;
3. the probes run again from the shipped dossier (image, host, device, sample);
4. the new report compared with the shipped one, layer by layer.

A changed byte anywhere fails at step 1, naming the file (exit 1). Step 3 needs a Docker engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.dossier.load import file_sha256, load_dossier
from orchestrator.engine import Engine
from orchestrator.errors import BadInput, VerdictFailed
from orchestrator.handover import IMAGE_FILE, MANIFEST_FILE, SUMS_FILE, Manifest, read_manifest
from orchestrator.probe import ProbeOptions, run_probe
from orchestrator.report.model import STAGES, Report
from orchestrator.report.write import read_report, write_report


@dataclass(frozen=True)
class LayerVerdict:
    stage: str
    shipped: str
    replayed: str
    verdict: str  # "reproduced", "differs"


@dataclass(frozen=True)
class VerifyResult:
    manifest: Manifest
    report: Report
    layers: list[LayerVerdict]
    #: (check, shipped observed, replayed observed) for sample and device checks whose numbers differ.
    number_differences: list[tuple[str, str, str]]
    reproduced: bool
    report_paths: dict[str, Path]


def check_sums(folder: Path) -> Manifest:
    """Raise VerdictFailed naming the first file that is missing, changed or unexpected."""
    if not folder.is_dir():
        raise BadInput(f"{folder} is not a folder")
    sums_path = folder / SUMS_FILE
    if not sums_path.is_file():
        raise VerdictFailed(
            f"{folder} is not a complete hand-over folder: it has no {SUMS_FILE}",
            hint="An interrupted `orch handover` leaves such a folder; hand over again.",
        )
    listed: dict[str, str] = {}
    for number, line in enumerate(sums_path.read_text(encoding="utf-8").splitlines(), start=1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            raise VerdictFailed(f"{SUMS_FILE} line {number} is not 'sha256  path'")
        listed[name] = digest
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {SUMS_FILE}
    for name in sorted(listed):
        path = folder / name
        if not path.is_file():
            raise VerdictFailed(f"{name} is listed in {SUMS_FILE} but missing from the folder")
        if file_sha256(path) != listed[name]:
            raise VerdictFailed(f"{name} does not match its checksum: the file was changed after the hand-over")
    extra = sorted(present - set(listed))
    if extra:
        raise VerdictFailed(f"{extra[0]} is in the folder but not in {SUMS_FILE}: it was added after the hand-over")
    if MANIFEST_FILE not in listed or IMAGE_FILE not in listed:
        raise VerdictFailed(f"{SUMS_FILE} does not cover {MANIFEST_FILE} and {IMAGE_FILE}")
    return read_manifest(folder)


def compare_layers(shipped: Report, replayed: Report) -> list[LayerVerdict]:
    layers = []
    for name in STAGES:
        a, b = shipped.stage(name).status, replayed.stage(name).status
        layers.append(LayerVerdict(stage=name, shipped=a, replayed=b, verdict="reproduced" if a == b else "differs"))
    return layers


def number_differences(shipped: Report, replayed: Report) -> list[tuple[str, str, str]]:
    out = []
    for name in ("device", "sample"):
        before = {check.name: check.observed for check in shipped.stage(name).checks}
        for check in replayed.stage(name).checks:
            if check.name in before and before[check.name] != check.observed:
                out.append((check.name, before[check.name], check.observed))
    return out


def verify_handover(
    folder: Path, engine: Engine, out: Path, *, on_stage: Callable[[str], None] | None = None
) -> VerifyResult:
    stage = on_stage or (lambda _: None)
    folder = folder.resolve()
    stage("checksums")
    manifest = check_sums(folder)
    stage("load image")
    with (folder / IMAGE_FILE).open("rb") as image_file:
        engine.load(image_file)
    image = engine.image(manifest.image_id)
    if image is None or image.id != manifest.image_id:
        raise VerdictFailed(f"{IMAGE_FILE} did not load as image {manifest.image_id}")
    loaded = load_dossier(folder / "dossier" / manifest.dossier_file, variant=manifest.variant)
    if loaded.identity != manifest.identity:
        raise VerdictFailed(
            f"the shipped dossier's identity is {loaded.short_identity}, the manifest says {manifest.identity[:12]}"
        )
    stage("probe")
    report = run_probe(loaded, engine, ProbeOptions(out=out, image=manifest.image_id), on_stage=on_stage)
    paths = write_report(report, out)
    shipped = read_report(folder / "report" / "report.json")
    layers = compare_layers(shipped, report)
    reproduced = all(layer.verdict == "reproduced" for layer in layers) and report.verdict == shipped.verdict
    return VerifyResult(
        manifest=manifest,
        report=report,
        layers=layers,
        number_differences=number_differences(shipped, report),
        reproduced=reproduced,
        report_paths=paths,
    )
