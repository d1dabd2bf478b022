"""Commands about the dossier itself: validate, schema, render."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from rich.console import Console

dossier_argument = click.argument("dossier", type=click.Path(path_type=Path))
variant_option = click.option(
    "--variant", metavar="NAME", default=None, help="Use a variant declared in the dossier (e.g. cpu)."
)
gpus_option = click.option(
    "--gpus",
    metavar="GPUS",
    default=None,
    help="GPUs to map: all, a count N, device=0,2, a GPU- or MIG- UUID (default: the scheduler's allocation in "
    "SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES, else all).",
)
#: `--sign KEY` of `orch handover` and `orch rebuild --handover` (docs/attestations.md).
sign_option = click.option(
    "--sign",
    "sign_key",
    metavar="KEY",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Sign the hand-over's provenance and verification attestations with this key: a private key file "
    "(OpenSSH or PEM; Ed25519, ECDSA or RSA), or KEY.pub with the private key in ssh-agent. Read, never copied.",
)
builder_option = click.option(
    "--builder",
    type=click.Choice(["auto", "buildkit", "classic"]),
    default=None,
    help="What builds the image (default: ORCH_BUILDER, else auto: BuildKit where the engine offers it, which "
    "any Linux Docker engine since 18.09 does, else the classic builder). Recorded in build.json.",
)
no_preflight_option = click.option(
    "--no-preflight",
    is_flag=True,
    help="Skip the checks made before any build or container (the dossier's fingerprints, and whether this host "
    "can run its GPU stages at all): build and probe anyway, and let the report show where it fails.",
)
dry_run_option = click.option(
    "--dry-run",
    is_flag=True,
    help="Print the program — every step, numbered and named, with its image, tag, labels, mounts, environment, "
    "limits and GPU mapping (the steps a real run executes and records in steps.json) — and exit 0 without "
    "touching the engine.",
)


@click.command()
@dossier_argument
@variant_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--fetch",
    "fetch_remote_items",
    is_flag=True,
    help="Also get every remote data and weights item into the host's cache and check its sha256 (as `orch fetch`).",
)
def validate(dossier: Path, variant: str | None, as_json: bool, fetch_remote_items: bool) -> None:
    """Check a dossier: schema, referenced files and their fingerprints, lock, and coherence with the vendor tables."""
    from orchestrator.cli.console import make_console
    from orchestrator.cli.progress import hash_progress
    from orchestrator.dossier.load import declared_fingerprints, load_dossier

    # The bar goes to stderr: with --json, stdout holds only the JSON document.
    with hash_progress(make_console(stderr=True), f"hashing the files {dossier} references") as bar:
        loaded = load_dossier(
            dossier, variant=variant, check_fingerprints=True, on_total=bar.total, on_bytes=bar.advance
        )
    fingerprints = declared_fingerprints(loaded.reference_model)
    remote = [artifact.name for artifact in (*loaded.model.data, *loaded.model.weights) if artifact.path is None]
    fetched: list[str] = []
    if fetch_remote_items and remote:
        from orchestrator.cli.fetch_cmds import fetch_remote

        done = fetch_remote(loaded, make_console(stderr=True))
        fetched = [entry.item.name for entry in done]
    model = loaded.model
    torch = loaded.lock.get("torch")
    variants = [v.name for v in loaded.reference_model.variants]
    summary: dict[str, object] = {
        "dossier": str(dossier),
        "name": model.name,
        "identity": loaded.identity,
        "variant": loaded.variant,
        "platform": model.system.platform,
        "backend_version": model.system.version,
        "base_image": loaded.base_image.from_line,
        "python": model.python.version,
        "install": model.python.install,
        "torch": str(torch.version) if torch else None,
        "locked_packages": len(loaded.lock.requirements),
        "files": len(loaded.files),
        "fingerprints_checked": sum(len(declared) for declared in fingerprints.values()),
        "fingerprints_remote": [name for name in remote if name not in fetched],
        "fetched": fetched,
        "links": loaded.links,
        "variants": variants,
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    console = make_console()
    console.print(f"[green]✓[/] {dossier} is valid")
    for key in (
        "name",
        "identity",
        "platform",
        "backend_version",
        "base_image",
        "python",
        "install",
        "torch",
    ):
        if summary[key] is not None:
            console.print(f"  {key:<16} {summary[key]}")
    console.print(f"  {'locked':<16} {summary['locked_packages']} packages; {summary['files']} referenced files")
    console.print(f"  {'fingerprints':<16} {summary['fingerprints_checked']} sha256 checked, all match")
    if fetched:
        console.print(f"  {'fetched':<16} remote, in the cache, sha256 checked: {', '.join(fetched)}")
    elif remote:
        console.print(f"  {'not checked':<16} remote (`--fetch` gets and checks them): {', '.join(remote)}")
    if loaded.links:
        shown = ", ".join(f"{link} -> {target}" for link, target in sorted(loaded.links.items()))
        console.print(f"  {'links followed':<16} {shown} (inside the folder; copied as files)")
    if variants:
        console.print(f"  {'variants':<16} {', '.join(variants)}")
    _print_fields_to_confirm(dossier, console)


def _print_fields_to_confirm(dossier: Path, console: Console) -> None:
    """A draft from `orch record` marks the decisions it leaves to a person; say which are left."""
    import yaml

    from orchestrator.record.draft import fields_to_confirm

    left = fields_to_confirm(yaml.safe_load(dossier.read_text(encoding="utf-8")))
    if left:
        console.print(
            f"  [yellow]{'to confirm':<16}[/] {len(left)} field(s) still marked TO CONFIRM: {', '.join(left)}"
        )


@click.command()
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Write to this file instead of stdout.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "markdown"]),
    default="json",
    show_default=True,
    help="JSON Schema, or the Markdown reference (docs/dossier.md).",
)
def schema(out: Path | None, fmt: str) -> None:
    """Print the dossier's JSON Schema (for editors and CI linters) or its Markdown reference."""
    from orchestrator.dossier.schema import dossier_json_schema, schema_markdown
    from orchestrator.fsutil import atomic_write_text

    text = (
        schema_markdown() if fmt == "markdown" else json.dumps(dossier_json_schema(), indent=2, sort_keys=True) + "\n"
    )
    if out is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(out, text)


