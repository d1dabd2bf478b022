"""The image's layers in build.json: the engine's history mapped to the rendered Dockerfile's steps, sizes kept,
build-arg values and credentials never written; the report shows them as a table with the total."""

from __future__ import annotations

from orchestrator.engine import LayerEntry
from orchestrator.model.report import StageResult
from orchestrator.report.view import format_bytes, layer_rows
from orchestrator.stages.image_layers import (
    BASE_STEP,
    final_stage_instructions,
    map_layers,
    public_created_by,
)

DOCKERFILE = """\
# syntax: classic builder
FROM orch/debian-python:bookworm AS builder
RUN python -m venv /opt/venv
FROM orch/debian-python:bookworm
ENV PATH=/opt/venv/bin:$PATH
COPY --from=builder /opt/venv /opt/venv
RUN useradd --uid 10001 app \\
    && mkdir /orch
LABEL io.orch.version="0.1.0"
"""

HISTORY = [
    LayerEntry("/bin/sh -c #(nop) ADD file:4a5b in / ", 116_000_000),
    LayerEntry('/bin/sh -c #(nop)  CMD ["bash"]', 0),
    LayerEntry("/bin/sh -c #(nop)  ENV PATH=/opt/venv/bin:$PATH", 0),
    LayerEntry("/bin/sh -c #(nop) COPY dir:9c8d in /opt/venv ", 700_000_000),
    LayerEntry("|1 TOKEN=s3cr3t /bin/sh -c useradd --uid 10001 app     && mkdir /orch", 330_000),
    LayerEntry('/bin/sh -c #(nop)  LABEL io.orch.version="0.1.0"', 0),
]


def test_final_stage_instructions_join_continuations_and_skip_the_builder_stage() -> None:
    assert final_stage_instructions(DOCKERFILE) == [
        "ENV PATH=/opt/venv/bin:$PATH",
        "COPY --from=builder /opt/venv /opt/venv",
        "RUN useradd --uid 10001 app && mkdir /orch",
        'LABEL io.orch.version="0.1.0"',
    ]


def test_layers_are_mapped_to_the_rendered_steps_after_the_bases_own() -> None:
    layers = map_layers(HISTORY, base_entries=2, dockerfile=DOCKERFILE)
    assert [layer.step for layer in layers] == [
        BASE_STEP,
        BASE_STEP,
        "ENV PATH=/opt/venv/bin:$PATH",
        "COPY --from=builder /opt/venv /opt/venv",
        "RUN useradd --uid 10001 app && mkdir /orch",
        'LABEL io.orch.version="0.1.0"',
    ]
    assert [layer.size_bytes for layer in layers] == [entry.size for entry in HISTORY]
    assert layers[3].created_by == "COPY dir:9c8d in /opt/venv"


def test_when_counts_disagree_the_engines_words_name_the_layer() -> None:
    layers = map_layers(HISTORY, base_entries=1, dockerfile=DOCKERFILE)  # 5 own entries for 4 instructions
    assert layers[1].step == 'CMD ["bash"]' and layers[4].step == "RUN useradd --uid 10001 app && mkdir /orch"


def test_build_arg_values_and_credentials_never_reach_the_record() -> None:
    assert public_created_by("|2 A=s3cr3t B=x y /bin/sh -c pip install z") == "RUN pip install z"
    assert public_created_by("RUN |1 TOKEN=s3cr3t /bin/sh -c make # buildkit") == "RUN make"
    assert public_created_by("|1 TOKEN=s3cr3t") == "RUN (build args left out)"
    assert "s3cr3t" not in public_created_by("/bin/sh -c pip install --index-url https://u:s3cr3t@idx/simple x")
    long = public_created_by("/bin/sh -c " + "x" * 1000)
    assert len(long) <= 160 and long.endswith("…")
    layers = map_layers(HISTORY, base_entries=2, dockerfile=DOCKERFILE)
    assert all("s3cr3t" not in layer.model_dump_json() for layer in layers)


def test_the_report_table_sums_the_base_leaves_out_empty_steps_and_ends_with_the_total() -> None:
    layers = map_layers(HISTORY, base_entries=2, dockerfile=DOCKERFILE)
    stage = StageResult.model_validate(
        {"name": "image", "status": "passed", "facts": {"layers": [x.model_dump() for x in layers]}}
    )
    rows = layer_rows(stage)
    assert [(row.step, row.size) for row in rows] == [
        ("base image (2 layers)", "116.00 MB"),
        ("COPY --from=builder /opt/venv /opt/venv", "700.00 MB"),
        ("RUN useradd --uid 10001 app && mkdir /orch", "330.00 kB"),
        ("total (6 layers)", "816.33 MB"),
    ]
    assert rows[1].share == "85.7 %" and rows[-1].share == "100.0 %"
    assert layer_rows(StageResult.model_validate({"name": "image", "status": "passed"})) == []


def test_format_bytes_uses_decimal_units() -> None:
    assert [format_bytes(n) for n in (0, 999, 1_000, 2_500_000, 4_831_205_376)] == [
        "0 B",
        "999 B",
        "1.00 kB",
        "2.50 MB",
        "4.83 GB",
    ]
