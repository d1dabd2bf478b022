"""The NVIDIA container toolkit's own start-time verdict, computed before any container starts.

`nvidia-container-cli configure --require=…` refuses a container whose image's `NVIDIA_REQUIRE_CUDA` the host
does not meet ("requirement error: unsatisfied condition: cuda>=12.8 …"). orch evaluates the same expression
the same way, so it can say so first, then judges support from NVIDIA's CUDA ↔ driver table
(`data/cuda_driver.json`) and from the driver's own reported CUDA version. Everything here is pure.

What is implemented, read from NVIDIA/libnvidia-container:
* `src/cli/dsl.c` `dsl_evaluate`: the expression splits on spaces into alternatives (OR); each alternative
  splits on commas into conditions (AND). The first alternative whose conditions all hold satisfies it; an
  empty expression is satisfied. When none holds, the error names the expression's FIRST space-separated
  token: `unsatisfied condition: cuda>=12.8, please update your driver …` when that token starts with
  `cuda>=`, else `unsatisfied condition: <token>`. An unknown key is "invalid expression".
* `dsl.c` operators `=`, `!=`, `<`, `<=`, `>`, `>=`; `dsl_compare_version` compares dotted numbers field by
  field, trailing `.0` fields ignored (so 12.4 == 12.4.0); `dsl_compare_string` compares case-insensitively
  and only supports `=` and `!=`.
* `src/cli/configure.c` rules: `cuda` compares the driver's CUDA version (`cuda_version`), `driver` the NVRM
  version, `arch` a device's compute capability, `brand` a device's brand. A rule whose fact is unknown
  (no driver CUDA version, no visible device, no brand) counts as satisfied. The requirements are evaluated
  once per visible GPU (each must pass), or once without a device when none is visible.
* Which expressions are checked (NVIDIA/nvidia-container-toolkit `internal/config/image/cuda_image.go`,
  `GetRequirements`): every `NVIDIA_REQUIRE_*` variable except `NVIDIA_REQUIRE_JETPACK*`, each evaluated on its
  own; a "legacy" image (CUDA_VERSION set, NVIDIA_REQUIRE_CUDA empty) gets `cuda>=<major.minor of CUDA_VERSION>`;
  none at all when `NVIDIA_DISABLE_REQUIRE` parses as a true boolean (Go's strconv.ParseBool: 1, t, T, TRUE,
  true, True — "yes" does not disable it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

from packaging.version import Version

from orchestrator.errors import RequireExpressionError
from orchestrator.vendor import cuda_driver_table
from orchestrator.versions import parse_version

_OPERATORS = ("<=", ">=", "!=", "=", "<", ">")
_RULE = re.compile(r"^([A-Za-z_]+)(<=|>=|!=|=|<|>)(.+)$")


@dataclass(frozen=True)
class DeviceFacts:
    """What the toolkit's per-device rules read: compute capability ("8.6") and brand ("geforce")."""

    arch: str | None = None
    brand: str | None = None


@dataclass(frozen=True)
class RequireOutcome:
    satisfied: bool
    #: The toolkit's own error text when it would refuse ("unsatisfied condition: cuda>=12.8, please …").
    error: str | None = None
    disabled: bool = False
    #: Which facts were unknown and therefore counted as met, as the toolkit does.
    assumed: tuple[str, ...] = field(default_factory=tuple)


def compare_version(left: str, op: str, right: str) -> bool:
    """`dsl_compare_version`: dotted numbers field by field; missing or zero trailing fields are equal."""
    if not re.fullmatch(r"[0-9.]+", left) or not re.fullmatch(r"[0-9.]+", right):
        raise RequireExpressionError(f"not a dotted version: {left!r} {op} {right!r}")
    a = [int(x) for x in left.split(".") if x]
    b = [int(x) for x in right.split(".") if x]
    width = max(len(a), len(b))
    a += [0] * (width - len(a))
    b += [0] * (width - len(b))
    return {
        "=": a == b,
        "!=": a != b,
        "<": a < b,
        "<=": a <= b,
        ">": a > b,
        ">=": a >= b,
    }[op]


