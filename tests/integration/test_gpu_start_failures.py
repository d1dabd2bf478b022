"""A GPU container that the real engine refuses to start (issue 26): this CPU machine's dockerd has no NVIDIA
runtime and, at Debian's 20.10, no CDI, so the two requests orch makes for NVIDIA GPUs fail exactly as on a host
without the toolkit or without CDI enabled. The daemon's words are explained by the failure catalogue, with the
right next step for each, and no container is left behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.engine import Engine
from orchestrator.errors import ContainerStartFailed
from orchestrator.plan.specs import RunSpec
from orchestrator.stages.base_image import BaseOutcome


@pytest.fixture
def refusing(engine: Engine, no_leftover_containers: None) -> Iterator[Engine]:
    info = engine.info()
    if "nvidia" in info.runtimes or info.cdi_spec_dirs:
        pytest.fail("this test needs an engine without GPU support (the CI machine's dockerd)")
    yield engine


def _start_error(engine: Engine, spec: RunSpec) -> ContainerStartFailed:
    with pytest.raises(ContainerStartFailed) as caught:
        engine.run(spec)
    return caught.value


def test_a_gpu_request_without_the_toolkit_names_the_missing_gpu_driver(
    refusing: Engine, base_image: BaseOutcome
) -> None:
    error = _start_error(refusing, RunSpec(image=base_image.ref, command=["true"], nvidia_gpus=True))
    assert 'could not select device driver "" with capabilities: [[gpu]]' in error.raw
    assert "[host or device] Docker has no GPU device driver" in error.message
    assert error.hint is not None and "nvidia-ctk runtime configure" in error.hint


def test_a_cdi_request_on_a_daemon_without_cdi_says_to_enable_cdi_not_to_install_the_toolkit(
    refusing: Engine, base_image: BaseOutcome
) -> None:
    spec = RunSpec(image=base_image.ref, command=["true"], cdi_devices=["nvidia.com/gpu=all"])
    error = _start_error(refusing, spec)
    assert 'could not select device driver "cdi" with capabilities: []' in error.raw
    assert "[host] Docker has no `cdi` device driver" in error.message
    assert error.hint is not None and '"features": {"cdi": true}' in error.hint
    assert "Install the NVIDIA Container Toolkit" not in str(error)
