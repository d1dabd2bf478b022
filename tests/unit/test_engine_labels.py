"""ORCH_LABELS: extra labels on everything orch creates, so a shared engine's users find their own objects."""

from __future__ import annotations

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.engine.labels import extra_labels_from_environment, parse_extra_labels
from orchestrator.errors import BadInput
from orchestrator.plan.build import make_plan, with_stage_labels
from orchestrator.render.dockerfile import render_dockerfile
from tests.paths import EXAMPLES


def test_labels_parse_from_the_environment() -> None:
    assert extra_labels_from_environment({}) == {}
    assert extra_labels_from_environment({"ORCH_LABELS": " com.example.night=2026-12-01 , io.orch.session=a1 "}) == {
        "com.example.night": "2026-12-01",
        "io.orch.session": "a1",
    }


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("novalue", "'novalue'"),
        ("Upper=x", "'Upper=x'"),
        ("com.example.x=has space", "'com.example.x=has space'"),
        ('com.example.x="quoted"', "com.example.x"),
        ("io.orch.managed=false", "'io.orch.managed' is one of orch's own labels"),
        ("io.orch.dossier.identity=abc", "io.orch.dossier.identity"),
    ],
)
def test_bad_labels_are_bad_input_naming_the_item(text: str, named: str) -> None:
    with pytest.raises(BadInput) as caught:
        parse_extra_labels(text)
    assert caught.value.exit_code == 2
    assert "ORCH_LABELS" in caught.value.message and named in caught.value.message


def test_the_builder_stage_is_marked_and_extra_labels_open_every_stage() -> None:
    plan = make_plan(load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml"))
    plain = render_dockerfile(plan)
    builder, final = plain.split("# ---- final image")
    assert builder.split("AS builder\n", 1)[1].splitlines()[1] == 'LABEL io.orch.stage="builder"'
    assert "io.orch.stage" not in final, "the final image is not a temporary one"

    labelled = render_dockerfile(with_stage_labels(plan, {"io.orch.test-session": "abc123"}))
    builder, final = labelled.split("# ---- final image")
    opening = builder.split("AS builder\n", 1)[1].splitlines()[1:3]
    assert opening == ['LABEL io.orch.stage="builder" \\', '      io.orch.test-session="abc123"']
    # Right after the final stage's FROM, before any layer-making instruction.
    after_from = final.split("\nFROM ", 1)[1].splitlines()[1]
    assert after_from == 'LABEL io.orch.test-session="abc123"'


def test_the_tag_namespace_defaults_to_orch_and_names_the_default_tag() -> None:
    from orchestrator.engine.labels import parse_tag_namespace, tag_namespace_from_environment
    from orchestrator.plan.build import default_tag

    loaded = load_dossier(EXAMPLES / "tiny-embeddings" / "dossier.yaml")
    assert tag_namespace_from_environment({}) == "orch"
    assert default_tag(loaded) == f"orch/tiny-embeddings:{loaded.short_identity}"
    alice = tag_namespace_from_environment({"ORCH_TAG_NAMESPACE": "team/orch-alice"})
    assert default_tag(loaded, alice) == f"team/orch-alice/tiny-embeddings:{loaded.short_identity}"
    assert parse_tag_namespace("  ") == "orch"


@pytest.mark.parametrize("text", ["Orch", "orch/", "/orch", "orch alice", "orch:1", "orch//x", "-orch"])
def test_a_tag_namespace_docker_would_refuse_is_bad_input(text: str) -> None:
    from orchestrator.engine.labels import parse_tag_namespace

    with pytest.raises(BadInput, match="ORCH_TAG_NAMESPACE"):
        parse_tag_namespace(text)
