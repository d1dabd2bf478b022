"""The failure catalogue: data, one entry per cause with real cited messages, a pure matcher, and the generated
section of docs/troubleshooting.md kept in step with it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from orchestrator.checks.failures import catalogue, explain, explain_first, troubleshooting_section

DOC = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_every_cause_has_a_layer_a_next_step_and_a_cited_real_message_it_matches() -> None:
    ids = [cause.id for cause in catalogue()]
    assert len(ids) == len(set(ids)) >= 15
    for cause in catalogue():
        assert cause.layer in ("host", "image", "device", "sample")
        assert cause.cause.endswith(".") and cause.next_step
        assert cause.examples
        for example in cause.examples:
            assert example.source.startswith("https://")
            first = explain_first(example.message)
            assert first is not None and first.cause.id == cause.id, (cause.id, example.message)


def test_driver_too_old_reads_the_drivers_cuda_version() -> None:
    found = explain_first("The NVIDIA driver on your system is too old (found version 11040).")
    assert found is not None and found.detail == "found version 11040 = CUDA 11.4"
    assert found.sentence().startswith("[host or image] torch was built for a newer CUDA")


def test_a_wrapped_message_is_still_recognised() -> None:
    assert [e.cause.id for e in explain("requirement error: unsatisfied condi\ntion: cuda >= 9.0")] == [
        "toolkit-require-unsatisfied"
    ]


def test_unrelated_text_explains_nothing() -> None:
    assert explain("Successfully built 3f2a1b") == []


def test_the_troubleshooting_catalogue_section_is_generated_from_the_data() -> None:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- failure-catalogue:start -->\n(.*)<!-- failure-catalogue:end -->", text, re.S)
    assert match is not None, "docs/troubleshooting.md lost its failure-catalogue markers"
    assert match.group(1) == troubleshooting_section(), (
        "docs/troubleshooting.md's catalogue is stale; regenerate it from orchestrator/data/failures.json "
        "(orchestrator.checks.failures.troubleshooting_section)"
    )


def test_report_explanations_name_where_each_cause_was_seen_once() -> None:
    from orchestrator.checks.failures import explanations_for_report

    found = explanations_for_report(
        {
            "probe warnings": "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old "
            "(found version 11040).",
            "probe stderr": "The NVIDIA driver on your system is too old (found version 11040).",
            "start error": None,
        }
    )
    assert [(f["id"], f["seen_in"]) for f in found] == [("torch-driver-too-old", "probe warnings")]
    assert found[0]["cause"].endswith("(found version 11040 = CUDA 11.4)")


# GPU messages that are not setup failures, from public reports: the catalogue must not claim them.
NOT_SETUP = [
    # https://github.com/antgroup/echomimic_v2/issues/115
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 GiB. GPU 0 has a total capacity of "
    "15.69 GiB of which 3.71 GiB is free.",
    # https://github.com/vllm-project/vllm/issues/6976
    "ERROR 09-27 06:46:46 engine.py:157] RuntimeError: CUDA error: an illegal memory access was encountered",
    # https://github.com/Deci-AI/super-gradients/issues/1307
    "../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [68,0,0], thread: [64,0,0] Assertion "
    '`index >= -sizes[i] && index < sizes[i] && "index out of bounds"` failed.',
]


def test_gpu_messages_that_are_not_setup_failures_explain_nothing() -> None:
    for message in NOT_SETUP:
        assert explain(message) == [], message
    # The held-out rounds' decoys (docs/troubleshooting.md, "How the catalogue is judged"), each from its source.
    decoys = [json.loads(line) for line in (FIXTURES / "failures-not-setup.jsonl").read_text().splitlines()]
    assert len(decoys) >= 9
    for decoy in decoys:
        assert decoy["source"].startswith("https://") and explain(decoy["message"]) == [], decoy["source"]


def test_a_code_is_recognised_by_name_by_string_and_by_number_next_to_the_vendors_word() -> None:
    for message in (
        "code=35(cudaErrorInsufficientDriver)",
        "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
        "onnxruntime::CudaCall CUDA failure 35: x",
        "CUDA error: 35 (0x23)",
        "cudaGetDeviceCount returned 35",
    ):
        found = explain_first(message)
        assert found is not None and found.cause.id == "cuda-insufficient-driver", message
    # A bare number, or the number in another context, is not the code.
    assert explain("processed 35 files; line 35 of CUDA error.log") == []


def test_a_check_against_success_is_read_as_the_code_it_got() -> None:
    # TensorFlow's and glog's CHECK lines put the result after the call: "(0 vs. 216)", or first: "(35 vs. 0)".
    driver = explain_first("Check failed: CUDA_SUCCESS == dynload::cuCtxSetCurrent(context) (0 vs. 216)")
    assert driver is not None and driver.cause.id == "cuda-devices-unavailable"
    runtime = explain_first("Check failed: cudaSuccess == cudaGetDeviceCount(&n) (35 vs. 0)")
    assert runtime is not None and runtime.cause.id == "cuda-insufficient-driver"
    # Another number that merely starts with a code's digits, or success against success, is no code.
    assert explain("Check failed: CUDA_SUCCESS == cuMemAlloc(&p, n) (0 vs. 2160)") == []
    assert explain("Check failed: CUDA_SUCCESS == cuInit(0) (0 vs. 0)") == []


def test_dockers_old_unquoted_no_driver_wording_is_the_same_cause() -> None:
    # https://github.com/NVIDIA/nvidia-docker/issues/1642 (the empty driver name printed without its quotes)
    found = explain_first(
        "docker: Error response from daemon: could not select device driver with capabilities: [[gpu]]."
    )
    assert found is not None and found.cause.id == "docker-no-gpu-driver"
    cdi = explain_first('could not select device driver "cdi" with capabilities: []')
    assert cdi is not None and cdi.cause.id == "cdi-driver-not-enabled"
    assert "Install the NVIDIA Container Toolkit" not in cdi.cause.next_step


def test_every_entry_cites_where_its_codes_are_defined() -> None:
    for cause in catalogue():
        assert cause.vendor_sources and all(source.startswith("https://") for source in cause.vendor_sources)
        assert cause.appears_in


def test_a_mismatch_between_two_layers_names_both_and_one_layer_causes_name_one() -> None:
    """A driver older than the image's CUDA is fixed on the host (a newer driver) or in the image (an older CUDA):
    the message cannot tell which side moved, so the report carries both. A cause in one layer carries one."""
    from orchestrator.checks.failures import explanations_for_report

    mismatch, one_layer = explanations_for_report(
        {
            "probe stderr": "RuntimeError: CUDA driver version is insufficient for CUDA runtime version",
            "probe warnings": "RuntimeError: CUDA error: invalid device ordinal",
        }
    )
    assert (mismatch["id"], mismatch["layer"], mismatch["other_layer"]) == ("cuda-insufficient-driver", "host", "image")
    assert (one_layer["id"], one_layer["layer"]) == ("invalid-device-ordinal", "device")
    assert "other_layer" not in one_layer
    assert {cause.other_layer for cause in catalogue()} <= {None, "host", "image", "device"}
    assert all(cause.other_layer != cause.layer for cause in catalogue())


def test_doctor_prints_each_explanations_layer_in_brackets() -> None:
    """rich reads "[host]" as a style tag and prints nothing: the layer must reach the terminal escaped."""
    import io

    from rich.console import Console

    from orchestrator.checks.failures import explanations_for_report
    from orchestrator.cli.summary import print_doctor
    from orchestrator.model.host import HostFacts
    from orchestrator.pipeline.doctor import Diagnosis

    found = explanations_for_report(
        {"command nvidia-smi": "The NVIDIA driver on your system is too old (found version 11040)."}
    )
    buffer = io.StringIO()
    host = HostFacts(kernel="6.1", nvidia=None, amd=None, docker=None)
    print_doctor(Console(file=buffer, width=400), Diagnosis(host=host, explanations=found))
    assert "command nvidia-smi: [host or image] torch was built for a newer CUDA" in buffer.getvalue()


def test_broad_wordings_are_read_only_when_no_narrower_entry_matches() -> None:
    """A broad pattern explains a cause in words nobody has collected, but never adds a vaguer second cause to a
    wording a narrower entry knows."""
    insufficient = next(cause for cause in catalogue() if cause.id == "cuda-insufficient-driver")
    known = "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 11040)."
    assert any(pattern.search(known) for pattern in insufficient.broad_patterns)
    assert [found.cause.id for found in explain(known)] == ["torch-driver-too-old"]
    unseen = "fatal: the installed GPU driver is outdated for this build of the renderer"
    assert not any(pattern.search(unseen) for cause in catalogue() for pattern in cause.patterns)
    assert [found.cause.id for found in explain(unseen)] == ["cuda-insufficient-driver"]
    assert explain("fatal: the renderer could not open its output file") == []


def test_every_broad_pattern_reads_a_real_example_of_its_own_cause() -> None:
    """A broad pattern is the idea of real messages, not a guess: each one reads at least one of its cause's cited
    examples (whitespace collapsed, as the matcher also tries)."""
    broad = [(cause, pattern) for cause in catalogue() for pattern in cause.broad_patterns]
    assert len(broad) >= 10
    for cause, pattern in broad:
        examples = [" ".join(example.message.split()) for example in cause.examples]
        assert any(pattern.search(message) for message in examples), (cause.id, pattern.pattern)
