"""The program in words (`--dry-run`): each step of plan/program.py, in order, with every value it was given.

Pure: it reads the steps only, the very objects the executor runs. A value known only once an earlier step has run (the built image's id)
is a placeholder naming that step. Paths can be shown through aliases (`<dossier>`, `<out>`), so a golden
file of the plan does not depend on where the repository lies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.dossier.load import LoadedDossier
from orchestrator.plan.build import CONTEXT_DIGEST_LABEL, FEED_PATHS, BuildSteps
from orchestrator.plan.program import (
    BuildImage,
    DeviceStage,
    EnsureBase,
    EnsureWheels,
    FetchSources,
    HandOver,
    HostStage,
    ImageChecks,
    ImageStage,
    InventoryProbe,
    Program,
    RenderContext,
    SampleStage,
    Step,
    WriteBuildRecord,
    WriteReport,
)
from orchestrator.plan.run import PROBE_LABEL
from orchestrator.plan.specs import RunSpec
from orchestrator.plan.wheels_image import DOCKERFILE, WHEELS_DIGEST_LABEL, WHY_NONE

MANAGED = ("io.orch.managed", "true")


OBSERVE = "observe"


@dataclass(frozen=True)
class PlannedCall:
    """One step: an engine call (`engine=True`) or host-side work orch does between them."""

    name: str
    title: str
    details: tuple[tuple[str, str], ...] = ()
    engine: bool = True


def _labels(name: str, labels: Mapping[str, str]) -> list[tuple[str, str]]:
    """One row per label, sorted: a plan is read (and diffed) line by line."""
    return [(name, f"{key}={value}") for key, value in sorted(labels.items())] or [(name, "none")]


def _command(spec: RunSpec) -> str:
    probe = spec.labels.get(PROBE_LABEL)
    # A probe runs as `python -I -c <its source>`: name the script, not its hundreds of lines.
    words = [f"<probes/{probe}.py>" if "\n" in arg and probe else arg for arg in spec.command]
    return " ".join(words)


def _served(command: Sequence[str]) -> str:
    """A file server's command, its script named (plan/specs.py `served_command`)."""
    return " ".join("<probes/serve_files.py>" if "\n" in arg else arg for arg in command)


