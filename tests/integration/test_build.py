"""`orch build` on the real engine: both install modes, the layer cache, failures, and secrets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.dossier.load import load_dossier
from orchestrator.engine import Engine, RunSpec, image_layers
from orchestrator.model.build_record import BuildRecord
from orchestrator.stages.base_image import BaseOutcome
from orchestrator.stages.build import BuildOptions, ca_bundle_from_environment, read_record
from orchestrator.stages.execute import run_build
from orchestrator.stages.wheelhouse import TargetPlatform, collect_wheels
from tests.integration.helpers import orch, session_containers
from tests.integration.local_index import serve_index
from tests.paths import EXAMPLES

TINY = EXAMPLES / "tiny-embeddings"
CANARY_USER = "orch-canary-user"
CANARY_SECRET = "canary-7f3a9c51e2"


@pytest.fixture(scope="module")
def cold_wheelhouse_build(
    engine: Engine, base_image: BaseOutcome, tmp_path_factory: pytest.TempPathFactory
) -> tuple[BuildRecord, Path]:
    out = tmp_path_factory.mktemp("wheelhouse-build")
    # The classic builder and its wheel feed (the fallback where an engine lacks BuildKit): test_buildkit.py has
    # the default builder's.
    options = BuildOptions(out=out, no_cache=True, builder="classic")
    record = run_build(load_dossier(TINY / "dossier.yaml"), engine, options)
    return record, out


@pytest.fixture(scope="module")
def torch_wheel(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The locked wheels, collected once for the loopback index tests."""
    loaded = load_dossier(TINY / "dossier.yaml")
    folder = tmp_path_factory.mktemp("wheels")
    collect_wheels(loaded.lock, TargetPlatform("3.11", "2.36"), folder)
    return sorted(folder.glob("*.whl"))


def test_cold_wheelhouse_build_is_hermetic_and_recorded(
    engine: Engine, cold_wheelhouse_build: tuple[BuildRecord, Path]
) -> None:
    record, out = cold_wheelhouse_build
    assert record.status == "passed", record.failure
    # The wheelhouse build reads its wheels from orch's feed over the loopback it shares, and nothing else
    # (test_wheel_feed_real.py); the wheels are in no layer and the venv was written once, in the final stage.
    assert record.context.network == "wheel-feed"
    assert record.layers is not None
    steps = [layer.created_by for layer in record.layers if layer.step != "base image"]
    assert not any("COPY wheels" in step or "--from=builder" in step for step in steps), steps
    assert record.cache.cached == 0 and record.cache.steps > 0, "--no-cache: every layer was built"
    # The session's warm-up image has this tag, identity and context: --no-cache built all the same.
    assert not record.reused
    assert record.context.installer == "uv"
    assert len(record.context.wheels) == 12, "the 11 locked wheels and uv's own"
    assert record.image is not None
    labels = record.image.labels
    loaded = load_dossier(TINY / "dossier.yaml")
    assert labels["io.orch.dossier.identity"] == loaded.identity
    assert labels["io.orch.platform"] == "cpu" and labels["io.orch.backend.version"] == "none"
    for key in ("created", "version", "base.name", "title"):
        assert labels[f"org.opencontainers.image.{key}"], key
    inventory = record.inventory
    assert inventory is not None
    assert inventory.python_version.startswith("3.11.")
    assert "torch==2.13.0+cpu" in inventory.pip_freeze
    assert inventory.pip_check.ok
    assert inventory.os_package_manager == "dpkg" and "python3.11" in inventory.os_packages
    assert inventory.backend.torch == "2.13.0+cpu" and inventory.backend.torch_cuda is None
    assert all(check.passed for check in record.checks) and len(record.checks) == 5
    compared = next(check for check in record.checks if check.name == "inventory matches the reference")
    assert compared.observed == "identical: 0 added, 0 removed, 0 changed"
    assert read_record(out / "build.json") == record
    log = (out / "build.log").read_text()
    assert "Step 1/" in log
    assert "torch==2.13.0+cpu" in (out / "pip-freeze.txt").read_text().splitlines()
    # The step copied the wheels locally, seeded the venv with uv from the base's ensurepip wheels (no
    # fallback to ensurepip's slower run on this base), and deleted the wheels, the lock and uv with it.
    assert "orch wheel feed: 12 wheels copied from http://127.0.0.1:8470/wheels/" in log
    assert not any(line.startswith("orch: seeding the venv from ensurepip") for line in log.splitlines())
    assert any(line.startswith("pip==") for line in inventory.pip_freeze), "the venv has its pip, as venv gives"
    leftovers = engine.run(
        RunSpec(image=record.image.id, command=["sh", "-c", "ls /tmp/orch 2>&1; find /opt /tmp -name '*.whl'; true"])
    )
    assert "No such file or directory" in leftovers.stdout and ".whl" not in leftovers.stdout, leftovers.stdout


