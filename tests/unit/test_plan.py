from __future__ import annotations

from pathlib import Path

from orchestrator.dossier.load import load_dossier
from orchestrator.plan.build import RUNTIME_UID, make_plan
from orchestrator.render.dockerfile import render_dockerfile
from tests.paths import EXAMPLES

TINY = EXAMPLES / "tiny-embeddings"


def test_cpu_plan_on_the_local_base() -> None:
    loaded = load_dossier(TINY / "dossier.yaml")
    plan = make_plan(loaded)
    assert plan.platform == "cpu" and plan.backend_version is None
    assert plan.base.from_line == "orch/debian-python:bookworm"
    # The orch base already has Python: no apt step at all.
    assert plan.builder_apt_packages == () and plan.runtime_apt_packages == ()
    assert plan.install_mode == "wheelhouse" and plan.pip_index_options == ()
    labels = dict(plan.labels)
    assert labels["io.orch.dossier.identity"] == loaded.identity
    assert labels["io.orch.torch.version"] == "2.13.0+cpu"
    assert labels["io.orch.platform"] == "cpu"
    assert list(labels) == sorted(labels), "labels are sorted so the rendering is deterministic"
    assert plan.uid == RUNTIME_UID


def test_cuda_plan_installs_python_and_uses_the_torch_index() -> None:
    plan = make_plan(load_dossier(TINY / "dossier-cuda.yaml"))
    assert plan.builder_apt_packages == ("python3.11", "python3.11-venv")
    assert plan.runtime_apt_packages == ("python3.11",), "no venv or build tools in the final stage"
    assert plan.pip_index_options == ("--extra-index-url", "https://download.pytorch.org/whl/cu124")


def test_build_packages_stay_in_the_builder(tiny_example: Path) -> None:
    path = tiny_example / "dossier.yaml"
    path.write_text(
        path.read_text().replace(
            "    ref: orch/debian-python:bookworm\n",
            "    ref: orch/debian-python:bookworm\n  build_packages: [build-essential]\n  os_packages: [libgomp1]\n",
        )
    )
    plan = make_plan(load_dossier(path))
    assert plan.builder_apt_packages == ("build-essential",)
    assert plan.runtime_apt_packages == ("libgomp1",)
    dockerfile = render_dockerfile(plan)
    final_stage = dockerfile.split("# ---- final image")[1]
    assert "build-essential" not in final_stage
    assert "libgomp1" in final_stage


def test_no_pypi_makes_the_first_index_primary(tiny_example: Path) -> None:
    path = tiny_example / "dossier.yaml"
    text = path.read_text().replace("install: wheelhouse", "install: online\n  use_pypi: false")
    text = text.replace(
        "    - url: https://download.pytorch.org/whl/cpu\n",
        "    - url: https://download.pytorch.org/whl/cpu\n    - url: https://mirror.example.org/simple\n",
    )
    path.write_text(text)
    plan = make_plan(load_dossier(path), ca_bundle=True)
    assert plan.pip_index_options == (
        "--index-url",
        "https://download.pytorch.org/whl/cpu",
        "--extra-index-url",
        "https://mirror.example.org/simple",
    )
    dockerfile = render_dockerfile(plan)
    assert "PIP_CERT=/tmp/orch/ca-bundle.pem /opt/venv/bin/pip install" in dockerfile
    final_stage = dockerfile.split("# ---- final image")[1]
    assert "ca-bundle" not in final_stage, "the CA bundle never reaches the final image"


def test_wheelhouse_layers_stay_in_the_builder() -> None:
    dockerfile = render_dockerfile(make_plan(load_dossier(TINY / "dossier.yaml")))
    builder, final = dockerfile.split("# ---- final image")
    assert "COPY wheels /tmp/orch/wheels" in builder
    assert "--no-index --find-links /tmp/orch/wheels --require-hashes" in builder
    assert "wheels" not in final and "requirements.lock" not in final
    assert "COPY --from=builder /opt/venv /opt/venv" in final


def test_layer_order_keeps_the_cache_useful() -> None:
    dockerfile = render_dockerfile(make_plan(load_dossier(TINY / "dossier-cuda.yaml")))
    final = dockerfile.split("# ---- final image")[1]
    order = [final.index(marker) for marker in ("apt-get install", "COPY --from=builder", "COPY app", "LABEL")]
    assert order == sorted(order), "OS packages, then the venv, then the code, labels last"
    assert final.rstrip().splitlines()[-1].strip().startswith("org.opencontainers.image.title")


def test_rendering_is_deterministic() -> None:
    loaded = load_dossier(TINY / "dossier-rocm.yaml")
    assert render_dockerfile(make_plan(loaded)) == render_dockerfile(
        make_plan(load_dossier(TINY / "dossier-rocm.yaml"))
    )
