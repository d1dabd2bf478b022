from __future__ import annotations

from pathlib import Path

from orchestrator.dossier.load import load_dossier
from orchestrator.model.build_record import CodeRef
from orchestrator.model.host import HostFacts
from orchestrator.plan.build import (
    RUNTIME_UID,
    created_label,
    default_build_network,
    default_tag,
    make_build_steps,
    make_plan,
)
from orchestrator.plan.run import GpuMapping, make_run_plan, plan_gpu_mapping
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
    assert "--find-links /tmp/orch/wheels --require-hashes" in builder
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


# -- the build and run plans: pure, every host-dependent value passed in ----------------------------------------


def _code() -> CodeRef:
    return CodeRef(kind="folder", source="app", revision=None, dirty=False, dirty_diff_sha256=None, variant=None)


def test_build_steps_take_created_and_the_base_id_as_given() -> None:
    loaded = load_dossier(TINY / "dossier.yaml")
    steps = make_build_steps(
        loaded, out=Path("/o"), code=_code(), created="CREATED", base_id="sha256:base", engine_labels={"a.b": "c"}
    )
    labels = dict(steps.plan.labels)
    assert labels["org.opencontainers.image.created"] == "CREATED"
    assert labels["io.orch.base.id"] == "sha256:base"
    assert dict(steps.plan.stage_labels) == {"a.b": "c"}
    assert steps.tag == default_tag(loaded)
    # A wheelhouse install with no OS package builds with no outside network: only the feed's loopback.
    assert steps.network == "wheel-feed" and steps.feed is not None and steps.feed.image == "sha256:base"
    assert steps.context_dir == Path("/o/context")
    assert steps.inventory.labels == {"io.orch.probe": "inventory"} and steps.inventory.network is False


def test_created_is_kept_only_from_an_image_of_the_same_identity() -> None:
    same = {"io.orch.dossier.identity": "X", "org.opencontainers.image.created": "OLD"}
    assert created_label(same, "X", "NOW") == "OLD"
    assert created_label({**same, "io.orch.dossier.identity": "Y"}, "X", "NOW") == "NOW"
    assert created_label(None, "X", "NOW") == "NOW"


def test_a_wheelhouse_build_without_os_packages_has_no_network() -> None:
    from dataclasses import replace

    plan = make_plan(load_dossier(TINY / "dossier.yaml"))
    hermetic = replace(plan, install_mode="wheelhouse", builder_apt_packages=(), runtime_apt_packages=())
    assert default_build_network(hermetic) == "none"
    assert default_build_network(replace(hermetic, install_mode="online")) == "default"


def test_the_run_plan_maps_amd_gpus_into_the_device_probe_and_the_sample() -> None:
    loaded = load_dossier(TINY / "dossier-rocm.yaml")
    host = HostFacts(
        kernel="k",
        nvidia=None,
        amd=None,
        docker=None,
        kfd_present=True,
        dri_render_nodes=["/dev/dri/renderD128"],
        video_gid=44,
        render_gid=993,
    )
    plan = make_run_plan(loaded, "sha256:i", plan_gpu_mapping("rocm", host), Path("/o"))
    for spec in (plan.device, plan.sample):
        assert spec.image == "sha256:i"
        assert list(spec.devices) == ["/dev/kfd", "/dev/dri/renderD128"] and list(spec.group_add) == ["44", "993"]
    assert not plan.inventory.devices, "the inventory probe needs no GPU"
    assert {m.target for m in plan.sample.mounts} >= {"/orch/output", "/orch/meta", "/orch/probe-site"}
    assert plan.folders.output == Path("/o/sample-output")


def test_an_nvidia_runtime_gives_a_device_request_and_none_gives_no_mapping() -> None:
    from orchestrator.model.host import DockerGpuFacts

    runtime = HostFacts(
        kernel="k", nvidia=None, amd=None, docker=DockerGpuFacts(runtimes=["nvidia"], nvidia_runtime=True)
    )
    assert plan_gpu_mapping("cuda", runtime).nvidia_gpus
    assert not plan_gpu_mapping("cuda", runtime.model_copy(update={"docker": None})).maps_nvidia
    assert plan_gpu_mapping("cpu", runtime) == GpuMapping()


def test_the_described_plan_names_the_build_step_the_probe_runs_in() -> None:
    from orchestrator.pipeline.dry_run import rebuild_text
    from orchestrator.plan.build import default_tag
    from orchestrator.plan.describe import step_names
    from orchestrator.plan.program import BUILT_IMAGE, BuildOptionsPlan

    loaded = load_dossier(TINY / "dossier.yaml")
    host = HostFacts(kernel="k", nvidia=None, amd=None, docker=None)
    options = BuildOptionsPlan(out=Path("/o"), tag=default_tag(loaded))
    text = rebuild_text(loaded, options, _code(), host, {}, aliases={Path("/o"): "<out>"})
    names = step_names(text)
    assert names[: names.index("build") + 1] == ["base", "render", "wheels", "build"]
    # The containers after the build run the image step `build` makes: the placeholder names that step.
    assert BUILT_IMAGE == "<image built by step build>"
    assert f"image: {BUILT_IMAGE}" in text and "/o/" not in text
    assert "the daemon's GPU support is not known without an engine" in text
