"""The rows of a comparison that describe what was built and where: dossier, packages, system facts.

What each verdict means and what a variant excuses: `orchestrator.compare`. The stage and number rows
are `orchestrator.compare.layers`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from orchestrator.compare.read import (
    BUILD_FILE,
    VARIANT_SECTIONS,
    Side,
    device_facts,
    host_facts,
    image_facts,
    record_of,
)
from orchestrator.model.comparison import Difference, VariantInfo, Verdict
from orchestrator.model.inventory import Inventory, InventoryDiff, diff_inventories
from orchestrator.model.platform import LABEL_PREFIX
from orchestrator.model.recorded import Recorded
from orchestrator.report.view import clean

HOST_NOTE = "another host: the dossier does not fix it; the stages and numbers say whether it matters"


# -- facts of one side ---------------------------------------------------------------------------------


def _show(value: object) -> str:
    """A recorded value as text; a recorded None (no driver, not a CUDA build) is 'none'."""
    return "none" if value is None or value == "" else clean(str(value))


def given(facts: Recorded | None, field: str) -> bool:
    """Whether the stage recorded `field` at all. A recorded None is a value (no driver, not a CUDA build),
    an absent key is "not recorded". `field` must be a declared field of the facts model."""
    if facts is None:
        return False
    if field not in type(facts).model_fields:
        raise AssertionError(f"{field!r} is not a field of {type(facts).__name__}")
    return field in facts.model_fields_set


def _image_fact(
    side: Side, from_inventory: Callable[[Inventory], object], field: str, from_facts: Callable[..., object]
) -> str | None:
    """From the build record's inventory, else the report's image facts (when the stage recorded `field`)."""
    inventory = side.record.inventory if side.record is not None else None
    if inventory is not None:
        return _show(from_inventory(inventory))
    facts = image_facts(side)
    if facts is None or not given(facts, field):
        return None
    return _show(from_facts(facts))


def _torch_fact(side: Side, key: Literal["version", "cuda", "hip"]) -> str | None:
    field = "torch" if key == "version" else f"torch_{key}"
    found = _image_fact(
        side,
        lambda inventory: getattr(inventory.backend, field),
        field,
        lambda facts: getattr(facts, field),
    )
    if found is not None:
        return found
    device = device_facts(side)
    torch = device.torch if device is not None else None
    return _show(getattr(torch, key)) if torch is not None else None


def platform_of(side: Side) -> str | None:
    if side.report is not None:
        dossier = side.report.dossier
        return f"{dossier.platform} {dossier.backend_version}" if dossier.backend_version else dossier.platform
    record = record_of(side)
    if record.image is None:
        return None
    platform = record.image.labels.get(f"{LABEL_PREFIX}.platform")
    version = record.image.labels.get(f"{LABEL_PREFIX}.backend.version")
    if platform is None:
        return None
    return f"{platform} {version}" if version and version != "none" else platform


def _python(side: Side) -> str | None:
    return _image_fact(side, lambda inventory: inventory.python_version, "python", lambda facts: facts.python)


def _host_nvidia(side: Side) -> str | None:
    facts = host_facts(side)
    if facts is None or not given(facts, "nvidia"):
        return None
    nvidia = facts.nvidia
    if nvidia is None:
        return _show(None)
    driver = _show(nvidia.driver_version)
    cuda = nvidia.cuda_driver_version
    return f"{driver} (CUDA ≤ {cuda})" if cuda else driver


def _host_amd(key: Literal["driver_version", "rocm_version"]) -> Callable[[Side], str | None]:
    def read(side: Side) -> str | None:
        facts = host_facts(side)
        if facts is None or not given(facts, "amd"):
            return None
        amd = facts.amd
        if amd is None:
            return _show(None)
        value = amd.driver_version if key == "driver_version" else amd.rocm_version
        if key == "driver_version" and value is None:
            return "unknown" if amd.source == "rocminfo" else "in-tree amdgpu"
        return _show(value)

    return read


def _device_count(side: Side) -> str | None:
    facts = device_facts(side)
    accelerator = facts.accelerator if facts is not None else None
    return _show(accelerator.device_count) if accelerator is not None else None


def _devices(side: Side) -> str | None:
    facts = device_facts(side)
    devices = facts.devices if facts is not None else None
    if devices is None:
        return None
    names = [clean(str(device.name or f"device {device.index}: {device.error}")) for device in devices]
    return ", ".join(names) if names else "none"


def _host_cpu(side: Side) -> str | None:
    """The host CPU and the ISA flags that pick float kernels: another CPU explains other last bits."""
    facts = host_facts(side)
    cpu = facts.cpu if facts is not None else None
    if cpu is None:
        return None
    shown = " ".join(str(flag) for flag in cpu.isa_flags)
    return f"{_show(cpu.model)}; ISA {shown or 'none of note'}"


def _cpu_capability(side: Side) -> str | None:
    facts = device_facts(side)
    value = facts.cpu_capability if facts is not None else None
    return None if value is None else _show(value)


#: (field, how to read it from a side, the variant sections that make a difference in it intended).
SYSTEM_FIELDS: tuple[tuple[str, Callable[[Side], str | None], frozenset[str]], ...] = (
    ("platform", platform_of, frozenset({"system"})),
    ("python", _python, frozenset({"system", "python"})),
    ("torch", lambda side: _torch_fact(side, "version"), frozenset({"python"})),
    ("torch.version.cuda", lambda side: _torch_fact(side, "cuda"), frozenset({"system", "python"})),
    ("torch.version.hip", lambda side: _torch_fact(side, "hip"), frozenset({"system", "python"})),
    (
        "CUDA toolkit (image)",
        lambda side: _image_fact(
            side, lambda inventory: inventory.backend.cuda_toolkit, "cuda_toolkit", lambda facts: facts.cuda_toolkit
        ),
        frozenset({"system"}),
    ),
    (
        "ROCm (image)",
        lambda side: _image_fact(side, lambda inventory: inventory.backend.rocm, "rocm", lambda facts: facts.rocm),
        frozenset({"system"}),
    ),
    ("host NVIDIA driver", _host_nvidia, frozenset({"system"})),
    ("host AMD driver", _host_amd("driver_version"), frozenset({"system"})),
    ("host ROCm", _host_amd("rocm_version"), frozenset({"system"})),
    ("device count", _device_count, frozenset({"system"})),
    ("devices", _devices, frozenset({"system"})),
    ("host CPU", _host_cpu, frozenset({"system"})),
    ("torch CPU capability", _cpu_capability, frozenset({"system"})),
)


#: The system rows that describe the host that ran the probes, not the image: see the `host` verdict.
HOST_FIELDS = frozenset(
    {
        "host NVIDIA driver",
        "host AMD driver",
        "host ROCm",
        "device count",
        "devices",
        "host CPU",
        "torch CPU capability",
    }
)


def _freeze(side: Side) -> tuple[list[str], str] | None:
    """`pip freeze` lines and the file they came from: the build record's inventory, else the report's image facts."""
    if side.record is not None and side.record.inventory is not None:
        return side.record.inventory.pip_freeze, str(side.record_file or side.path)
    facts = image_facts(side)
    packages = facts.packages if facts is not None else None
    if isinstance(packages, list):
        return list(packages), str(side.report_file or side.path)
    return None


# -- intent --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Intent:
    label: str
    overrides: frozenset[str] | None  # None: unknown, everything a variant can change is excused

    def covers(self, sections: frozenset[str]) -> bool:
        return self.overrides is None or bool(self.overrides & sections)


def variant_of(side: Side) -> VariantInfo | None:
    name = side.variant_name
    if name is None:
        return None
    if side.variant is not None and side.variant.name == name:
        return side.variant
    kind = "report" if side.report is not None else "build record"
    return VariantInfo(
        name=name, declared=True, source=f"recorded in the {kind}; orch records only variants the dossier declares"
    )


def intent_of(a: Side, b: Side, notes: list[str]) -> Intent | None:
    if a.variant_name == b.variant_name:
        return None
    if a.dossier_name != b.dossier_name:
        notes.append(
            f"A and B are different dossiers ({a.dossier_name}, {b.dossier_name}): a variant only explains "
            "differences from its own dossier's reference"
        )
        return None
    variants = [info for info in (variant_of(a), variant_of(b)) if info is not None]
    undeclared = [info for info in variants if not info.declared]
    if undeclared:
        notes.append(
            f"variant {undeclared[0].name} is not declared in {undeclared[0].source}: its differences are unintended"
        )
        return None
    last = variants[-1]
    names = " → ".join(f"variant {info.name}" for info in variants)
    label = f"{names}: {last.description or '(description unknown: the dossier could not be read)'}"
    overrides: frozenset[str] | None = frozenset()
    for info in variants:
        if info.overrides is None or overrides is None:
            overrides = None
        else:
            overrides |= frozenset(info.overrides)
    return Intent(label=label, overrides=overrides)


# -- dossier, system, packages -------------------------------------------------------------------------


def _difference(
    field: str, a: str, b: str, intent: Intent | None, sections: frozenset[str], unexplained: str | None = None
) -> Difference:
    if a == b:
        return Difference(field=field, a=a, b=b, verdict="same")
    if intent is not None and intent.covers(sections):
        return Difference(field=field, a=a, b=b, verdict="intended", note=intent.label)
    if field in HOST_FIELDS:
        return Difference(field=field, a=a, b=b, verdict="host", note=HOST_NOTE)
    return Difference(field=field, a=a, b=b, verdict="changed", note=unexplained)


def dossier_rows(a: Side, b: Side, intent: Intent | None) -> list[Difference]:
    every = frozenset(VARIANT_SECTIONS)
    same_name = a.dossier_name == b.dossier_name
    identity = _difference(
        "identity",
        a.identity,
        b.identity,
        intent,
        every,
        "the dossier or a file it references changed (lock, sample, reference outputs, code)",
    )
    if identity.verdict == "intended" and intent is not None:
        identity = identity.model_copy(update={"note": f"{intent.label} — a variant has its own identity, as expected"})
    return [
        Difference(
            field="dossier",
            a=a.dossier_name,
            b=b.dossier_name,
            verdict="same" if same_name else "changed",
            note=None if same_name else "different dossiers",
        ),
        _difference(
            "variant", a.variant_name or "none (reference)", b.variant_name or "none (reference)", intent, every
        ),
        identity,
    ]


def system_rows(a: Side, b: Side, intent: Intent | None, not_compared: list[str]) -> list[Difference]:
    rows: list[Difference] = []
    for field, read, sections in SYSTEM_FIELDS:
        value_a, value_b = read(a), read(b)
        if value_a is None or value_b is None:
            if value_a is not None or value_b is not None:
                not_compared.append(f"{field}: not recorded in {'A' if value_a is None else 'B'}")
            continue
        rows.append(_difference(field, value_a, value_b, intent, sections))
    return rows


def package_rows(
    a: Side, b: Side, intent: Intent | None, not_compared: list[str]
) -> tuple[InventoryDiff | None, Verdict | None, str | None]:
    freeze_a, freeze_b = _freeze(a), _freeze(b)
    if freeze_a is None or freeze_b is None:
        missing = "A and B have" if freeze_a is None and freeze_b is None else f"{'A' if freeze_a is None else 'B'} has"
        not_compared.append(
            f"packages: {missing} no inventory (give the {BUILD_FILE}, or the `orch rebuild` folder holding it)"
        )
        return None, None, None
    diff = diff_inventories(freeze_a[0], freeze_b[0], freeze_a[1])
    if diff.identical:
        return diff, "same", None
    if intent is not None and intent.covers(frozenset({"python"})):
        return diff, "intended", intent.label
    return diff, "changed", None
