"""The plan in words: every engine call orch will make, in order, with its arguments (`--dry-run`).

Pure: it reads plan values only. A value known only once an earlier step has run (the built image's id)
is a placeholder naming that step. Paths can be shown through aliases (`<dossier>`, `<out>`), so a golden
file of the plan does not depend on where the repository lies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.dossier.load import LoadedDossier
from orchestrator.plan.build import CONTEXT_DIGEST_LABEL, FEED_PATHS, BuildSteps
from orchestrator.plan.extension_check import extension_check_spec
from orchestrator.plan.run import PROBE_LABEL, RunPlan
from orchestrator.plan.specs import RunSpec

MANAGED = ("io.orch.managed", "true")
#: The build's step number in `build_calls`: what a later step names as the image it runs.
BUILD_STEP = 4
BUILT_IMAGE = f"<image built by step {BUILD_STEP}>"


@dataclass(frozen=True)
class PlannedCall:
    """One step: an engine call (`engine=True`) or host-side work orch does between them."""

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


def build_calls(loaded: LoadedDossier, steps: BuildSteps, engine_labels: Mapping[str, str]) -> list[PlannedCall]:
    base = loaded.base_image
    plan = steps.plan
    pinned = f"; must be {base.image_id} (the dossier pins it)" if base.image_id else ""
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
    # The feed is part of the build step (its numbering is fixed: BUILD_STEP), started before it, removed after.
    feed: list[tuple[str, str]] = []
    if steps.feed is not None:
        feed = [
            ("wheel feed", f"a container of {base.from_line} started first, removed after the build"),
            ("wheel feed command", " ".join(steps.feed.command)),
            ("wheel feed serves", f"{', '.join(FEED_PATHS)} of the context, copied in with the archive API"),
            ("wheel feed network", f"none: its loopback only, which the build joins; user {steps.feed.user}"),
        ]
    return [
        PlannedCall(f"inspect image {base.from_line} (pull it if absent{pinned})"),
        PlannedCall(f"inspect image {steps.tag} (its created label is kept when it has this identity)"),
        PlannedCall("render the build context", tuple(context), engine=False),
        PlannedCall(
            f"build image {steps.tag}"
            + (
                ""
                if steps.no_cache
                else " (not run when step 2's image has this identity and context digest: that image is reused)"
            ),
            (
                (
                    "context",
                    f"{steps.context_dir}{' without wheels/' if steps.feed else ''} as a normalised tar "
                    "(fixed owner and mtime)",
                ),
                ("network", steps.network + (" (the feed's namespace: loopback only)" if steps.feed else "")),
                *feed,
                ("cache", "off (--no-cache)" if steps.no_cache else "on"),
                ("build label", f"{CONTEXT_DIGEST_LABEL}=<sha256 of the context: each file's path, mode and sha256>"),
                *_labels("label", dict(plan.labels)),
                *_labels("builder stage label", dict(plan.builder_labels)),
                *_labels("every stage's label (ORCH_LABELS)", dict(plan.stage_labels)),
            ),
        ),
        PlannedCall(f"inspect image {steps.tag} (the built image's id)"),
        PlannedCall(
            "run the inventory probe (skipped when build.json of the same image id holds it)",
            run_details(steps.inventory, engine_labels),
        ),
    ]


def probe_calls(
    loaded: LoadedDossier,
    image_ref: str,
    run: RunPlan,
    engine_labels: Mapping[str, str],
    *,
    after_build: bool,
    host_notes: Sequence[str] = (),
) -> list[PlannedCall]:
    calls: list[PlannedCall] = []
    if not after_build:
        calls.append(PlannedCall(f"inspect image {image_ref} (it must exist: `orch build` makes it)"))
        calls.append(
            PlannedCall(
                "run the inventory probe (skipped when build.json of this image id holds it)",
                run_details(run.inventory, engine_labels),
            )
        )
    calls.append(
        PlannedCall(
            "read the engine's information and the host's GPU facts (driver, runtime, CDI, /dev/kfd)",
            (("gpu mapping", run.mapping.description), *(("note", note) for note in host_notes)),
        )
    )
    calls.append(
        PlannedCall(
            "run the device probe (not run when the host's driver cannot run the image's CUDA)",
            run_details(run.device, engine_labels),
        )
    )
    extension_check = extension_check_spec(loaded, run.device)
    if extension_check is not None:
        calls.append(
            PlannedCall(
                "run the extensions' own check (its own device-stage line, in the device probe's container set-up)",
                run_details(extension_check, engine_labels),
            )
        )
    fingerprinted = [item.path for item in loaded.model.expect.inputs]
    fingerprinted += [a.path or a.uri or a.name for a in (*loaded.model.data, *loaded.model.weights)]
    calls.append(
        PlannedCall(
            "verify fingerprints and prepare the sample's folders",
            (
                *(("sha256", str(path)) for path in fingerprinted),
                ("output", f"{run.folders.output} (emptied, writable by uid 10001)"),
                ("meta", str(run.folders.meta)),
                ("probe site", f"{run.folders.site} (sitecustomize.py)"),
            ),
            engine=False,
        )
    )
    calls.append(
        PlannedCall(
            "run the sample (only when the device stage passed and every fingerprint matches)",
            run_details(run.sample, engine_labels),
        )
    )
    return calls


def render_calls(calls: Sequence[PlannedCall], aliases: Mapping[Path, str] | None = None) -> str:
    """Numbered steps, engine calls and host work alike; `aliases` replaces path prefixes in every value."""
    replacements = sorted(((str(path), alias) for path, alias in (aliases or {}).items()), key=lambda p: -len(p[0]))

    def shown(text: str) -> str:
        for path, alias in replacements:
            text = text.replace(path, alias)
        return text

    lines: list[str] = []
    for number, call in enumerate(calls, start=1):
        where = "engine" if call.engine else "host"
        lines.append(f"{number}. [{where}] {shown(call.title)}")
        lines += [f"     {key}: {shown(value)}" for key, value in call.details]
    return "\n".join(lines) + "\n"