def _compare_string(left: str, op: str, right: str) -> bool:
    if op not in ("=", "!="):
        raise RequireExpressionError(f"brand supports only = and !=, not {op}")
    equal = left.casefold() == right.casefold()
    return equal if op == "=" else not equal


def _condition(text: str, driver: str | None, cuda: str | None, device: DeviceFacts | None, assumed: set[str]) -> bool:
    match = _RULE.match(text)
    if match is None:
        raise RequireExpressionError(f"invalid expression: {text!r}")
    key, op, value = match.group(1).lower(), match.group(2), match.group(3)
    if key == "cuda":
        if cuda is None:
            assumed.add("cuda")
            return True
        return compare_version(cuda, op, value)
    if key == "driver":
        if driver is None:
            assumed.add("driver")
            return True
        return compare_version(driver, op, value)
    if key == "arch":
        if device is None or device.arch is None:
            assumed.add("arch")
            return True
        return compare_version(device.arch, op, value)
    if key == "brand":
        if device is None or device.brand is None:
            assumed.add("brand")
            return True
        return _compare_string(device.brand, op, value)
    raise RequireExpressionError(f"invalid expression: unknown key {key!r}")


def _evaluate_once(
    expression: str, driver: str | None, cuda: str | None, device: DeviceFacts | None
) -> tuple[bool, set[str]]:
    assumed: set[str] = set()
    alternatives = [alt for alt in expression.split(" ") if alt]
    if not alternatives:
        return True, assumed
    for alternative in alternatives:
        conditions = [cond for cond in alternative.split(",") if cond]
        if all(_condition(cond, driver, cuda, device, assumed) for cond in conditions):
            return True, assumed
    return False, assumed


def required_cuda(expression: str | None) -> Version | None:
    """The lowest CUDA an NVIDIA_REQUIRE_CUDA expression asks for through a `cuda>=X` condition, read with the same
    split as `dsl_evaluate` (alternatives on spaces, conditions on commas): the alternatives are ORed, so the lowest
    one suffices. `cuda>=12.4 brand=tesla,driver>=470,driver<471` → 12.4; no `cuda>=` condition → None.

    This is what the image needs of the driver's CUDA; whether the toolkit accepts the host is `evaluate_require`."""
    found: list[Version] = []
    for alternative in (expression or "").split(" "):
        for condition in alternative.split(","):
            match = _RULE.match(condition)
            if match is None or match.group(1).lower() != "cuda" or match.group(2) != ">=":
                continue
            version = parse_version(match.group(3))
            if version is not None:
                found.append(version)
    return min(found) if found else None


def unsatisfied_message(expression: str) -> str:
    """The toolkit's refusal text for an expression (dsl.c): it names the first space-separated token."""
    first = next((token for token in expression.split(" ") if token), expression)
    if first.startswith("cuda>="):
        return (
            f"unsatisfied condition: {first}, please update your driver to a newer version, "
            "or use an earlier cuda container"
        )
    return f"unsatisfied condition: {first}"


_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def disables_require(value: str | None) -> bool:
    """NVIDIA_DISABLE_REQUIRE as the toolkit reads it (strconv.ParseBool; anything unparsable is false)."""
    return value is not None and value in _GO_TRUE


def image_requirements(env: Mapping[str, str]) -> list[str]:
    """The expressions the toolkit checks for an image's environment (cuda_image.go GetRequirements)."""
    if disables_require(env.get("NVIDIA_DISABLE_REQUIRE")):
        return []
    found = [
        value
        for name, value in sorted(env.items())
        if name.startswith("NVIDIA_REQUIRE_") and not name.startswith("NVIDIA_REQUIRE_JETPACK")
    ]
    legacy = env.get("CUDA_VERSION", "")
    if legacy and not env.get("NVIDIA_REQUIRE_CUDA"):
        match = re.match(r"^v?(\d+)\.(\d+)", legacy)
        if match:
            found.append(f"cuda>={match.group(1)}.{match.group(2)}")
    return found


