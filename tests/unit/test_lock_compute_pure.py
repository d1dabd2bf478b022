"""`orch lock`'s pure parts: target tags, the uv command, the lock's header, --check, inputs, advice."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.dossier.lock import parse_lock
from orchestrator.errors import BadInput, LockFailed
from orchestrator.lock.advice import torch_choices
from orchestrator.lock.compute import check_lock, plan_lock
from orchestrator.lock.inputs import find_input
from orchestrator.lock.output import parse_uv_requirements, read_stamp, render_body, render_lock
from orchestrator.lock.sources import Source, credentials
from orchestrator.lock.target import LockTarget
from orchestrator.lock.uv import compile_command, uv_environment

SHA = "a" * 64


def target(python: str = "3.11", arch: str = "x86_64", glibc: str = "2.36", platform: str = "cpu") -> LockTarget:
    version = {"cpu": None, "cuda": "12.4", "rocm": "6.2.4"}[platform]
    return LockTarget(python, arch, glibc, platform, version, "img")  # type: ignore[arg-type]


def test_target_platform_tag_is_the_newest_manylinux_uv_knows_below_the_glibc() -> None:
    assert target(glibc="2.36").uv_python_platform == "x86_64-manylinux_2_36"
    assert target(glibc="2.30").uv_python_platform == "x86_64-manylinux_2_28"
    assert target(arch="aarch64", glibc="2.35").uv_python_platform == "aarch64-manylinux_2_35"
    assert target(glibc="2.41").uv_python_platform == "x86_64-manylinux_2_40"
    with pytest.raises(ValueError, match="older than manylinux_2_17"):
        _ = target(glibc="2.12").uv_python_platform


def test_wheel_tags_follow_the_target_python_arch_and_glibc() -> None:
    t312_arm = target(python="3.12", arch="aarch64", glibc="2.35")
    assert t312_arm.wheel_fits("numpy-2.4.6-cp312-cp312-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl")
    assert t312_arm.wheel_fits("six-1.17.0-py2.py3-none-any.whl")
    assert t312_arm.wheel_fits("x-1-cp312-abi3-manylinux2014_aarch64.whl")
    assert not t312_arm.wheel_fits("numpy-2.4.6-cp311-cp311-manylinux_2_27_aarch64.whl")  # other Python
    assert not t312_arm.wheel_fits("numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.whl")  # other CPU
    assert not t312_arm.wheel_fits("numpy-2.4.6-cp312-cp312-manylinux_2_39_aarch64.whl")  # newer glibc
    assert not t312_arm.wheel_fits("not-a-wheel.tar.gz")


def test_uv_command_targets_the_dossier_not_the_host_and_never_carries_a_credential() -> None:
    sources = [
        Source("https://download.pytorch.org/whl/cpu", "index", "python.indexes[0]", None, "orch0"),
        Source("https://private.example/simple", "index", "python.indexes[1]", "PRIVATE_INDEX", "orch1"),
        Source("https://pypi.org/simple", "index", "python.use_pypi", uv_name="pypi"),
        Source("/srv/wheels", "find-links", "--find-links, this host"),
    ]
    command = compile_command("uv", Path("in.txt"), Path("out.txt"), target(python="3.12"), sources)
    joined = " ".join(command)
    assert "--python-version 3.12" in joined
    assert "--python-platform x86_64-manylinux_2_36" in joined
    assert "--generate-hashes" in command and "--emit-index-annotation" in command
    # The torch index is an --index (searched first); PyPI is uv's default index, searched last.
    assert command[command.index("orch0=https://download.pytorch.org/whl/cpu") - 1] == "--index"
    assert command[command.index("--default-index") + 1] == "https://pypi.org/simple"
    assert "--find-links" in command and "/srv/wheels" in command
    env = uv_environment(
        {"PIP_CERT": "/ca.pem", "UV_INDEX_URL": "https://evil"}, credentials(sources, {"PRIVATE_INDEX": "me:tok"})
    )
    assert env["UV_INDEX_ORCH1_USERNAME"] == "me" and env["UV_INDEX_ORCH1_PASSWORD"] == "tok"
    assert env["SSL_CERT_FILE"] == "/ca.pem"
    assert "UV_INDEX_URL" not in env  # a host's uv settings never add an index the header does not list
    assert "tok" not in joined


def test_a_credential_named_but_not_set_is_one_clear_error() -> None:
    source = Source("https://private.example/simple", "index", "python.indexes[0]", "PRIVATE_INDEX", "orch0")
    with pytest.raises(BadInput, match=r"needs the credential in \$PRIVATE_INDEX, which is not set"):
        credentials([source], {})


UV_OUTPUT = f"""annotated-doc==0.0.7 \\
    --hash=sha256:{SHA}
    # via typer
    # from https://pypi.org/simple