@click.command()
@dossier_argument
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder for the Dockerfile and the build context (created; replaced only if an earlier render).",
)
@variant_option
@click.option(
    "--dockerfile-only",
    is_flag=True,
    help="Print the Dockerfile to stdout and write nothing (no wheel download).",
)
@click.option(
    "--ca-bundle",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="ORCH_CA_BUNDLE",
    default=None,
    help="CA bundle pip trusts during an online install (intercepting proxies). Never kept in the image.",
)
@click.option(
    "--builder",
    type=click.Choice(["buildkit", "classic"]),
    default="buildkit",
    show_default=True,
    help="The builder the Dockerfile is for: BuildKit's one stage (RUN --mount; Docker >= 23 builds with it, "
    "20.10 with DOCKER_BUILDKIT=1) or the two-stage form any builder builds.",
)
def render(
    dossier: Path, out: Path | None, variant: str | None, dockerfile_only: bool, ca_bundle: Path | None, builder: str
) -> None:
    """Render the Dockerfile and write the build context to --out.

    The context is self-contained (lock, code, wheels, orch's install script): plain `docker build` of it
    installs the environment `orch build` installs (one environment digest)."""
    from orchestrator.cli.console import make_console
    from orchestrator.dossier.load import load_dossier
    from orchestrator.errors import BadInput
    from orchestrator.plan.build import buildkit_plan, make_plan

    if out is None and not dockerfile_only:
        raise BadInput("orch render needs --out DIR (or --dockerfile-only to print the Dockerfile)")
    loaded = load_dossier(dossier, variant=variant)
    plan = make_plan(loaded, ca_bundle=ca_bundle is not None)
    if builder == "buildkit":
        plan = buildkit_plan(plan)
    if dockerfile_only:
        from orchestrator.render.dockerfile import render_dockerfile

        click.echo(render_dockerfile(plan), nl=False)
        return
    from orchestrator.stages.context import write_context

    assert out is not None
    console = make_console()
    with console.status(f"rendering {loaded.model.name} into {out}"):
        if plan.toolchain_debs:
            # The toolchain's .deb files are downloaded by apt in a container of the base image.
            from orchestrator.engine import connect
            from orchestrator.stages.build import ensure_base

            with connect() as engine:
                base = ensure_base(engine, loaded)
                rendered = write_context(loaded, plan, out, ca_bundle=ca_bundle, engine=engine, base_id=base.id)
        else:
            rendered = write_context(loaded, plan, out, ca_bundle=ca_bundle)
    console.print(f"[green]✓[/] rendered {loaded.model.name} ({plan.platform}) into {rendered.directory}")
    console.print(f"  Dockerfile, requirements.lock, app/{', wheels/' if rendered.wheels else ''}")
    if rendered.wheels:
        console.print(f"  {len(rendered.wheels)} wheels, hashes verified")
    if rendered.debs:
        console.print(f"  {len(rendered.debs)} toolchain .deb files from the base image's archive in toolchain-debs/")
    how = "DOCKER_BUILDKIT=1 docker build" if plan.builder == "buildkit" else "docker build"
    console.print(f"  build it: {how} {rendered.directory}")