def evaluate_image(
    env: Mapping[str, str], driver: str | None, cuda: str | None, devices: Sequence[DeviceFacts] = ()
) -> RequireOutcome:
    """Every requirement of an image's environment, each as `nvidia-container-cli --require` would evaluate it."""
    if disables_require(env.get("NVIDIA_DISABLE_REQUIRE")):
        return RequireOutcome(satisfied=True, disabled=True)
    assumed: set[str] = set()
    for expression in image_requirements(env):
        outcome = evaluate_require(expression, driver, cuda, devices)
        assumed |= set(outcome.assumed)
        if not outcome.satisfied:
            return RequireOutcome(False, outcome.error, assumed=tuple(sorted(assumed)))
    return RequireOutcome(True, assumed=tuple(sorted(assumed)))


def evaluate_require(
    expression: str | None,
    driver: str | None,
    cuda: str | None,
    devices: Sequence[DeviceFacts] = (),
    disable_require: str | None = None,
) -> RequireOutcome:
    """Would `nvidia-container-cli` accept an image with this NVIDIA_REQUIRE_CUDA on this host?

    `driver`: the NVRM version ("550.144.03"); `cuda`: the driver's CUDA version ("12.4"); `devices`: the GPUs
    the container will see. `disable_require`: the image's NVIDIA_DISABLE_REQUIRE value (a true boolean skips).
    """
    if disables_require(disable_require):
        return RequireOutcome(satisfied=True, disabled=True)
    if not expression or not expression.strip():
        return RequireOutcome(satisfied=True)
    assumed: set[str] = set()
    each: list[DeviceFacts | None] = list(devices) or [None]
    for device in each:
        ok, unknown = _evaluate_once(expression, driver, cuda, device)
        assumed |= unknown
        if not ok:
            return RequireOutcome(
                False, f"requirement error: {unsatisfied_message(expression)}", assumed=tuple(sorted(assumed))
            )
    return RequireOutcome(True, assumed=tuple(sorted(assumed)))


# ------------------------------------------------------------------------------------------ CUDA releases


@dataclass(frozen=True)
class CudaRelease:
    cuda: Version
    release: str  # "GA", "Update 1"
    linux_driver: Version
    source: str
    #: The driver as NVIDIA writes it ("570.124.06"; Version would print 570.124.6).
    driver_text: str = ""


@cache
def cuda_releases() -> tuple[CudaRelease, ...]:
    """NVIDIA's Table 3 rows (data/cuda_driver.json `releases`), oldest first."""
    rows = [
        CudaRelease(Version(r.cuda), r.release, Version(r.linux_driver), r.source, r.linux_driver)
        for r in cuda_driver_table().releases
    ]
    return tuple(sorted(rows, key=lambda row: row.cuda))


@cache
def minor_compat_floor(major: int) -> str | None:
    """The minor-version-compatibility floor of a CUDA major as NVIDIA writes it (Table 2); None for 10.x."""
    entry = cuda_driver_table().minor_compat.get(str(major))
    return entry.floor if entry else None


def release_row(cuda: Version) -> CudaRelease | None:
    """The table row of exactly this release (12.4 → 12.4.0 GA; 12.4.1 → Update 1; 10.1.243 → 10.1.105 row)."""
    wanted = _three(cuda)
    for row in cuda_releases():
        if _three(row.cuda) == wanted:
            return row
    # CUDA 10.1's row covers "10.1.105 general release, and updates": match on major.minor for the 10.x rows.
    same_minor = [row for row in cuda_releases() if (row.cuda.major, row.cuda.minor) == (cuda.major, cuda.minor)]
    if cuda.major == 10 and len(same_minor) == 1:
        return same_minor[0]
    return None


def newest_cuda_for_driver(driver: Version) -> Version | None:
    """The newest CUDA release whose shipped driver this driver meets (a driver runs every older toolkit)."""
    fits = [row.cuda for row in cuda_releases() if driver >= row.linux_driver]
    return max(fits) if fits else None


def _three(version: Version) -> tuple[int, int, int]:
    parts = (*version.release, 0, 0, 0)
    return parts[0], parts[1], parts[2]
