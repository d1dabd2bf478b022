"""`orch handover` and `orch verify`: a folder another team can replay, and its replay."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.dossier_cmds import dossier_argument, gpus_option, sign_option, variant_option

if TYPE_CHECKING:
    from orchestrator.engine import RegistryAuth
    from orchestrator.model.image_ref import ImageReference


def registry_credentials_options(function: Callable[..., None]) -> Callable[..., None]:
    """`--registry-user-env` / `--registry-password-env`: the *names* of variables, never their values."""
    function = click.option(
        "--registry-password-env",
        metavar="NAME",
        default=None,
        help="The environment variable holding the registry password or token (its name only).",
    )(function)
    return click.option(
        "--registry-user-env",
        metavar="NAME",
        default=None,
        help="The environment variable holding the registry user name (default: the engine's own docker login).",
    )(function)


def _auth(user_env: str | None, password_env: str | None) -> RegistryAuth | None:
    from orchestrator.stages.publish import registry_auth

    return registry_auth(user_env, password_env, os.environ)


@click.command()
@dossier_argument
@click.option(
    "--out", type=click.Path(path_type=Path, file_okay=False), required=True, help="The new hand-over folder."
)
@click.option(
    "--from",
    "source",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="An `orch rebuild` output folder to hand over (default: run orch rebuild first, into OUT.rebuild).",
)
@variant_option
@click.option(
    "--push",
    "push",
    metavar="REGISTRY/REPOSITORY[:TAG]",
    default=None,
    help="Also push the image there (default tag <identity12>-<YYYYMMDD>) and record its repository digest "
    "in manifest.json.",
)
@click.option(
    "--no-image-file",
    is_flag=True,
    help="With --push: leave image.tar.gz out; `orch verify` then pulls the image by its digest.",
)
@click.option(
    "--include-remote",
    is_flag=True,
    help="Copy the remote data and weights (items with a uri) into the folder's remote/ too; by default they are "
    "handed over by reference (source, sha256, size, access variable) and `orch verify` fetches them.",
)
@sign_option
@registry_credentials_options
def handover(
    dossier: Path,
    out: Path,
    source: Path | None,
    variant: str | None,
    push: str | None,
    no_image_file: bool,
    include_remote: bool,
    sign_key: Path | None,
    registry_user_env: str | None,
    registry_password_env: str | None,
) -> None:
    """Write a hand-over folder: saved image, dossier, Dockerfile, lock, inventory, reports, procedure, checksums.

    With --sign, also signed attestations (SLSA provenance and the report's verdict, in-toto statements in
    DSSE envelopes) that `orch verify --trust` checks; with --push too, they are pushed beside the image.
    """
    from orchestrator.cli.console import make_console
    from orchestrator.dossier.load import load_dossier
    from orchestrator.engine import connect
    from orchestrator.errors import BadInput
    from orchestrator.stages.handover import write_handover

    loaded = load_dossier(dossier, variant=variant)
    signer = None
    if sign_key is not None:
        from orchestrator.attest.keys import load_signer

        # Before any rebuild or push: a key that cannot sign stops here, with nothing done.
        signer = load_signer(sign_key, os.environ.get("SSH_AUTH_SOCK"))
    if no_image_file and push is None:
        raise BadInput("--no-image-file needs --push: the registry is then the image's only source")
    push_to = _push_target(push, loaded.identity) if push else None
    auth = _auth(registry_user_env, registry_password_env) if push_to is not None else None
    if source is None:
        from orchestrator.cli.probe_cmds import rebuild_and_report

        source = out.with_name(out.name + ".rebuild")
        rebuild_and_report(loaded, source, ca_bundle=None, no_cache=False)
    console = make_console()
    with connect() as engine, console.status("handing over") as status:
        manifest = write_handover(
            loaded,
            engine,
            source,
            out,
            on_stage=lambda s: status.update(f"hand-over: {s}"),
            push_to=push_to,
            auth=auth,
            image_file=not no_image_file,
            signer=signer,
            include_remote=include_remote,
        )
    size = sum(f.size for f in manifest.files) / 1e9
    console.print(
        f"[green]✓[/] hand-over folder {out}: {len(manifest.files)} files, {size:.2f} GB, checksums in SHA256SUMS"
    )
    if manifest.repository_digest:
        console.print(f"  pushed: {manifest.repository_digest}")
    for item in manifest.remote or []:
        how = f"included as {item.included}" if item.included else "by reference"
        access = f", credential from ${item.access}" if item.access else ""
        console.print(f"  remote: {item.kind} {item.name} {how} ({item.uri}{access})", highlight=False)
    if signer is not None:
        console.print(f"  signed: attestations/ by {signer.public_key.keyid} (provenance and verification)")
    trust = " --trust ALLOWED_SIGNERS" if signer is not None else ""
    console.print(f"  replay it on another machine: orch verify {out}{trust} --out verify-out")


def _push_target(text: str, identity: str) -> ImageReference:
    """`--push REGISTRY/REPOSITORY[:TAG]`, the tag defaulting to `<identity12>-<YYYYMMDD>` (today, UTC)."""
    from datetime import UTC, datetime

    from orchestrator.errors import BadInput, ImageReferenceError
    from orchestrator.model.image_ref import parse_reference, registry_tag
    from orchestrator.stages.publish import push_target

    try:
        reference = parse_reference(text)
    except ImageReferenceError as exc:
        raise BadInput(f"--push {text}: {exc}") from None
    if reference.registry is None or reference.digest is not None:
        raise BadInput(
            f"--push {text}: give REGISTRY/REPOSITORY[:TAG] (a registry host with a '.' or ':port', no digest)"
        )
    tag = reference.tag or registry_tag(identity, datetime.now(UTC).strftime("%Y%m%d"))
    return push_target(reference.registry, reference.path, tag)


@click.command()
@click.argument("source", metavar="FOLDER|REFERENCE")
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where the replayed report goes, outside FOLDER (default: FOLDER.verify, or ./verify-out for a reference).",
)
@click.option(
    "--from-registry",
    is_flag=True,
    help="Pull the image by the repository digest manifest.json records, even when image.tar.gz is there.",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="With a REFERENCE (REGISTRY/REPOSITORY@sha256:…): the report.json of the pushed image to replay against.",
)
@click.option(
    "--dossier",
    "dossier_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="With a REFERENCE: the dossier (default: the path the report records).",
)
@click.option(
    "--trust",
    "trust_file",
    metavar="FILE",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Require attestations signed by a key of FILE (an SSH allowed_signers file, .pub lines or PEM public "
    "keys): an unsigned folder, another signer, another image or a changed attested file is refused first.",
)
@registry_credentials_options
@gpus_option
def verify(
    source: str,
    out: Path | None,
    from_registry: bool,
    report_path: Path | None,
    dossier_path: Path | None,
    trust_file: Path | None,
    registry_user_env: str | None,
    registry_password_env: str | None,
    gpus: str | None,
) -> None:
    """Replay a hand-over folder, or a pushed image by digest: check everything first, then probe again, compare.

    FOLDER: check its files and image tarball (or pull the digest its manifest records), load the image
    untagged, probe, compare with the shipped report. REFERENCE (REGISTRY/REPOSITORY@sha256:…, never a
    tag alone) with --report: pull that digest, check it is the report's image, probe, compare.
    """
    from rich.markup import escape
    from rich.table import Table

    from orchestrator.cli.console import make_console
    from orchestrator.engine import connect
    from orchestrator.errors import BadInput, VerdictFailed
    from orchestrator.stages.verify import check_handover, verify_handover
    from orchestrator.stages.verify_registry import check_reference, verify_reference

    console = make_console()
    auth = _auth(registry_user_env, registry_password_env)
    trusted = None
    if trust_file is not None:
        from orchestrator.attest.keys import load_trust

        trusted = load_trust(trust_file)
    reference = _as_reference(source)
    if reference is not None:
        if report_path is None:
            raise BadInput(f"{source}: a registry reference is verified against a report; give --report REPORT.json")
        if from_registry:
            raise BadInput("--from-registry is for a hand-over folder; a reference is always pulled")
        target = (out or Path("verify-out")).resolve()
        with console.status("verify: checking the reference, report and dossier"):
            checked_reference = check_reference(reference, report_path, dossier_path)
        with connect() as engine, console.status("verifying") as status:
            result = verify_reference(
                checked_reference,
                engine,
                target,
                on_stage=lambda s: status.update(f"verify: {s}"),
                gpus=gpus,
                environ=dict(os.environ),
                auth=auth,
                trusted=trusted,
            )
        who = result.attribution or ""
        checked_line = (
            f"checked: {checked_reference.pinned} is image {result.report.image.id[:19] if result.report.image else '?'}"
            f", the report's; pulled by digest, as {result.image.reference}"
        )
        name = result.report.dossier.name
    else:
        if report_path is not None or dossier_path is not None:
            raise BadInput("--report and --dossier go with a registry reference, not a hand-over folder")
        folder = Path(source).resolve()
        target = (out or folder.with_name(folder.name + ".verify")).resolve()
        if target == folder or target.is_relative_to(folder):
            raise BadInput(
                f"--out {target} is inside the hand-over folder; write the replay elsewhere (an added file fails verify)"
            )
        # Before anything needs an engine: a damaged or tampered folder is a verdict on its own.
        with console.status("verify: checking the folder"):
            checked = check_handover(folder, from_registry=from_registry, trusted=trusted)
        with connect() as engine, console.status("verifying") as status:
            result = verify_handover(
                folder,
                engine,
                target,
                on_stage=lambda s: status.update(f"verify: {s}"),
                checked=checked,
                gpus=gpus,
                environ=dict(os.environ),
                auth=auth,
            )
        names = ", ".join(filter(None, [result.image.reference, result.image.dossier_tag]))
        # The archive carries no tag of its own (a tag in it could overwrite one on this engine): verify names the
        # image it loaded or pulled itself, and says which names it gave it.
        how = f"pulled {checked.pull_from} by digest" if checked.pull_from else "loaded from image.tar.gz"
        checked_line = (
            f"checked: all {len(checked.manifest.files) + 1} files match SHA256SUMS, no path leaves the folder, "
            f"the image is {checked.manifest.image_id[:19]}; {how} and named here {names}"
        )
        name = checked.manifest.dossier_name
        who = checked.attribution.line() if checked.attribution else checked.unattributed or ""
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1))
    for column in ("layer", "shipped", "replayed", "verdict"):
        table.add_column(column)
    for layer in result.layers:
        mark = "[green]reproduced[/]" if layer.verdict == "reproduced" else "[red]differs[/]"
        table.add_row(layer.stage, layer.shipped, layer.replayed, mark)
    console.print(checked_line)
    console.print(f"  {escape(who)}")
    if result.image.tag_left:
        console.print(f"  [yellow]note[/]: {result.image.tag_left}")
    console.print(table)
    for number, before, after in result.number_differences:
        console.print(f"  numbers differ: {number}: shipped {before}, replayed {after}")
    env = result.environment
    if env is None:
        console.print(f"  environment: {escape(result.environment_note or 'not compared')}")
    elif env.same:
        console.print(f"  environment: [green]same environment[/] ({env.digest_a})")
    else:
        console.print(f"  environment: [red]differs[/]: shipped {env.digest_a}, replayed {env.digest_b}")
        for line in env.lines():
            console.print(f"    • {escape(line.removeprefix('environment '))}")
    console.print(f"  replayed report: {result.report_paths['html']}")
    if not result.reproduced or result.report.verdict != "passed":
        differing = [layer.stage for layer in result.layers if layer.verdict != "reproduced"]
        if env is not None and not env.same:
            differing.append("the environment digest")
        raise VerdictFailed(
            f"the replay of {name} "
            + (f"differs at {', '.join(differing)}" if differing else f"ended {result.report.verdict}")
        )


def _as_reference(source: str) -> str | None:
    """`source` when it is meant as a registry reference rather than a folder path, else None.

    An existing path is a folder (or "not a folder", as before); otherwise text that parses as a
    reference with a registry, a tag or a digest is one — a tag-only reference is then refused later
    with the reason (exit 2), never mistaken for a missing folder.
    """
    from orchestrator.errors import ImageReferenceError
    from orchestrator.model.image_ref import parse_reference

    if Path(source).exists():
        return None
    try:
        parsed = parse_reference(source)
    except ImageReferenceError:
        return source if "@" in source else None
    return source if (parsed.registry or parsed.tag or parsed.digest) else None
