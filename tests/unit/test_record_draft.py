"""`orch record`'s pure parts: redaction of paths and credentials, the container's command, the draft."""

from __future__ import annotations

from pathlib import Path

from orchestrator.dossier.models import Dossier
from orchestrator.record.draft import (
    Mapped,
    container_command,
    draft_document,
    fields_to_confirm,
    spread_sentence,
)
from orchestrator.record.outputs import ObservedOutput, merge_spread
from orchestrator.record.redaction import Redactor


def test_credentials_and_local_paths_are_replaced_and_listed_never_kept() -> None:
    redactor = Redactor(extra_roots=["/opt/me"])
    document = {
        "installed": [
            {"name": "mylib", "direct_url": {"url": "file:///home/alice/src/mylib"}},
            {"name": "torch", "direct_url": None},
        ],
        "pip_config": ["global.index-url='https://bob:s3cret@pypi.example.com/simple'"],
        "executable": "/opt/me/venv/bin/python",
        "kept": "/usr/lib/python3.11",
    }
    cleaned = redactor.value(document, "env")
    assert cleaned["installed"][0]["direct_url"]["url"] == "file://<local path>"
    assert cleaned["pip_config"] == ["global.index-url='https://****@pypi.example.com/simple'"]
    assert cleaned["executable"] == "<local path>"
    assert cleaned["kept"] == "/usr/lib/python3.11"  # a system path says nothing about a person
    listed = {(item.where, item.kind) for item in redactor.found}
    assert ("env > installed > mylib > direct_url > url", "local path") in listed
    assert ("env > pip_config > 0", "credential") in listed
    assert all("s3cret" not in item.shown and "alice" not in item.shown for item in redactor.found)


def test_the_reference_command_is_mapped_to_the_containers_folders() -> None:
    mapped = [
        Mapped("/data/run/out", "/orch/output"),
        Mapped("/data/in/sample.jsonl", "/orch/input/sample/sample.jsonl"),
        Mapped("/data/w/model.bin", "/orch/weights/model.bin"),
    ]
    argv = ["/venv/bin/python3", "embed.py", "--input", "/data/in/sample.jsonl", "--output=/data/run/out/",
            "--weights", "/data/w/model.bin", "--log", "/data/run/out/log.txt", "--n", "3"]  # fmt: skip
    assert container_command(argv, mapped) == [
        "python", "embed.py", "--input", "/orch/input/sample/sample.jsonl", "--output=/orch/output/",
        "--weights", "/orch/weights/model.bin", "--log", "/orch/output/log.txt", "--n", "3",
    ]  # fmt: skip


def _outputs() -> list[ObservedOutput]:
    embeddings = ObservedOutput("embeddings.npy", "npy", "a" * 64, shape=[12, 16], dtype="float32", finite=True)
    for spread in ({"identical": False, "max_abs": 2e-7, "min_cosine": 0.9999999}, {"identical": True, "max_abs": 0.0}):
        merge_spread(embeddings.spread, spread)
    ids = ObservedOutput("ids.json", "json", "b" * 64, is_ids=True)
    other = ObservedOutput("log.txt", None, "c" * 64)
    return [embeddings, ids, other]


def test_the_draft_proposes_the_measured_spread_and_marks_it_for_a_person() -> None:
    outputs = _outputs()
    assert (
        spread_sentence(outputs[0])
        == "2 rerun(s) on the reference host, max |a-b| = 2e-07, smallest row cosine = 0.9999999"
    )
    assert "no rerun was measured" in spread_sentence(ObservedOutput("x.npy", "npy", "d" * 64))
    document = draft_document(
        name="recorded",
        entrypoint="embed.py",
        options_note="python embed.py",
        python_version="3.11",
        platform="cpu",
        backend_version=None,
        base_image="orch/debian-python:bookworm",
        torch_index="https://download.pytorch.org/whl/cpu",
        command=["python", "embed.py"],
        inputs=[{"path": "sample/sample.jsonl", "sha256": "e" * 64}],
        weights=[],
        outputs=outputs,
        timeout_s=60,
    )
    dossier = Dossier.model_validate(document)  # a draft is a valid dossier from the start
    (embeddings,) = dossier.expect.outputs  # the ids file pairs with the array; log.txt is not comparable
    assert embeddings.ids is not None and embeddings.ids.file == "ids.json"
    assert embeddings.compare is not None and embeddings.compare.metric == "max_abs"
    assert embeddings.compare.max == 2e-7  # type: ignore[union-attr]
    assert fields_to_confirm(document) == ["description", "expect.outputs[0].compare.justification"]
    assert dossier.python.indexes[0].url == "https://download.pytorch.org/whl/cpu"


def test_a_rerun_is_measured_against_the_reference_with_the_sample_stages_metrics(tmp_path: Path) -> None:
    import numpy as np

    from orchestrator.record.outputs import measure_spread, observe_output

    reference, rerun, same = tmp_path / "ref.npy", tmp_path / "rerun.npy", tmp_path / "same.npy"
    values = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    np.save(reference, values)
    np.save(same, values)
    np.save(rerun, values + np.float32(1e-3))
    observed = observe_output(reference, "ref.npy")
    assert (observed.format, observed.shape, observed.dtype, observed.finite) == ("npy", [2, 2], "float32", True)
    assert measure_spread(reference, same, observed)["identical"] is True
    spread = measure_spread(reference, rerun, observed)
    assert spread["identical"] is False
    assert abs(float(spread["max_abs"]) - 1e-3) < 1e-6  # type: ignore[arg-type]
    assert 0.999 < float(spread["min_cosine"]) < 1.0  # type: ignore[arg-type]
    assert measure_spread(reference, tmp_path / "absent.npy", observed) == {"missing": True}


def test_the_base_image_comes_from_the_image_facts_where_the_table_allows() -> None:
    from orchestrator.record.image import base_for

    debian = {"ID": "debian", "VERSION_ID": "12"}
    assert base_for(debian, "3.11", "cpu", None) == ("python:3.11-slim-bookworm", None)
    ubuntu = {"ID": "ubuntu", "VERSION_ID": "22.04"}
    assert base_for(ubuntu, "3.10", "cuda", "12.4")[0] == "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"
    ref, why = base_for({"ID": "ubuntu", "VERSION_ID": "20.04"}, "3.8", "cuda", "12.4")
    assert ref is None and why is not None and why.startswith("TO CONFIRM: the reference image runs ubuntu-20.04")
    document = draft_document(
        name="in-image", entrypoint="run.py", options_note="python run.py", python_version="3.8", platform="cuda",
        backend_version="12.4", base_image=None, torch_index=None, command=["python", "run.py"], inputs=[],
        weights=[], outputs=_outputs(), timeout_s=60, base_image_note=why,
    )  # fmt: skip
    Dossier.model_validate(document)  # still a valid dossier: the decision is asked, not guessed
    assert "code.options.base_image" in fields_to_confirm(document)