def run_details(spec: RunSpec, engine_labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    gpus: list[str] = []
    if spec.nvidia_gpus:
        gpus.append("device request: all NVIDIA GPUs (--gpus all)")
    gpus += [f"CDI device {name}" for name in spec.cdi_devices]
    gpus += [f"device {node}" for node in spec.devices]
    gpus += [f"group-add {gid}" for gid in spec.group_add]
    rows: list[tuple[str, str]] = [
        ("image", spec.image),
        ("command", _command(spec)),
        ("user", spec.user or "the image's (USER in the Dockerfile)"),
        ("working dir", spec.working_dir or "the image's"),
        ("network", "bridge" if spec.network else "none"),
    ]
    rows += [("mount", f"{m.source} -> {m.target} ({'ro' if m.read_only else 'rw'})") for m in spec.mounts]
    rows += [("env", f"{key}={value}") for key, value in sorted(spec.environment.items())]
    limits = f"memory {spec.mem_limit}, pids {spec.pids_limit}, timeout {spec.timeout_s:g}s"
    rows += [
        ("limits", limits + (f", shm {spec.shm_size}" if spec.shm_size else "")),
        ("gpus", "; ".join(gpus) or "none"),
        *_labels("label", {**engine_labels, **spec.labels, MANAGED[0]: MANAGED[1]}),
        ("security", f"{spec.hardening.words()}; removed after it stops"),
    ]
    return tuple(rows)


def _render_details(loaded: LoadedDossier, steps: BuildSteps) -> tuple[tuple[str, str], ...]:
    plan = steps.plan
    base = loaded.base_image
    context: list[tuple[str, str]] = [
        ("folder", str(steps.context_dir)),
        ("Dockerfile", f"templates/dockerfiles/{plan.template}, FROM {base.from_line}"),
        ("lock", f"{loaded.model.python.requirements} -> requirements.lock"),
        ("code", f"{loaded.model.code.source} -> app/"),
    ]
    if plan.install_mode == "wheelhouse":
        context.append(
            ("wheels", f"pip download on the host for Python {plan.python_version}, glibc {base.glibc} -> wheels/")
        )
    toolchain = loaded.model.build.toolchain.requirements if loaded.model.build is not None else None
    if plan.extensions is not None and plan.extensions.cuda_toolchain_wheels and toolchain is not None:
        context.append(("toolchain lock", f"{toolchain} -> toolchain.lock (builder stage only)"))
        if plan.install_mode == "wheelhouse":
            context.append(("toolchain wheels", "pip download on the host, the same way -> toolchain-wheels/"))
    if plan.toolchain_debs and plan.extensions is not None:
        context.append(
            (
                "toolchain debs",
                f"apt-get install --download-only {' '.join(plan.extensions.toolchain_apt_packages)} in one "
                "container of the base image (engine's default network; skipped when the host's cache has them "
                "for this base id) -> toolchain-debs/",
            )
        )
    if plan.ca_bundle:
        context.append(("CA bundle", f"{steps.ca_bundle} -> orch/ca-bundle.pem (builder stage only)"))
    context.append(("context digest", "sha256 of each file's path, mode and sha256 (the build label below)"))
    return tuple(context)


def _wheels_details(steps: BuildSteps) -> tuple[tuple[str, str], ...]:
    spec = steps.wheels
    assert spec is not None
    return (
        ("skipped", "when step build reuses the tag's image (no engine build reads the wheels)"),
        (
            "reused",
            f"when the image {spec.tag} has {WHEELS_DIGEST_LABEL}=<sha256 of the collected wheels' names and "
            "sha256> (also with --no-cache: an input named by its content, like the base)",
        ),
        (
            "else built",
            f"BuildKit, network none, from the context server (below): {DOCKERFILE.strip().replace(chr(10), '; ')} "
            "with the context's wheels/",
        ),
        ("trust", "none: install-venv.sh checks uv's wheel's sha256, uv checks every locked wheel's hash"),
        *_labels("label", {**dict(spec.labels), WHEELS_DIGEST_LABEL: "<sha256 of the collected wheels>"}),
    )


def _build_details(loaded: LoadedDossier, step: BuildImage) -> tuple[tuple[str, str], ...]:
    steps = step.build
    plan = steps.plan
    feed: list[tuple[str, str]] = []
    if steps.feed is not None:
        feed = [
            ("wheel feed", f"a container of {loaded.base_image.from_line} started first, removed after the build"),
            ("wheel feed command", _served(steps.feed.command)),
            ("wheel feed serves", f"{', '.join(FEED_PATHS)} of the context, copied in with the archive API"),
            ("wheel feed network", f"none: its loopback only, which the build joins; user {steps.feed.user}"),
            (
                "wheel feed limits",
                f"memory {steps.feed.mem_limit}, pids {steps.feed.pids_limit}, ready when its output shows "
                f"{steps.feed.ready_line!r} within {steps.feed.start_timeout_s:g}s",
            ),
            *_labels("wheel feed label", {**dict(steps.feed.labels), MANAGED[0]: MANAGED[1]}),
            ("wheel feed security", steps.feed.hardening.words()),
        ]
    server = steps.context_server
    if server is not None:
        feed = [
            (
                "context server",
                f"a container of {loaded.base_image.from_line} started first, removed after the build; it holds the "
                f"context tar at {server.command[-1]}/<random token>/context.tar (copied in with the archive API) "
                "and an empty index.html (no listing)",
            ),
            ("context server command", _served(server.command)),
            ("context server network", f"the engine's bridge, port {server.port}: the engine fetches the URL"),
            (
                "context server limits",
                f"memory {server.mem_limit}, pids {server.pids_limit}, user {server.user}, ready when its output "
                f"shows {server.ready_line!r} within {server.start_timeout_s:g}s",
            ),
            *_labels("context server label", {**dict(server.labels), MANAGED[0]: MANAGED[1]}),
            ("context server security", server.hardening.words()),
        ]
    how = (
        "BuildKit: POST /build?version=2 with remote=<the context server's URL> (the engine offers it; --builder "
        "classic to upload the context instead)"
        if steps.builder == "buildkit"
        else "classic: POST /build with the context tar uploaded (--builder, or an engine without BuildKit)"
    )
    return (
        ("builder", how),
        (
            "context",
            f"{steps.context_dir}{' without wheels/' if steps.feed or steps.wheels else ''} as a normalised tar "
            "(fixed owner and mtime)",
        ),
        ("network", steps.network + (" (the feed's namespace: loopback only)" if steps.feed else "")),
        *feed,
        ("cache", "off (--no-cache)" if steps.no_cache else "on"),
        ("build label", f"{CONTEXT_DIGEST_LABEL}=<sha256 of the context: each file's path, mode and sha256>"),
        *_labels("label", dict(plan.labels)),
        *_labels("builder stage label", dict(plan.builder_labels)),
        *_labels("every stage's label (ORCH_LABELS)", dict(plan.stage_labels)),
        ("then", f"inspect image {steps.tag}: the built image's id and its layers"),
    )


def describe(step: Step, loaded: LoadedDossier, engine_labels: Mapping[str, str]) -> PlannedCall:
    """One step in words: its title and every value the plan decided for it."""
    match step:
        case EnsureBase():
            pinned = f"; must be {step.pinned_id} (the dossier pins it)" if step.pinned_id else ""
            # Whether the engine has it is an observed fact (a dry run cannot know): the step says both cases.
            return PlannedCall(step.name, f"base image {step.ref} (the engine's, else pulled{pinned})")
        case RenderContext():
            return PlannedCall(step.name, "render the build context", _render_details(loaded, step.build), False)
        case EnsureWheels():
            if step.build.wheels is None:
                return PlannedCall(step.name, f"skipped: {WHY_NONE}", (), False)
            return PlannedCall(step.name, f"wheels image {step.build.wheels.tag}", _wheels_details(step.build))
        case BuildImage():
            reuse = (
                " (not run when the image the tag names now has this identity and context digest: it is reused)"
                if step.reuse_if_same_context
                else ""
            )
            return PlannedCall(step.name, f"build image {step.build.tag}{reuse}", _build_details(loaded, step))
        case InventoryProbe():
            return PlannedCall(
                step.name,
                "run the inventory probe (reused when build.json of the same image id holds it)",
                run_details(step.spec, engine_labels),
            )
        case ImageChecks():
            reference = step.reference_inventory or "none declared"
            return PlannedCall(
                step.name,
                "check the image's inventory against the dossier and the lock",
                (("reference inventory", reference),),
                False,
            )
        case WriteBuildRecord():
            return PlannedCall(
                step.name,
                "write build.json, build.log, pip-freeze.txt and sbom.cdx.json",
                (("folder", str(step.folder)),),
                False,
            )
        case FetchSources():
            return PlannedCall(
                step.name,
                f"the remote items in the cache {step.cache}: each found there and hashed again, else fetched "
                "from its source and checked against its sha256 (before any build or container)",
                tuple(
                    (
                        item.label,
                        f"{item.uri} → {item.cached} (sha256 {item.sha256}"
                        + (f"; credential from ${item.access})" if item.access else "; no credential)"),
                    )
                    for item in step.items
                ),
                False,
            )
        case ImageStage():
            if step.after_build:
                return PlannedCall(
                    step.name,
                    "the image stage: the build's inventory and checks, as they are (nothing run again)",
                    engine=False,
                )
            return PlannedCall(
                step.name,
                "the image stage: build.json of this image id, else the inventory probe",
                run_details(step.spec, engine_labels),
            )
        case HostStage():
            return PlannedCall(
                step.name,
                "the host stage: the driver, the daemon's GPU support and the image's needs, before any GPU container",
                (("gpu mapping", step.mapping.description), *(("note", note) for note in step.notes)),
                False,
            )
        case DeviceStage():
            details = list(run_details(step.run.device, engine_labels))
            if step.extension_check is not None:
                details += [
                    (f"extension check {key}", value) for key, value in run_details(step.extension_check, engine_labels)
                ]
            what = "run the device probe (not run when the host's driver cannot run the image's CUDA)"
            if step.sample_alongside:
                what = (
                    "run the device probe, the sample's container started at the same time (CPU platform: "
                    "the sample counts only if this stage passes; otherwise it is stopped, its outputs removed)"
                )
            return PlannedCall(step.name, what, tuple(details))
        case SampleStage():
            folders = step.run.folders
            return PlannedCall(
                step.name,
                "verify fingerprints, then run the sample (only when the device stage passed and every "
                "fingerprint matches)",
                (
                    *(("sha256", path) for path in step.fingerprinted),
                    ("output", f"{folders.output} (emptied, writable by uid 10001)"),
                    ("meta", str(folders.meta)),
                    ("probe site", f"{folders.site} (sitecustomize.py)"),
                    *run_details(step.run.sample, engine_labels),
                ),
            )
        case WriteReport():
            return PlannedCall(
                step.name,
                "write report.json, report.md, report.html, junit.xml",
                (("folder", str(step.folder)),),
                False,
            )
        case HandOver():
            return PlannedCall(
                step.name,
                f"save image {step.tag} into the hand-over folder (only when the report passed)",
                (
                    ("folder", str(step.folder)),
                    (
                        "files",
                        "image.tar.gz, dossier/, build/, report/, PROCEDURE.md, ACCESS.md, manifest.json, SHA256SUMS",
                    ),
                    *(
                        (("sign", f"attestations/ (provenance, verification) with the key {step.sign_key}"),)
                        if step.sign_key is not None
                        else ()
                    ),
                ),
            )
    raise TypeError(f"no description for the step {step!r}")  # pragma: no cover - every step type is matched


def describe_program(
    program: Program, loaded: LoadedDossier, engine_labels: Mapping[str, str], observed: Sequence[str] = ()
) -> list[PlannedCall]:
    """The program's steps in words, after what the observe phase read (`observed`, one line each)."""
    header = [
        PlannedCall(OBSERVE, "read-only facts, before any step", tuple(("read", line) for line in observed), False)
    ]
    return [*(header if observed else []), *(describe(step, loaded, engine_labels) for step in program)]


def render_calls(calls: Sequence[PlannedCall], aliases: Mapping[Path, str] | None = None) -> str:
    """Numbered steps, engine calls and host work alike; `aliases` replaces path prefixes in every value."""
    replacements = sorted(((str(path), alias) for path, alias in (aliases or {}).items()), key=lambda p: -len(p[0]))

    def shown(text: str) -> str:
        for path, alias in replacements:
            text = text.replace(path, alias)
        return text

    lines: list[str] = []
    number = 0
    for call in calls:
        if call.name == OBSERVE:
            # What was read before planning is not a step: unnumbered, so step N is the executor's step N.
            lines.append(f"{OBSERVE}: {shown(call.title)}")
        else:
            number += 1
            where = "engine" if call.engine else "host"
            lines.append(f"{number}. [{where}] {call.name}: {shown(call.title)}")
        lines += [f"     {key}: {shown(value)}" for key, value in call.details]
    return "\n".join(lines) + "\n"


#: The step names of a rendered plan, in order (what `steps.json` records as planned and executed).
STEP_LINE = re.compile(r"^\d+\. \[(?:engine|host)\] ([a-z-]+): ", re.MULTILINE)


def step_names(rendered: str) -> list[str]:
    return STEP_LINE.findall(rendered)
