"""The two in-toto statements of a hand-over (and of a published image), and how they are checked.

1. **Provenance** (`predicateType https://slsa.dev/provenance/v1`): what was built from what. Subject: the
   image by its config digest (its image id), named by its tag, and, once pushed, the repository by its
   manifest digest. `buildDefinition.externalParameters` carry the dossier (name, identity, variant,
   platform); `resolvedDependencies` the dossier file, the rendered Dockerfile, the lock, the wheel hashes,
   the base image (by id, and by repository digest when known) and the code revision (marked
   `dirty` when the checkout had uncommitted changes);
   `runDetails.builder` names orch and the builder kind, with orch's version; `byproducts` the image
   archive, build.json, the SBOM, the environment list and the observed inventory.
2. **Verification** (`predicateType https://in-toto.io/attestation/test-result/v0.1`): what the report said.
   `result` PASSED/FAILED is the report's verdict; `passedTests`, `failedTests` and `warnedTests` are the
   stages (image, host, device, sample) that passed, failed, and were skipped or not run;
   `configuration` names the report, the dossier, manifest.json, SHA256SUMS and the environment digest.

Every resource descriptor that is a file of the hand-over folder carries the annotation
`{"orch.handover": "file"}` and its path as `name`; `orch verify --trust` re-hashes each of them, so one
changed byte anywhere is caught (SHA256SUMS is one of them, and it lists every other file).

Both are checked with the in-toto attestation bindings' own parsers: the statement by
`in_toto_attestation.v1.statement.Statement.validate`, each predicate by parsing it into its protobuf
message (`provenance.v1.Provenance`, `test_result.v0.TestResult`) with unknown fields refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement

from orchestrator.errors import AttestationRefused

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PROVENANCE = "https://slsa.dev/provenance/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
#: orch's build type: a dossier rendered, locked and built by orch (docs/attestations.md describes it).
BUILD_TYPE = "urn:orch:build-type:rebuild:v1"
BUILDER_ID = "urn:orch:builder"
HANDOVER_FILE = {"orch.handover": "file"}
#: The names a hand-over folder gives its two attestations (and the registry's attestation image).
PROVENANCE_FILE = "provenance.dsse.json"
VERIFICATION_FILE = "verification.dsse.json"
REPORT_NAME = "report/report.json"


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def file_descriptor(name: str, sha256: str) -> dict[str, Any]:
    return {"name": name, "digest": {"sha256": _hex(sha256)}, "annotations": dict(HANDOVER_FILE)}


@dataclass(frozen=True)
class BuildFacts:
    """What the provenance says, gathered from build.json, the report and the dossier."""

    image_id: str
    image_tag: str
    dossier_name: str
    identity: str
    variant: str | None
    platform: str
    orch_version: str
    builder: str
    base_ref: str
    base_id: str
    base_digest: str | None
    code_source: str
    code_revision: str | None
    install_mode: str
    context_digest: str
    #: Files of the hand-over (relative path → sha256): each is named where it belongs.
    files: dict[str, str]
    dossier_file: str
    #: `registry/repository@sha256:…` once pushed.
    pinned: str | None = None
    #: The checkout had uncommitted changes when it was built.
    code_dirty: bool = False
    #: Stage name → status, and the verdict, for the verification statement.
    stages: dict[str, str] = field(default_factory=dict)
    verdict: str = "failed"
    environment_digest: str | None = None


def subjects(facts: BuildFacts) -> list[dict[str, Any]]:
    found = [{"name": facts.image_tag, "digest": {"sha256": _hex(facts.image_id)}}]
    if facts.pinned is not None:
        repository, _, digest = facts.pinned.partition("@")
        found.append({"name": repository, "digest": {"sha256": _hex(digest)}})
    return found


def _files(facts: BuildFacts, names: list[str]) -> list[dict[str, Any]]:
    return [file_descriptor(name, facts.files[name]) for name in names if name in facts.files]


def provenance_statement(facts: BuildFacts) -> dict[str, Any]:
    base: dict[str, Any] = {"name": facts.base_ref, "digest": {"sha256": _hex(facts.base_id)}}
    if facts.base_digest:
        base["annotations"] = {"repositoryDigest": facts.base_digest}
    dependencies = [
        *_files(
            facts,
            [f"dossier/{facts.dossier_file}", "build/Dockerfile", "build/requirements.lock", "build/wheels.sha256"],
        ),
        base,
    ]
    if facts.code_revision:
        code: dict[str, Any] = {"name": f"code:{facts.code_source}", "digest": {"gitCommit": facts.code_revision}}
        if facts.code_dirty:
            # The commit does not describe the files built: uncommitted changes were in the checkout.
            code["annotations"] = {"dirty": True}
        dependencies.append(code)
    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "dossier": {
                    "name": facts.dossier_name,
                    "identity": facts.identity,
                    "variant": facts.variant or "",
                    "file": f"dossier/{facts.dossier_file}",
                },
                "platform": facts.platform,
            },
            "internalParameters": {
                "builder": facts.builder,
                "installMode": facts.install_mode,
                "contextDigest": facts.context_digest,
            },
            "resolvedDependencies": dependencies,
        },
        "runDetails": {
            "builder": {"id": f"{BUILDER_ID}:{facts.builder}", "version": {"orch": facts.orch_version}},
            "byproducts": _files(
                facts,
                [
                    "image.tar.gz",
                    "build/build.json",
                    "build/sbom.cdx.json",
                    "build/environment.json",
                    "build/pip-freeze.txt",
                ],
            ),
        },
    }
    return checked_statement(
        {"_type": STATEMENT_TYPE, "subject": subjects(facts), "predicateType": PROVENANCE, "predicate": predicate},
        "provenance",
    )


def verification_statement(facts: BuildFacts) -> dict[str, Any]:
    by_status: dict[str, list[str]] = {"passed": [], "failed": [], "warned": []}
    for name, status in facts.stages.items():
        by_status[status if status in ("passed", "failed") else "warned"].append(name)
    configuration = _files(
        facts, [REPORT_NAME, f"dossier/{facts.dossier_file}", "report/junit.xml", "manifest.json", "SHA256SUMS"]
    )
    if facts.environment_digest:
        configuration.append({"name": "environment", "digest": {"sha256": _hex(facts.environment_digest)}})
    predicate = {
        "result": "PASSED" if facts.verdict == "passed" else "FAILED",
        "configuration": configuration,
        "passedTests": by_status["passed"],
        "warnedTests": by_status["warned"],
        "failedTests": by_status["failed"],
    }
    return checked_statement(
        {"_type": STATEMENT_TYPE, "subject": subjects(facts), "predicateType": TEST_RESULT, "predicate": predicate},
        "verification",
    )


_PREDICATES = {PROVENANCE: provenance_pb2.Provenance, TEST_RESULT: test_result_pb2.TestResult}


def checked_statement(statement: dict[str, Any], display: str) -> dict[str, Any]:
    """`statement` once the in-toto bindings parse and validate it (AttestationRefused naming `display`)."""
    try:
        message = json_format.ParseDict(statement, statement_pb2.Statement())
        Statement.copy_from_pb(message).validate()
        predicate_type = statement.get("predicateType")
        if predicate_type not in _PREDICATES:
            raise ValueError(
                f"predicate type {ascii(str(predicate_type))[:80]} is neither {PROVENANCE} nor {TEST_RESULT}"
            )
        json_format.ParseDict(statement["predicate"], _PREDICATES[predicate_type]())
    except (json_format.ParseError, ValueError, TypeError, KeyError, RecursionError) as exc:
        raise AttestationRefused(f"{display}: not a valid in-toto statement ({ascii(str(exc))[:160]})") from None
    return statement


def descriptors(statement: dict[str, Any]) -> list[dict[str, Any]]:
    """Every resource descriptor of a checked statement: its subjects and those of its predicate."""
    predicate = statement["predicate"]
    found = list(statement["subject"])
    if statement["predicateType"] == PROVENANCE:
        found += predicate.get("buildDefinition", {}).get("resolvedDependencies", [])
        found += predicate.get("runDetails", {}).get("byproducts", [])
    else:
        found += predicate.get("configuration", [])
    return [item for item in found if isinstance(item, dict)]


def attested_files(statement: dict[str, Any]) -> dict[str, str]:
    """The hand-over files a checked statement names (path → sha256 hex)."""
    files: dict[str, str] = {}
    for item in descriptors(statement):
        if item.get("annotations") == HANDOVER_FILE:
            files[str(item.get("name", ""))] = str(item.get("digest", {}).get("sha256", ""))
    return files


def subject_digests(statement: dict[str, Any]) -> set[str]:
    return {str(item.get("digest", {}).get("sha256", "")) for item in statement["subject"] if isinstance(item, dict)}