def test_warm_rebuild_reuses_the_image_and_says_so(
    engine: Engine, cold_wheelhouse_build: tuple[BuildRecord, Path]
) -> None:
    first, out = cold_wheelhouse_build
    assert first.image is not None
    # The same builder as the first build: another builder renders another context (BuildKit's has orch/'s
    # install scripts, the classic one the feed's copier), so it would build, not reuse.
    tag = first.image.tag
    result = orch("build", str(TINY / "dossier.yaml"), "--out", str(out), "--tag", tag, "--builder", "classic")
    assert result.returncode == 0, result.stderr
    said = " ".join((result.stdout + result.stderr).split())  # the console wraps long lines
    assert "reused the image already built from the same dossier identity and context digest" in said
    again = read_record(out / "build.json")
    assert again.status == "passed" and again.reused
    assert again.image is not None and again.image.id == first.image.id
    assert again.context.digest == first.context.digest
    assert again.inventory == first.inventory and again.inventory_source is not None
    assert "no engine build" in (out / "build.log").read_text()


def test_code_change_rebuilds_only_the_code_layers(
    engine: Engine, cold_wheelhouse_build: tuple[BuildRecord, Path], tiny_example: Path, tmp_path: Path
) -> None:
    embed = tiny_example / "app" / "embed.py"
    embed.write_text(embed.read_text().replace('"embedded": len(ids)', '"embedded": len(ids), "edited": True'))
    record = run_build(load_dossier(tiny_example / "dossier.yaml"), engine, BuildOptions(out=tmp_path / "out"))
    assert record.status == "passed", record.failure
    # BuildKit (the engine's default) counts the steps that make a layer (ENV, LABEL and USER only change the
    # config): the user's and the venv's came from the cache of the session's warm build.
    assert record.context.builder == "buildkit"
    rebuilt = record.cache.rebuilt
    assert rebuilt[0] == "COPY app /opt/app", rebuilt
    assert not any("install-venv.sh" in step or step.startswith(("COPY wheels", "COPY --from")) for step in rebuilt)
    assert record.cache.cached >= 2, "the user and the venv layers came from the cache"


def test_online_build_through_the_proxy_gives_the_same_environment(
    engine: Engine,
    cold_wheelhouse_build: tuple[BuildRecord, Path],
    torch_wheel: list[Path],
    tiny_example: Path,
    tmp_path: Path,
) -> None:
    """Online mode: pip in the build reaches PyPI through the intercepting proxy with the CA bundle, and
    the CPU torch wheel from a find-links page on the host's loopback (hash-checked like the rest)."""
    # These machines set PIP_CERT; where the environment does not, the system bundle holds the proxy's CA.
    ca_bundle = ca_bundle_from_environment() or Path("/etc/ssl/certs/ca-certificates.crt")
    assert ca_bundle.is_file(), "an online build through the intercepting proxy needs its CA bundle"
    torch = [path for path in torch_wheel if path.name.startswith("torch-")]
    with serve_index(torch) as (url, state):
        path = tiny_example / "dossier.yaml"
        text = path.read_text().replace("install: wheelhouse", f"install: online\n  find_links: ['{url}/']")
        # download.pytorch.org does not resolve here: without it pip spends no time on retries.
        path.write_text(text.replace("  indexes:\n    - url: https://download.pytorch.org/whl/cpu\n", ""))
        record = run_build(
            load_dossier(path), engine, BuildOptions(out=tmp_path / "out", ca_bundle=ca_bundle, network="host")
        )
    assert record.status == "passed", record.failure
    assert record.context.install_mode == "online" and record.context.ca_bundle and record.context.wheels == []
    assert any(p.startswith("/files/torch-2.13.0") for p in state.paths), "torch came from the loopback page"
    wheelhouse_record, _ = cold_wheelhouse_build
    assert wheelhouse_record.inventory is not None and record.inventory is not None
    assert sorted(record.inventory.pip_freeze) == sorted(wheelhouse_record.inventory.pip_freeze)
    assert record.image is not None
    listing = engine.run(RunSpec(image=record.image.id, command=["sh", "-c", "ls /tmp/orch 2>&1; true"], timeout_s=60))
    assert "No such file or directory" in listing.stdout, "the CA bundle stayed in the builder stage"


def _online_without_the_torch_index(tiny_example: Path, lock: str) -> Path:
    (tiny_example / "requirements-cpu.lock").write_text(lock)
    path = tiny_example / "dossier.yaml"
    text = path.read_text().replace("install: wheelhouse", "install: online")
    path.write_text(text.replace("  indexes:\n    - url: https://download.pytorch.org/whl/cpu\n", ""))
    return path