numpy==2.4.6 \\
    --hash=sha256:{"b" * 64} \\
    --hash=sha256:{"c" * 64}
    # via
    #   scikit-learn
    #   scipy
    # from https://user:secret@private.example/simple
"""


def test_uv_output_becomes_a_lock_orch_reads_with_each_package_source_redacted() -> None:
    packages = parse_uv_requirements(UV_OUTPUT)
    assert [(p.name, p.version, p.via) for p in packages] == [
        ("annotated-doc", "0.0.7", ["typer"]),
        ("numpy", "2.4.6", ["scikit-learn", "scipy"]),
    ]
    assert packages[1].hashes == ["b" * 64, "c" * 64]
    body = render_body(packages, {"https://pypi.org/simple": "python.use_pypi"})
    assert "secret" not in body and "# from https://****@private.example/simple" in body
    lock = parse_lock(body)
    assert lock.fully_hashed and str(lock.get("numpy").version) == "2.4.6"  # type: ignore[union-attr]
    text = render_lock(["Lock for x"], {"input": "requirements.in"}, body)
    stamp = read_stamp(text)
    assert stamp is not None and stamp[1] == body and stamp[0]["input"] == "requirements.in"
    assert read_stamp("numpy==1\n") is None


def _dossier(tmp_path: Path, requirements_in: str, *, indexes: str = "") -> Path:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print(1)\n")
    (tmp_path / "requirements.in").write_text(requirements_in)
    path = tmp_path / "dossier.yaml"
    path.write_text(
        "dossier: 1\nname: t\ncode: {source: app, entrypoint: main.py}\n"
        f"python: {{version: '3.11', requirements: requirements.lock, install: wheelhouse{indexes}}}\n"
        "system: {platform: cpu, base_image: {ref: 'orch/debian-python:bookworm'}}\n"
        "expect: {command: [python, main.py], outputs: [{name: o, file: o.json, format: json}]}\n"
    )
    return path


def test_check_names_what_changed_since_the_lock_was_computed(tmp_path: Path) -> None:
    dossier = _dossier(tmp_path, "six>=1.16\n")
    plan = plan_lock(dossier)
    assert check_lock(plan) == [f"{plan.lock_path} does not exist: run orch lock"]
    body = f"six==1.17.0 \\\n    --hash=sha256:{SHA}\n"
    plan.lock_path.write_text(render_lock(["x"], plan.facts(), body))
    assert check_lock(plan) == []
    # The input moves: the fingerprint and the unsatisfied pin are both named.
    (tmp_path / "requirements.in").write_text("six>=1.18\n")
    problems = check_lock(plan_lock(dossier))
    assert any("content of requirements.in changed" in p for p in problems)
    assert any("six>=1.18 is not satisfied by the lock's six==1.17.0" in p for p in problems)
    # Another target CPU: the target is named.
    (tmp_path / "requirements.in").write_text("six>=1.16\n")
    assert any("the target" in p for p in check_lock(plan_lock(dossier, arch="aarch64")))
    # A hand edit of the package lines.
    plan.lock_path.write_text(plan.lock_path.read_text().replace("1.17.0", "1.16.0"))
    assert any("edited by hand" in p for p in check_lock(plan_lock(dossier)))
    plan.lock_path.write_text("six==1.17.0\n")
    assert "not written by orch lock" in check_lock(plan_lock(dossier))[0]


def test_inputs_are_found_in_order_and_an_inventory_with_a_local_install_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "requirements-cpu.lock"
    (tmp_path / "requirements.in").write_text("six\n")
    found = find_input(None, dossier_dir=tmp_path, lock_path=lock, code_dir=None, inventory=None)
    assert found.shown == "requirements.in" and [r.name for r in found.requirements] == ["six"]
    (tmp_path / "requirements-cpu.in").write_text("-r requirements.in\ntorch==2.13.0+cpu\n")
    found = find_input(None, dossier_dir=tmp_path, lock_path=lock, code_dir=None, inventory=None)
    assert found.shown == "requirements-cpu.in"
    before = found.digest
    (tmp_path / "requirements.in").write_text("six>=1.17\n")  # an included file is part of the fingerprint
    assert find_input(None, dossier_dir=tmp_path, lock_path=lock, code_dir=None, inventory=None).digest != before
    code = tmp_path / "code"
    code.mkdir()
    (code / "pyproject.toml").write_text('[project]\nname = "app"\ndependencies = ["numpy>=2"]\n')
    for name in ("requirements-cpu.in", "requirements.in"):
        (tmp_path / name).unlink()
    found = find_input(None, dossier_dir=tmp_path, lock_path=lock, code_dir=code, inventory=None)
    assert found.kind == "pyproject" and found.text == "numpy>=2\n"
    (code / "pyproject.toml").unlink()
    inventory = tmp_path / "freeze.txt"
    inventory.write_text("numpy==2.4.6\nmylib @ file:///home/me/mylib\n")
    with pytest.raises(BadInput, match=r"freeze.txt:2: mylib was installed from a local folder or a direct URL"):
        find_input(None, dossier_dir=tmp_path, lock_path=lock, code_dir=None, inventory=inventory)
    with pytest.raises(BadInput, match="nothing to lock from"):
        find_input(None, dossier_dir=tmp_path, lock_path=lock, code_dir=None, inventory=None)


def test_impossible_combinations_name_working_ones() -> None:
    cuda = torch_choices(target(platform="cuda"))
    assert "torch series built for cuda 12.4 on Python 3.11: 2.4, 2.5, 2.6" in cuda
    assert (
        "https://download.pytorch.org/whl/cu124" in cuda
        and "PyPI's own torch is a CUDA 12.4 build for 2.5, 2.6" in cuda
    )
    rocm = torch_choices(target(platform="rocm"))
    assert "2.6, 2.7" in rocm and "rocm6.2.4" in rocm
    none = torch_choices(LockTarget("3.11", "x86_64", "2.35", "cuda", "12.3", "img"))
    assert "no torch build for cuda 12.3" in none and "12.4" in none


def test_a_torch_that_does_not_fit_the_platform_is_refused_with_the_working_choice(tmp_path: Path) -> None:
    from orchestrator.lock.compute import _check_body

    plan = plan_lock(_dossier(tmp_path, "torch\n"))
    with pytest.raises(LockFailed) as caught:
        _check_body(plan, f"torch==2.14.1 --hash=sha256:{SHA}\n")
    assert "is not a CPU build: pin torch==2.14.1+cpu from https://download.pytorch.org/whl/cpu" in caught.value.message
    assert caught.value.hint is not None and "torch series built for cpu" in caught.value.hint
    _check_body(plan, f"torch==2.13.0+cpu --hash=sha256:{SHA}\n")  # fits: no error


@pytest.mark.parametrize(
    ("lines", "option"),
    [
        ("--index-url https://user:TOKEN-123@private.example/simple\nnumpy\n", "--index-url"),
        ("numpy\n-i https://user:TOKEN-123@private.example/simple\n", "-i"),
        ("--extra-index-url=https://TOKEN-123@x.example/simple\nnumpy\n", "--extra-index-url"),
        ("  --find-links /srv/TOKEN-123/wheels\nnumpy\n", "--find-links"),
        ("--trusted-host TOKEN-123.example\nnumpy\n", "--trusted-host"),
        ("--no-index\nnumpy\n", "--no-index"),
    ],
)
def test_an_index_option_in_the_lock_input_is_refused_without_its_value(
    lines: str, option: str, tmp_path: Path
) -> None:
    """Issue 25, point 8: uv's lock would ignore such a line while the user believes the private index was used."""
    (tmp_path / "requirements.in").write_text(lines)
    with pytest.raises(BadInput) as refused:
        find_input(None, dossier_dir=tmp_path, lock_path=tmp_path / "requirements.lock", code_dir=None, inventory=None)
    number = next(n for n, line in enumerate(lines.splitlines(), start=1) if line.strip().startswith(option))
    assert refused.value.message.startswith(f"{tmp_path / 'requirements.in'}:{number}: {option} in the lock's input")
    assert "python.indexes" in refused.value.message and "TOKEN-123" not in str(refused.value) + refused.value.hint


def test_an_index_option_in_an_included_file_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "requirements.in").write_text("-r more.in\nnumpy\n")
    (tmp_path / "more.in").write_text("# private\n--index-url https://u:TOKEN-123@p.example/simple\ntorch\n")
    with pytest.raises(BadInput, match=r"more\.in:2: --index-url"):
        find_input(None, dossier_dir=tmp_path, lock_path=tmp_path / "requirements.lock", code_dir=None, inventory=None)


def test_a_requirement_named_like_an_option_prefix_is_not_refused(tmp_path: Path) -> None:
    (tmp_path / "requirements.in").write_text("-r base.in\nindex-tools>=1\n--pre\n")
    (tmp_path / "base.in").write_text("numpy\n")
    found = find_input(
        None, dossier_dir=tmp_path, lock_path=tmp_path / "requirements.lock", code_dir=None, inventory=None
    )
    assert "index-tools" in found.text
