"""Publishing a night's passing images: the runner's hook over `stages/publish.py`.

For every passed cell, the image its build.json names is pushed to `<registry>/<repository>` with the
tag `<identity12>-<YYYYMMDD>[.N]-<target>` (the dossier identity, the night, the target; see
`model.image_ref.registry_tag`) and recorded by its digest in `<night>/publish.json`, written atomically:

    {"format": "orch.publish/1", "registry": …, "repository": …,
     "images": [{"cell_id": …, "status": "pushed", "pinned": "<registry>/<repository>@sha256:…", …}]}

Nothing here raises for a push that failed — a registry that is down, refuses the credentials or
lacks room is a `failed` entry with its reason, and the night's summary says so; the night itself
already ran. Credentials are read from the environment variables the plan names, at push time only.

With the plan's `publish.sign_key`, each pushed image's provenance and verification statements are signed
and pushed beside it (`stages/attestations_registry.py`: `<repository>:sha256-<hex>.orch-att`), named in
publish.json as `attestations`; `orch verify REF --report REPORT --trust FILE` checks them. An image pushed
whose attestations could not be is a failed cell of the publish (the plan asked for a signed image).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict
from securesystemslib.signer import Signer

from orchestrator.attest.keys import load_signer
from orchestrator.engine import Connection, Engine, RegistryAuth, connect
from orchestrator.errors import ImageReferenceError, OrchError
from orchestrator.fsutil import atomic_write_text
from orchestrator.model.image_ref import registry_tag
from orchestrator.nightly.cell import CellOutcome
from orchestrator.report.write import read_report
from orchestrator.stages.attestations_registry import attest_published
from orchestrator.stages.build import read_record
from orchestrator.stages.publish import PublishOutcome, publish_image, push_target, registry_auth
from orchestrator.text import one_line
from orchestrator.timestamps import rfc3339_now

PUBLISH_FILE = "publish.json"
PUBLISH_FORMAT = "orch.publish/1"
_NIGHT = re.compile(r"^(\d{4})-?(\d{2})-?(\d{2})(?:\.(\d+))?$")


class PublishTo(Protocol):
    """What publishing needs of the plan's `publish:` section (nightly/plan.py's PublishSpec)."""

    @property
    def registry(self) -> str: ...

    @property
    def repository(self) -> str: ...

    @property
    def username_env(self) -> str | None: ...

    @property
    def password_env(self) -> str | None: ...

    @property
    def sign_key(self) -> Path | None: ...


class PublishedCell(PublishOutcome):
    cell_id: str
    #: `registry/repository:sha256-<hex>.orch-att`: the signed attestations pushed beside the image (the plan's
    #: `sign_key`); None when the plan signs nothing.
    attestations: str | None = None


class PublishRecord(BaseModel):
    """`<night>/publish.json`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["orch.publish/1"] = "orch.publish/1"
    created: str
    registry: str
    repository: str
    #: `passed`: every passing image pushed; `failed`: at least one was not (see its reason).
    status: Literal["passed", "failed"]
    images: tuple[PublishedCell, ...]

    @property
    def detail(self) -> str:
        pushed = sum(1 for image in self.images if image.status == "pushed")
        failed = [image for image in self.images if image.status == "failed"]
        text = f"{pushed} of {len(self.images)} image(s) pushed to {self.registry}/{self.repository}"
        if failed:
            text += f"; {failed[0].cell_id}: {failed[0].reason}"
        return one_line(text, 300)

    def __str__(self) -> str:
        return self.detail


def night_stamp(night_dir: Path) -> str:
    """`20261202` from a night folder `2026-12-02`, `20261202.2` from `2026-12-02.2` (a second run that day)."""
    match = _NIGHT.match(night_dir.name)
    if match is None:
        raise ImageReferenceError(f"night folder {night_dir.name!r} is not named <YYYY-MM-DD>[.N]")
    stamp = "".join(match.group(1, 2, 3))
    return stamp + (f".{match.group(4)}" if match.group(4) else "")


def _target_of(cell_id: str) -> str:
    return cell_id.rpartition("@")[2]


def _publish_cell(
    engine: Engine,
    spec: PublishTo,
    night_dir: Path,
    outcome: CellOutcome,
    auth: RegistryAuth | None,
    signer: Signer | None = None,
) -> PublishedCell:
    cell_id = outcome.cell_id
    try:
        record = read_record(night_dir / cell_id / "build.json")
        if record.image is None:
            return PublishedCell(cell_id=cell_id, status="failed", reason="its build.json records no image")
        tag = registry_tag(record.dossier.identity, night_stamp(night_dir), _target_of(cell_id))
        target = push_target(spec.registry, spec.repository, tag)
    except OrchError as exc:
        return PublishedCell(cell_id=cell_id, status="failed", reason=one_line(exc.message, 400))
    outcome_of_push = publish_image(engine, record.image.id, target, auth)
    published = PublishedCell(cell_id=cell_id, **outcome_of_push.model_dump())
    if signer is None or published.pinned is None:
        return published
    try:
        report = read_report(night_dir / cell_id / "report.json")
        attestations = attest_published(
            engine,
            cell=night_dir / cell_id,
            record=record,
            report=report,
            pinned=published.pinned,
            signer=signer,
            auth=auth,
        )
    except OrchError as exc:
        reason = f"pushed as {published.pinned}, but its attestations were not: {exc.message}"
        return published.model_copy(update={"status": "failed", "reason": one_line(reason, 400)})
    return published.model_copy(update={"attestations": attestations})


def publish_passed(
    spec: PublishTo,
    night_dir: Path,
    passed: Iterable[CellOutcome],
    *,
    engine_for: Callable[[str], Engine] | None = None,
    environ: Mapping[str, str] | None = None,
) -> PublishRecord:
    """Push every passed cell's image; write and return `<night>/publish.json`. Never raises for a push.

    `engine_for(cell_id)` is the engine that holds the cell's image (its target's daemon); the caller
    owns it. By default every image is taken from the local engine (DOCKER_HOST or the default
    socket), which is where a Docker target on this host and a Slurm job on this node built it.
    """
    cells = [outcome for outcome in passed if outcome.status == "passed"]
    images: list[PublishedCell] = []
    local: Connection | None = None
    try:
        signer: Signer | None = None
        try:
            auth = registry_auth(spec.username_env, spec.password_env, os.environ if environ is None else environ)
            if spec.sign_key is not None:
                variables = os.environ if environ is None else environ
                signer = load_signer(spec.sign_key, variables.get("SSH_AUTH_SOCK"))
        except OrchError as exc:
            images = [
                PublishedCell(cell_id=cell.cell_id, status="failed", reason=one_line(exc.message, 400))
                for cell in cells
            ]
            cells = []
            auth = None
        for cell in cells:
            try:
                if engine_for is not None:
                    engine = engine_for(cell.cell_id)
                else:
                    local = local or connect()
                    engine = local.engine
            except OrchError as exc:
                images.append(PublishedCell(cell_id=cell.cell_id, status="failed", reason=one_line(exc.message, 400)))
                continue
            images.append(_publish_cell(engine, spec, night_dir, cell, auth, signer))
    finally:
        if local is not None:
            local.close()
    record = PublishRecord(
        created=rfc3339_now(),
        registry=spec.registry,
        repository=spec.repository,
        status="passed" if all(image.status == "pushed" for image in images) else "failed",
        images=tuple(images),
    )
    atomic_write_text(night_dir / PUBLISH_FILE, record.model_dump_json(indent=2) + "\n")
    return record
