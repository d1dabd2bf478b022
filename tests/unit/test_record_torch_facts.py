"""The torch observation `orch record` runs in the reference interpreter: MIOpen's version next to cuDNN's for a
ROCm build, None for a CUDA build or when torch tells none. Run on stand-in `torch` packages (no real torch)."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest

from orchestrator.record.observe import TORCH_SCRIPT

_STANDIN = """\
import types
__version__ = "{version}"
version = types.SimpleNamespace(cuda={cuda!r}, hip={hip!r})
class _Cudnn:
    @staticmethod
    def version():
        return {cudnn!r}
class _Cuda:
    @staticmethod
    def get_arch_list():
        return ["gfx90a"] if {hip!r} else ["sm_80"]
backends = types.SimpleNamespace(cudnn=_Cudnn, cpu=types.SimpleNamespace(get_cpu_capability=lambda: "AVX2"))
cuda = _Cuda
_C = types.SimpleNamespace()
{extra}
"""


def _observe(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *,
    cuda: str | None,
    hip: str | None,
    cudnn: int | None,
    extra: str = "",
) -> dict[str, Any]:
    """The script as the reference interpreter runs it (`python -c`), in-process: unit tests start no subprocess."""
    standin = types.ModuleType("torch")
    exec(_STANDIN.format(version="2.5.1", cuda=cuda, hip=hip, cudnn=cudnn, extra=extra), standin.__dict__)
    monkeypatch.setitem(sys.modules, "torch", standin)
    capsys.readouterr()
    exec(TORCH_SCRIPT, {"__name__": "__main__"})
    result: dict[str, Any] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return result


def test_a_rocm_build_reports_miopen_next_to_cudnn_through_torch_c(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    observed = _observe(
        monkeypatch, capsys, cuda=None, hip="6.2.41133", cudnn=3002000, extra="_C._miopen_version = lambda: 30200"
    )
    assert observed["hip"] == "6.2.41133" and observed["cuda"] is None
    assert observed["miopen"] == 30200 and observed["cudnn"] == 3002000
    assert observed["arch_list"] == ["gfx90a"]


def test_a_rocm_build_reports_miopen_through_torch_backends_miopen(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = "backends.miopen = types.SimpleNamespace(immediate=False, version=lambda: '3.2.0')"
    assert _observe(monkeypatch, capsys, cuda=None, hip="6.2", cudnn=None, extra=extra)["miopen"] == "3.2.0"


@pytest.mark.parametrize(
    ("cuda", "hip", "extra"),
    [
        ("12.4", None, "_C._miopen_version = lambda: 30200"),  # a CUDA build has no MIOpen, whatever it exposes
        (None, "6.2", ""),  # a ROCm build that tells no version
        (None, "6.2", "def _fails():\n    raise RuntimeError('no MIOpen')\n_C._miopen_version = _fails"),
    ],
)
def test_miopen_is_none_where_there_is_none_to_tell(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cuda: str | None, hip: str | None, extra: str
) -> None:
    observed = _observe(monkeypatch, capsys, cuda=cuda, hip=hip, cudnn=90100, extra=extra)
    assert observed["importable"] is True and observed["miopen"] is None
