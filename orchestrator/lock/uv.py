"""The resolver: `uv pip compile` for another Python and platform, with hashes (uv is a dependency of orch).

Why uv: it resolves for a target that is not the host (`--python-version`, `--python-platform` with a
manylinux_2_N tag), emits every hash and annotates the index each package came from; pip-tools can only
resolve for the interpreter that runs it. The command is built by a pure function (tested on its own);
`run_uv` is the one place that starts it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import ResolverMissing
from orchestrator.lock.sources import Source
from orchestrator.lock.target import LockTarget
from orchestrator.redact import redact


@dataclass(frozen=True)
class UvResult:
    returncode: int
    stdout: str
    stderr: str  # redacted


def uv_binary() -> str:
    try:
        from uv import find_uv_bin
    except ImportError:  # pragma: no cover - uv is a dependency of orch
        raise ResolverMissing(
            "uv, the resolver `orch lock` uses, is not installed", hint="pip install uv (orch depends on it)"
        ) from None
    return str(find_uv_bin())


def compile_command(
    uv: str,
    input_path: Path,
    output: Path,
    target: LockTarget,
    sources: list[Source],
    *,
    output_format: str = "requirements.txt",
    upgrade: bool = False,
    upgrade_packages: tuple[str, ...] = (),
    constraints: Path | None = None,
) -> list[str]:
    """`uv pip compile` for the target; `output` holds the previous lock, whose pins uv keeps (preferences)."""
    command = [
        uv, "pip", "compile", str(input_path), "--output-file", str(output), "--format", output_format,
        "--python-version", target.python, "--python-platform", target.uv_python_platform,
        "--generate-hashes", "--no-header", "--emit-index-annotation", "--annotation-style", "split",
        # uv's own default, stated: a package found on an earlier index is taken from it only (no
        # dependency confusion between the PyTorch index and PyPI).
        "--index-strategy", "first-index",
        "--quiet",
        # The interpreter that runs orch serves only to build an sdist's metadata; naming it spares uv a
        # search of the host's interpreters (10 s behind pyenv shims). The target stays --python-version.
        "--python", sys.executable,
    ]  # fmt: skip
    indexes = [source for source in sources if source.kind == "index"]
    if indexes and indexes[-1].uv_name == "pypi":
        command += ["--default-index", indexes[-1].url]
        indexes = indexes[:-1]
    elif indexes:  # use_pypi: false -- the last declared index stands in for PyPI
        command += ["--default-index", f"{indexes[-1].uv_name}={indexes[-1].url}"]
        indexes = indexes[:-1]
    else:
        command += ["--no-index"]
    for source in indexes:
        command += ["--index", f"{source.uv_name}={source.url}"]
    for source in sources:
        if source.kind == "find-links":
            command += ["--find-links", source.url]
    if upgrade:
        command.append("--upgrade")
    for name in upgrade_packages:
        command += ["--upgrade-package", name]
    if constraints is not None:
        command += ["--constraint", str(constraints)]
    return command


def uv_environment(environ: Mapping[str, str], credentials: Mapping[str, str]) -> dict[str, str]:
    """The host's environment for uv, with its CA bundle (PIP_CERT for an intercepting proxy) and credentials."""
    env = {key: value for key, value in environ.items() if not key.startswith("UV_")}
    bundle = environ.get("SSL_CERT_FILE") or environ.get("PIP_CERT")
    if bundle:
        env["SSL_CERT_FILE"] = bundle
    env["UV_NO_CONFIG"] = "1"  # a uv.toml on the host must not add indexes the lock header does not list
    env["UV_HTTP_TIMEOUT"] = environ.get("UV_HTTP_TIMEOUT", "60")
    if environ.get("UV_CACHE_DIR"):
        env["UV_CACHE_DIR"] = environ["UV_CACHE_DIR"]
    env.update(credentials)
    return env


def run_uv(command: list[str], env: Mapping[str, str], cwd: Path) -> UvResult:
    try:
        done = subprocess.run(command, env=dict(env), cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ResolverMissing(f"cannot start uv ({command[0]})", hint="pip install uv") from None
    return UvResult(done.returncode, done.stdout, redact(done.stderr))


def uv_version(uv: str) -> str:
    done = subprocess.run([uv, "--version"], capture_output=True, text=True, check=False, env=dict(os.environ))
    return done.stdout.strip() or "uv (version unknown)"
