"""The public corpus (tests/corpus/): real host outputs and failure messages, each with its source, read the way
`orch doctor --from` reads a capture, and each judged against the facts, verdict or explanation it expects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.checks.cuda_verdict import nvidia_host, nvidia_verdict
from orchestrator.checks.failures import explain
from orchestrator.host.amd import parse_amd_smi_version, parse_rocm_smi_driver, parse_rocminfo_agents, rocminfo_gpus
from orchestrator.host.capture import Capture, facts_from_capture, read_capture

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
ENTRIES = sorted(p for p in CORPUS.iterdir() if (p / "manifest.json").is_file())


def _expected(entry: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((entry / "expected.json").read_text(encoding="utf-8"))
    return loaded


def test_the_corpus_holds_at_least_80_real_entries_each_with_a_public_source() -> None:
    assert len(ENTRIES) >= 80
    for entry in ENTRIES:
        source = _expected(entry)["source"]
        assert source.startswith("https://"), entry.name


def test_the_corpus_covers_every_catalogued_cause_and_both_kinds() -> None:
    kinds = {read_capture(entry).manifest["corpus"]["kind"] for entry in ENTRIES}
    causes = {_expected(entry).get("catalogue") for entry in ENTRIES}
    from orchestrator.checks.failures import catalogue

    assert kinds == {"message", "host"}
    assert {cause.id for cause in catalogue()} <= causes


def _dotted(value: Any, path: str) -> Any:
    for part in path.split("."):
        if value is None:
            return None
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("entry", ENTRIES, ids=[p.name for p in ENTRIES])
def test_corpus_entry(entry: Path) -> None:
    capture = read_capture(entry)
    expected = _expected(entry)
    if capture.manifest["corpus"]["kind"] == "message":
        found = [explanation.cause.id for explanation in explain(capture.logs()["message"])]
        assert found[:1] == [expected["catalogue"]], found
        return
    facts = facts_from_capture(capture)
    for key, want in expected.items():
        if key in ("source", "verdict", "l4t", "parsed"):
            continue
        got = _dotted(facts, key)
        if key.endswith(".gpus"):
            assert got is not None and len(got) == len(want)
            for gpu, fields in zip(got, want, strict=True):
                for field, value in fields.items():
                    assert getattr(gpu, field) == value, (field, gpu)
        elif key == "docker.runtimes":
            assert sorted(got) == sorted(want)
        else:
            assert got == want, (key, got)
    for parser, want in expected.get("parsed", {}).items():
        assert _parsed(capture, parser) == want, parser
    if "l4t" in expected:
        assert capture.l4t_release() == expected["l4t"]
    if "verdict" in expected:
        case = expected["verdict"]
        verdict = nvidia_verdict(
            nvidia_host(facts, capture.l4t_release()), case["image_cuda"], require_cuda=case.get("require")
        )
        assert verdict.status == case["status"], verdict.explanation


def _parsed(capture: Capture, parser: str) -> Any:
    """What a tool-output parser reads from a captured command (outputs HostFacts does not carry)."""
    if parser == "amd_smi_version":
        version = parse_amd_smi_version(capture.command_output("amd-smi", "version") or "")
        return {"tool": version.tool, "library": version.library, "rocm": version.rocm, "amdgpu": version.amdgpu}
    if parser == "rocm_smi_driver":
        return parse_rocm_smi_driver(capture.command_output("rocm-smi", "--showdriverversion") or "")
    gpus = rocminfo_gpus(parse_rocminfo_agents(capture.command_output("rocminfo") or ""))
    if parser == "rocminfo_gpus":
        return len(gpus)
    if parser == "rocminfo_chip_ids":
        return [gpu.chip_id for gpu in gpus]
    raise AssertionError(f"unknown parser {parser}")
