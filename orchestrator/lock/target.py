"""The platform a lock is computed for: the dossier's target, never the host that runs `orch lock`.

Python comes from `python.version`, glibc from the base image (orch's table or `system.base_image.glibc`),
the architecture from the command line (the dossier has no field for it: the tables' images are
multi-arch), the PyTorch variant from `system.platform` and `system.version`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from orchestrator import vendor
from orchestrator.model.platform import Platform

Arch = Literal["x86_64", "aarch64"]
ARCHES: tuple[Arch, ...] = ("x86_64", "aarch64")

# The manylinux targets `uv pip compile --python-platform` accepts (uv 0.13): 2_17, 2_28, then 2_31 to 2_40.
# A glibc between two of them locks for the lower one, which only narrows the wheels allowed.
_UV_GLIBC_MINORS = (17, 28, *range(31, 41))

# manylinux_2_5 is the oldest tag pip knows (PEP 600 aliases manylinux1 to it).
_OLDEST_GLIBC_MINOR = 5


@dataclass(frozen=True)
class LockTarget:
    python: str  # "3.11"
    arch: Arch
    glibc: str  # "2.36"
    platform: Platform
    backend_version: str | None
    base_image: str

    @property
    def python_tuple(self) -> tuple[int, int]:
        major, minor = self.python.split(".")
        return int(major), int(minor)

    @property
    def glibc_minor(self) -> int:
        major, minor = self.glibc.split(".")[:2]
        if major != "2":
            raise ValueError(f"glibc {self.glibc} is not a 2.x version")
        return int(minor)

    @property
    def uv_python_platform(self) -> str:
        """The `--python-platform` value: the newest manylinux target uv knows that the glibc runs."""
        fitting = [minor for minor in _UV_GLIBC_MINORS if minor <= self.glibc_minor]
        if not fitting:
            raise ValueError(f"glibc {self.glibc} is older than manylinux_2_17, the oldest target uv locks for")
        return f"{self.arch}-manylinux_2_{fitting[-1]}"

    @property
    def torch_tag(self) -> str:
        return vendor.torch_local_tag(self.platform, self.backend_version)

    @cached_property
    def wheel_tags(self) -> frozenset[Tag]:
        """Every tag a wheel may carry to install on the target (derived, never a hand-picked few)."""
        platforms = [
            f"manylinux_2_{minor}_{self.arch}" for minor in range(self.glibc_minor, _OLDEST_GLIBC_MINOR - 1, -1)
        ]
        platforms += [f"manylinux2014_{self.arch}"]
        if self.arch == "x86_64":
            platforms += ["manylinux2010_x86_64", "manylinux1_x86_64"]
        interpreter = f"cp{self.python_tuple[0]}{self.python_tuple[1]}"
        tags = set(cpython_tags(self.python_tuple, platforms=platforms))
        tags |= set(compatible_tags(self.python_tuple, interpreter, platforms=platforms))
        return frozenset(tags)

    def wheel_fits(self, filename: str) -> bool:
        try:
            tags = parse_wheel_filename(filename)[3]
        except InvalidWheelFilename:
            return False
        return not tags.isdisjoint(self.wheel_tags)

    def describe(self) -> str:
        backend = self.platform if self.backend_version is None else f"{self.platform} {self.backend_version}"
        return (
            f"CPython {self.python}, {self.uv_python_platform} (glibc {self.glibc} of {self.base_image}), "
            f"platform {backend} (torch variant +{self.torch_tag})"
        )

    def key(self) -> str:
        """What --check compares: every fact of the target that changes the resolution."""
        return f"cp{self.python}|{self.uv_python_platform}|{self.platform}|{self.backend_version or '-'}"
