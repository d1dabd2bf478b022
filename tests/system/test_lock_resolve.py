"""`orch lock` end to end with uv: a local index (deterministic, with a credential) and PyPI (the network).

Network decision: tests that need PyPI skip when it does not answer, except under CI=true, where they
fail (CI's machines reach PyPI by design; a silent skip would hide a broken lock). Everything about
targets, credentials, --check and --upgrade-package is proven on the loopback index, with no network.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from orchestrator.dossier.lock import parse_lock
from orchestrator.lock.sources import ssl_context
from tests.integration.local_index import serve_index
from tests.paths import REPO
from tests.system.lock_fixtures import make_wheel, sha256, write_dossier

# A Python-3.12 image for aarch64 and x86_64 (Ubuntu 24.04's glibc): not the 3.11 host this suite runs on.
PY312_IMAGE = "{ref: 'example/ubuntu-python:24.04', python: '3.12', glibc: '2.39'}"


def orch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "400", **(env or {})},
    )


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("wheels")
    built = [make_wheel(folder, "tinydep", version, "py3-none-any") for version in ("1.0", "1.1")]
    for python in ("cp311", "cp312"):
        for arch in ("x86_64", "aarch64"):
            built.append(
                make_wheel(folder, "tinynative", "2.0", f"{python}-{python}-manylinux_2_17_{arch}", ("tinydep",))
            )
    return built


def test_lock_for_python_312_on_aarch64_from_a_private_index_with_its_credential_by_name(
    tmp_path: Path, wheels: list[Path]
) -> None:
    secret = "s3cr3t-token"
    with serve_index(wheels, credentials=f"orchuser:{secret}") as (url, state):
        dossier = write_dossier(
            tmp_path,
            "tinynative\ntinydep==1.0\n",
            indexes=f"[{{url: '{url}/simple', access: ORCH_TEST_INDEX}}]",
            use_pypi=False,
            base_image=PY312_IMAGE,
        )
        env = {"ORCH_TEST_INDEX": f"orchuser:{secret}", "UV_CACHE_DIR": str(tmp_path / "cache")}
        done = orch("lock", str(dossier), "--arch", "aarch64", env=env)
        assert done.returncode == 0, done.stderr + done.stdout
        assert state.authorized_hits > 0  # the credential was used ...
        text = (tmp_path / "requirements.lock").read_text()
        assert secret not in text and secret not in done.stdout + done.stderr  # ... and written nowhere
        chosen = next(w for w in wheels if w.name == "tinynative-2.0-cp312-cp312-manylinux_2_17_aarch64.whl")
        lock = parse_lock(text)
        assert lock.get("tinynative").hashes == (sha256(chosen),)  # type: ignore[union-attr]
        assert lock.get("tinydep").text == "tinydep==1.0"  # type: ignore[union-attr]
        assert f"file {chosen.name}" in text and f"# from {url}/simple (python.indexes[0])" in text
        assert "target: CPython 3.12, aarch64-manylinux_2_39" in text

        assert orch("lock", str(dossier), "--arch", "aarch64", "--check").returncode == 0
        # The x86_64 lock is another target: --check says so (exit 1) without the network.
        stale = orch("lock", str(dossier), "--check")
        assert stale.returncode == 1 and "the target" in stale.stderr

        # Loosening the input keeps the pin (the old lock is uv's preference); --upgrade-package moves it.
        (tmp_path / "requirements.in").write_text("tinynative\ntinydep\n")
        assert orch("lock", str(dossier), "--arch", "aarch64", "--check").returncode == 1
        assert orch("lock", str(dossier), "--arch", "aarch64", env=env).returncode == 0
        assert parse_lock((tmp_path / "requirements.lock").read_text()).get("tinydep").text == "tinydep==1.0"  # type: ignore[union-attr]
        moved = orch("lock", str(dossier), "--arch", "aarch64", "--upgrade-package", "tinydep", env=env)
        assert moved.returncode == 0, moved.stderr
        after = parse_lock((tmp_path / "requirements.lock").read_text())
        assert after.get("tinydep").text == "tinydep==1.1"  # type: ignore[union-attr]
        assert after.get("tinynative").hashes == (sha256(chosen),)  # type: ignore[union-attr]

        missing = orch("lock", str(dossier), env={"ORCH_TEST_INDEX": ""})
        assert missing.returncode == 2 and "$ORCH_TEST_INDEX, which is not set" in missing.stderr


def test_an_unreachable_index_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    dossier = write_dossier(tmp_path, "six\n", indexes="[{url: 'http://127.0.0.1:9/simple'}]", base_image=PY312_IMAGE)
    done = orch("lock", str(dossier))
    assert done.returncode == 3
    assert "http://127.0.0.1:9/simple (python.indexes[0])" in done.stderr and "did not answer" in done.stderr
    assert "--skip-unreachable" in done.stderr
    assert not (tmp_path / "requirements.lock").exists()


def _pypi_answers() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/six/", timeout=15, context=ssl_context(os.environ)):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def pypi() -> None:
    if not _pypi_answers():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true and https://pypi.org/simple does not answer: orch lock's PyPI tests cannot run")
        pytest.skip("https://pypi.org/simple does not answer from this host")


@pytest.mark.slow
@pytest.mark.usefixtures("pypi")
def test_minilm_cpu_lock_reproduces_the_committed_pins_and_hashes(tmp_path: Path) -> None:
    torch_wheel = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    if not torch_wheel.is_file():
        pytest.skip("this host has no local mirror of the PyTorch cpu index (/opt/wheels)")
    example = tmp_path / "minilm"
    subprocess.run(["cp", "-r", str(REPO / "examples" / "minilm-embeddings"), str(example)], check=True)
    committed = parse_lock((example / "requirements-cpu.lock").read_text())
    done = orch("lock", str(example / "dossier.yaml"), "--skip-unreachable", "--find-links", str(torch_wheel.parent))
    assert done.returncode == 0, done.stderr + done.stdout
    # download.pytorch.org is not reachable from these machines: the output and the header say so.
    text = (example / "requirements-cpu.lock").read_text()
    if "not reached: https://download.pytorch.org/whl/cpu" in done.stdout:
        assert "https://download.pytorch.org/whl/cpu  (index, python.indexes[0]) -- NOT CONSULTED" in text
    computed = parse_lock(text)
    assert {(r.name, str(r.version), r.hashes) for r in computed.requirements} == {
        (r.name, str(r.version), r.hashes) for r in committed.requirements
    }
    assert "# from file:///opt/wheels" in text.split("torch==2.13.0+cpu", 1)[1].split("\n", 3)[2]
    check = orch("lock", str(example / "dossier.yaml"), "--check")
    assert check.returncode == 0, check.stderr
    assert orch("validate", str(example / "dossier.yaml")).returncode == 0


@pytest.mark.slow
@pytest.mark.usefixtures("pypi")
def test_pypi_lock_for_python_312_on_aarch64_picks_wheels_for_that_target(tmp_path: Path) -> None:
    dossier = write_dossier(tmp_path, "numpy==2.4.6\n", base_image=PY312_IMAGE)
    done = orch("lock", str(dossier), "--arch", "aarch64")
    assert done.returncode == 0, done.stderr + done.stdout
    text = (tmp_path / "requirements.lock").read_text()
    line = next(line for line in text.splitlines() if line.startswith("    # from") and "numpy-" in line)
    wheel = line.split("file ", 1)[1]
    assert "-cp312-cp312-" in wheel and "aarch64" in wheel and "x86_64" not in wheel


@pytest.mark.parametrize(
    ("dossier", "committed", "index"),
    [
        ("dossier-cuda.yaml", "requirements-cu124.lock", "https://download.pytorch.org/whl/cu124"),
        ("dossier-rocm.yaml", "requirements-rocm624.lock", "https://download.pytorch.org/whl/rocm6.2.4"),
    ],
)
@pytest.mark.usefixtures("pypi")
def test_minilm_gpu_locks_reproduce_the_committed_pins_or_name_the_index_not_reached(
    tmp_path: Path, dossier: str, committed: str, index: str
) -> None:
    example = tmp_path / "minilm"
    subprocess.run(["cp", "-r", str(REPO / "examples" / "minilm-embeddings"), str(example)], check=True)
    pins = {(r.name, str(r.version)) for r in parse_lock((example / committed).read_text()).requirements}
    done = orch("lock", str(example / dossier))
    if done.returncode == 0:  # torch's index answers here: the pins are the committed ones, now with hashes
        computed = parse_lock((example / committed).read_text())
        assert pins <= {(r.name, str(r.version)) for r in computed.requirements} and computed.fully_hashed
        return
    assert done.returncode == 3, done.stderr
    assert f"{index} (python.indexes[0]): no answer" in done.stderr
    # Without it, the torch build cannot be found: the error names the working series and the index.
    skipped = orch("lock", str(example / dossier), "--skip-unreachable")
    assert skipped.returncode == 2, skipped.stderr
    assert "torch series built for" in skipped.stderr and "2.6" in skipped.stderr
    assert f"not consulted (unreachable from this host): {index}" in skipped.stderr
