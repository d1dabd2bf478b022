"""`orch record --image REF`: a reference that ran in a container, its environment read inside the image (the
inventory probe in containers of REF, no network), the image's id and labels recorded, the base image chosen
from the image's facts through orch's table."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from orchestrator.engine import BuildRequest, Engine, RemoveImage
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build_context import context_tar
from tests.integration.helpers import SESSION_FILTER, SESSION_ID, orch

TAG = f"orch-test-{SESSION_ID}/record-ref:1"


def test_record_reads_the_environment_inside_the_image(
    engine: Engine, base_image: BaseOutcome, no_leftover_containers: None, tmp_path: Path
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    # A small reference image: a venv as `python`, a numerics setting and a label of the app's own.
    (context / "Dockerfile").write_text(
        f"FROM {base_image.ref}\nLABEL {SESSION_FILTER}\nLABEL org.example.app=tiny-ref\n"
        "RUN python3 -m venv /opt/venv\nENV PATH=/opt/venv/bin:$PATH OMP_NUM_THREADS=3\n"
    )
    tar = context_tar(context)
    with tar.file:
        built = engine.build(BuildRequest(tar.file, TAG, network="none"))
    assert built.image_id is not None, built.error
    try:
        app = tmp_path / "app"
        app.mkdir()
        (app / "run.py").write_text(
            "import json, sys\njson.dump([1.0, 2.5], open(sys.argv[1] + '/values.json', 'w'))\n"
        )
        outputs = tmp_path / "outputs"
        outputs.mkdir()
        (outputs / "values.json").write_text("[1.0, 2.5]")
        draft = tmp_path / "draft"
        done = orch(
            "record", "--image", TAG, "--code", str(app), "--outputs", str(outputs),
            "--command", "python run.py /out", "--out", str(draft),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr + done.stdout
        environment = json.loads((draft / "record" / "environment.json").read_text())
        image = environment["image"]
        assert image["id"] == built.image_id and image["ref"] == TAG
        assert image["labels"]["org.example.app"] == "tiny-ref"
        assert image["os"]["ID"] == "debian" and image["os"]["VERSION_ID"] == "12"
        interpreter = environment["interpreter"]
        # Observed inside the image, not on the host: the image's venv and its Python.
        assert interpreter["python"]["executable"] == "/opt/venv/bin/python"
        assert interpreter["python"]["version"].startswith("3.11.")
        assert interpreter["torch"]["importable"] is False
        assert environment["numerics_environment"] == {"OMP_NUM_THREADS": "3"}
        names = {item["name"] for item in interpreter["pip"]["inspect"]["installed"]}
        assert "pip" in names
        document = yaml.safe_load((draft / "dossier.yaml").read_text())
        assert document["python"]["version"] == "3.11"
        # debian 12 + Python 3.11 + cpu: the table's row, not a guess.
        assert document["system"] == {"platform": "cpu", "base_image": {"ref": "python:3.11-slim-bookworm"}}
        assert "base_image" not in document["code"]["options"]
        assert "pip==" in (draft / "requirements.in").read_text()
    finally:
        engine.remove(RemoveImage(TAG))
