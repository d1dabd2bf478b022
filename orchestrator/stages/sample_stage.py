"""The sample stage: fingerprints verified, determinism applied, the sample command run with inputs
read-only, then the host re-reads the outputs and compares them with the reference."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from orchestrator.dossier.fingerprints import FINGERPRINT_NEXT_STEP
from orchestrator.dossier.load import LoadedDossier, where_differ
from orchestrator.dossier.sources import cached_object
from orchestrator.engine import Engine, describe_exit
from orchestrator.errors import OutputMissing, UnsafeOutput
from orchestrator.model.checks import Check, first_failure
from orchestrator.model.report import StageError, StageResult
from orchestrator.plan.run import RunPlan
from orchestrator.plan.specs import RUNTIME_UID
from orchestrator.remote.cache import content_sha256
from orchestrator.resources import probe_source
from orchestrator.stages.results import check, stage_result
from orchestrator.untrusted import read_output_json

#: Largest meta file (determinism.json) the host reads back from a sample: a few hundred bytes are normal.
META_MAX_BYTES = 64 << 10


def verify_fingerprints(loaded: LoadedDossier, sources_cache: Path | None = None) -> list[Check]:
    """Inputs, data and weights are hashed on the host before anything runs; a mismatch stops the sample.

    A remote item is hashed where the sample will see it: its object in the host's cache (step `fetch` put it
    there; a copy changed since is caught here, just before the container starts)."""
    checks: list[Check] = []
    model = loaded.model
    items: list[tuple[str, str | None, str | None, str]] = [
        (f"input {item.path}", item.path, None, item.sha256) for item in model.expect.inputs
    ]
    items += [
        (f"{kind} {a.name}", a.path, a.uri, a.sha256)
        for kind, group in (("data", model.data), ("weights", model.weights))
        for a in group
    ]
    for label, path, uri, expected in items:
        if path is None:
            cached = None if sources_cache is None else cached_object(sources_cache, expected)
            if cached is None or not cached.exists():
                checks.append(
                    check(
                        f"{label} fingerprint",
                        f"sha256 {expected}",
                        f"remote ({uri}): not in the cache {sources_cache or '(none)'}",
                        False,
                        "run `orch fetch DOSSIER` (or the probe, whose step `fetch` gets it) with the item's "
                        "access variable set",
                    )
                )
                continue
            observed = content_sha256(cached)
            checks.append(
                check(
                    f"{label} fingerprint",
                    f"sha256 {expected}",
                    f"sha256 {observed}",
                    observed == expected,
                    None
                    if observed == expected
                    else f"the cached copy of {uri} changed after it was fetched: {where_differ(expected, observed)}; "
                    "run `orch fetch DOSSIER` again (it removes and refetches a changed copy)",
                )
            )
            continue
        observed = loaded.fingerprint(path)
        checks.append(
            check(
                f"{label} fingerprint",
                f"sha256 {expected}",  # in full: two hashes cut short can look the same
                f"sha256 {observed}",
                observed == expected,
                None if observed == expected else f"{where_differ(expected, observed)}. {FINGERPRINT_NEXT_STEP}",
            )
        )
    return checks


def fingerprint_facts(checks: list[Check]) -> dict[str, dict[str, str]]:
    """Both hashes of every fingerprint check, for report.json's facts (what a script compares)."""
    return {
        check.name: {
            "expected": check.expected.removeprefix("sha256 "),
            "observed": check.observed.removeprefix("sha256 "),
        }
        for check in checks
    }


def _prepare_output(folder: Path, rootless_engine: bool) -> None:
    """An empty folder the sample (uid 10001 inside the container) may write.

    As root with a rootful engine, the folder is given to uid 10001. A rootless engine (Podman as a user,
    rootless Docker) maps the container's 10001 to one of its user's sub-ids, not to 10001 on the host, so
    the folder is opened to all instead, as it is when orch itself does not run as root."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    if os.geteuid() == 0 and not rootless_engine:
        os.chown(folder, RUNTIME_UID, RUNTIME_UID)
    else:
        folder.chmod(0o777)


def sample_stage(engine: Engine, loaded: LoadedDossier, plan: RunPlan) -> StageResult:
    """Verify the fingerprints, prepare the plan's folders, run the plan's sample, re-read its outputs."""
    from orchestrator.checks.sample import sample_checks

    started = time.monotonic()
    fingerprints = verify_fingerprints(loaded, plan.folders.sources_cache)
    if first_failure(fingerprints) is not None:
        return stage_result(
            "sample", started, fingerprints, {"ran": False, "fingerprints": fingerprint_facts(fingerprints)}
        )
    folders, spec = plan.folders, plan.sample
    output, meta, site = folders.output, folders.meta, folders.site
    _prepare_output(output, folders.rootless_engine)
    _prepare_output(meta, folders.rootless_engine)
    # Only sitecustomize.py goes on the sample's PYTHONPATH: the other probes' module names (device,
    # inventory) would shadow packages of the same name in the image.
    if site.exists():
        shutil.rmtree(site)
    site.mkdir()
    (site / "sitecustomize.py").write_text(probe_source("sitecustomize.py"), encoding="utf-8")
    site.chmod(0o755)
    expect = loaded.model.expect
    outcome = engine.run(spec)
    folders.log.write_text(
        outcome.stdout + ("\n--- stderr ---\n" + outcome.stderr if outcome.stderr else ""), encoding="utf-8"
    )
    facts: dict[str, Any] = {
        "command": list(expect.command),
        "exit_code": outcome.exit_code,
        "seconds": round(outcome.duration_s, 3),
        "output_folder": str(output),
        "log": str(folders.log),
        "fingerprints": fingerprint_facts(fingerprints),
    }
    if outcome.stdout_cut or outcome.stderr_cut:
        facts["log_cut_bytes"] = {"stdout": outcome.stdout_cut, "stderr": outcome.stderr_cut}
    meta_checks: list[Check] = []
    try:
        facts["determinism"] = read_output_json(meta, "determinism.json", META_MAX_BYTES)
    except OutputMissing:
        facts["determinism"] = "not applied (the sample started no Python process that imported the probe site)"
    except UnsafeOutput as exc:
        facts["determinism"] = "refused (see the failed check)"
        meta_checks.append(
            check("determinism record", "a regular JSON file written by the probe site", f"refused: {exc}", False)
        )
    if outcome.timed_out:
        return stage_result(
            "sample",
            started,
            fingerprints + meta_checks,
            facts,
            error=StageError(step="sample command", message=f"stopped at its timeout of {expect.timeout_s}s"),
        )
    if outcome.exit_code != 0:
        return stage_result(
            "sample",
            started,
            fingerprints + meta_checks,
            facts,
            error=StageError(
                step="sample command",
                message=describe_exit(
                    outcome,
                    spec,
                    f"if the sample needs more, raise expect.limits.memory_mib in the dossier "
                    f"(now {expect.limits.memory_mib})",
                ),
            ),
        )
    return stage_result("sample", started, fingerprints + meta_checks + sample_checks(loaded, output), facts)