def test_a_pin_that_does_not_exist_is_bad_input_naming_the_lock_line(
    engine: Engine, base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    path = _online_without_the_torch_index(tiny_example, "numpy==0.0.0\n")
    before = session_containers()
    result = orch("build", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error[bad-input]" in result.stderr and "Traceback" not in result.stderr
    assert "requirements-cpu.lock:1: numpy==0.0.0 does not exist" in result.stderr
    assert "versions offered:" in result.stderr and "2.4.6" in result.stderr
    record = read_record(tmp_path / "out" / "build.json")
    assert record.status == "failed" and record.image is None and record.failure is not None
    assert record.failure.step is not None and "pip install" in record.failure.step
    assert record.failure.first_error.startswith("ERROR:") and "numpy==0.0.0" in record.failure.first_error
    assert session_containers() == before, "no dangling build containers"


def test_a_pip_conflict_keeps_pips_explanation_in_the_first_error(
    engine: Engine, base_image: BaseOutcome, tiny_example: Path, tmp_path: Path
) -> None:
    lock = "requests==2.31.0\nurllib3==1.20\ncharset-normalizer==3.3.2\nidna==3.6\ncertifi==2024.2.2\n"
    path = _online_without_the_torch_index(tiny_example, lock)
    result = orch("build", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 1 and "error[verdict-failed]" in result.stderr, result.stdout + result.stderr
    error = read_record(tmp_path / "out" / "build.json").failure
    assert error is not None and "conflicting dependencies" in error.first_error
    assert "The conflict is caused by: The user requested urllib3==1.20; requests 2.31.0 depends on urllib3" in (
        error.first_error
    )


def test_a_canary_credential_never_leaves_the_host(
    engine: Engine, base_image: BaseOutcome, torch_wheel: list[Path], tiny_example: Path, tmp_path: Path
) -> None:
    """A private index that needs credentials: wheelhouse mode, credentials named in the dossier."""
    with serve_index(torch_wheel, credentials=f"{CANARY_USER}:{CANARY_SECRET}") as (url, state):
        path = tiny_example / "dossier.yaml"
        text = path.read_text().replace(
            "  indexes:\n    - url: https://download.pytorch.org/whl/cpu\n",
            f"  use_pypi: false\n  indexes:\n    - url: {url}/simple\n      access: ORCH_CANARY_INDEX\n",
        )
        path.write_text(text)
        out = tmp_path / "out"
        result = orch(
            "build",
            str(path),
            "--out",
            str(out),
            env={"ORCH_CANARY_INDEX": f"{CANARY_USER}:{CANARY_SECRET}", "ORCH_CACHE_DIR": str(tmp_path / "cache")},
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert state.authorized_hits >= len(torch_wheel), "the wheels really came through the private index"
    record = read_record(out / "build.json")
    assert record.image is not None
    places = {
        "docker history --no-trunc": "\n".join(
            entry.created_by for entry in reversed(image_layers(engine, record.image.id))
        ),
        "labels": json.dumps(record.image.labels),
        "build.log": (out / "build.log").read_text(),
        "build.json": (out / "build.json").read_text(),
        "orch output": result.stdout + result.stderr,
    }
    places.update({str(p.relative_to(out)): p.read_bytes().decode("latin-1") for p in out.rglob("*") if p.is_file()})
    for name, text in places.items():
        assert CANARY_SECRET not in text, f"the canary secret leaked into {name}"
        assert CANARY_USER not in text, f"the canary user leaked into {name}"


def test_missing_base_image_points_to_orch_base(engine: Engine, tiny_example: Path, tmp_path: Path) -> None:
    path = tiny_example / "dossier.yaml"
    path.write_text(
        path.read_text().replace(
            "    ref: orch/debian-python:bookworm\n",
            "    ref: orch/no-such-base:1\n    python: '3.11'\n    glibc: '2.36'\n",
        )
    )
    result = orch("build", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 3, result.stderr
    assert "error[base-image-missing]" in result.stderr and "orch base" in result.stderr


def test_unreachable_engine_is_exit_3(tmp_path: Path) -> None:
    result = orch(
        "build",
        str(TINY / "dossier.yaml"),
        "--out",
        str(tmp_path / "out"),
        env={"DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"},
    )
    assert result.returncode == 3
    assert "error[engine-unreachable]" in result.stderr and "nothing.sock" in result.stderr


@pytest.fixture(autouse=True)
def _no_stray_ca_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("ORCH_CA_BUNDLE", raising=False)
    yield
