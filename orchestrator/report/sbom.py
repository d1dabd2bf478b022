"""`sbom.cdx.json`: a CycloneDX 1.6 document of a built image, made with cyclonedx-python-lib from build.json.

What it lists, all from what orch already read (the inventory probe, the lock, the wheels, the dossier):

- the image itself as `metadata.component` (type container, `pkg:oci/…@sha256:<image id>`), and its base
  image as a container component it depends on;
- the OS (`/etc/os-release`) and every OS package (`pkg:deb/<distro>/…?arch=…`, from dpkg's status);
- every Python distribution in the image (`pkg:pypi/…`), with the sha256 of the wheel the build installed
  (wheelhouse mode) or the lock's one hash for that pin, and its index (`repository_url`) when the lock
  notes it (`# from URL`, as `orch lock` writes) or the dossier names only one;
- the torch build (its CUDA or HIP version and compiled GPU targets as properties), the CUDA toolkit or
  ROCm the image carries, and compiled extensions with the sha256 read in the image.

Deterministic: the serial number is a UUID derived from the image id (and orch's version), the timestamp is
the image's `created` label, components are sorted by the library. Two builds of the same image write the
same bytes. Nothing secret can be in it: no build args, no environment values, and every URL loses its
user-info and query before it is written (then passes `redact` as a second line of defence).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from orchestrator import __version__
from orchestrator.dossier.lock import Lock
from orchestrator.dossier.models import PythonSpec
from orchestrator.model.build_record import BuildRecord, ImageRef
from orchestrator.model.image_ref import split_reference
from orchestrator.model.inventory import Inventory, parse_freeze
from orchestrator.redact import redact

SBOM_FILE = "sbom.cdx.json"
PYPI = "https://pypi.org/simple"
CREATED_LABEL = "org.opencontainers.image.created"
#: A BOM's serial number is a UUID; orch's are UUID 5 in this namespace, named by image id and orch version.
SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://orch.invalid/sbom")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def public_url(url: str) -> str:
    """`url` with no user-info and no query or fragment: what an index or source may show anyone."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.netloc:
        return redact(url.strip())
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return redact(urlunsplit((parts.scheme, netloc, parts.path, "", "")))


def python_sources(python: PythonSpec) -> list[str]:
    """The indexes and find-links the build searched, in pip's order, without credentials."""
    sources = [public_url(index.url) for index in python.indexes]
    if python.use_pypi:
        sources.insert(0, PYPI)
    return sources + [public_url(link) if "://" in link else f"find-links {link}" for link in python.find_links]


_REQUIREMENT_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")
_FROM_NOTE = re.compile(r"^\s+# from (?P<url>[a-z][a-z0-9+.-]*://[^\s;]+)")


def lock_sources(text: str) -> dict[str, str]:
    """{package: the index or find-links URL it was locked from}, from the `# from URL` notes `orch lock` writes
    under each entry (orchestrator/lock/output.py); a hand-written lock has none, and gives {}."""
    sources: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines():
        if line and not line[0].isspace() and not line.startswith(("#", "-")):
            match = _REQUIREMENT_NAME.match(line)
            current = canonicalize_name(match.group(1)) if match else None
            continue
        note = _FROM_NOTE.match(line)
        if note is not None and current is not None:
            sources[current] = public_url(note.group("url"))
    return sources


def _created(record: BuildRecord) -> datetime:
    labels = record.image.labels if record.image else {}
    try:
        return datetime.fromisoformat(labels[CREATED_LABEL].replace("Z", "+00:00")).astimezone(UTC)
    except (KeyError, ValueError):
        return _EPOCH  # every image orch builds has the label; a fixed moment keeps the document reproducible


def _sha256(value: str) -> HashType:
    return HashType(alg=HashAlgorithm.SHA_256, content=value.removeprefix("sha256:"))


def _props(pairs: Iterable[tuple[str, str | None]]) -> list[Property]:
    return [Property(name=f"orch:{name}", value=redact(value)) for name, value in pairs if value]


def _repository_and_tag(ref: str) -> tuple[str, str]:
    """`registry/path/name:tag@sha256:…` → (`registry/path/name`, `tag`); the digest, if any, is left out."""
    repository, tag, _ = split_reference(ref)
    return repository, tag or ""


def _oci(ref: str, digest: str) -> PackageURL:
    """`pkg:oci/<name>@sha256:…?repository_url=<registry/path>&tag=<tag>` for an image reference."""
    repository, tag = _repository_and_tag(ref)
    namespace, _, name = repository.rpartition("/")
    qualifiers = {"tag": tag} if tag else {}
    if namespace:
        qualifiers["repository_url"] = namespace
    return PackageURL("oci", name=name.lower(), version=digest, qualifiers=qualifiers)


def _image_component(record: BuildRecord, image: ImageRef) -> Component:
    purl = _oci(image.tag, image.id)
    return Component(
        type=ComponentType.CONTAINER,
        name=_repository_and_tag(image.tag)[0],
        version=image.id,
        bom_ref="image",
        purl=purl,
        hashes=[_sha256(image.id)],
        properties=_props(
            [
                ("dossier.name", record.dossier.name),
                ("dossier.identity", record.dossier.identity),
                ("dossier.variant", record.dossier.variant),
                ("install.mode", record.context.install_mode),
                ("context.digest", record.context.digest),
                ("code.revision", record.code.revision),
                ("image.size_bytes", str(image.size_bytes)),
            ]
        ),
    )


def _base_component(record: BuildRecord) -> Component:
    base = record.base_image
    version = base.digest or base.id
    return Component(
        type=ComponentType.CONTAINER,
        name=_repository_and_tag(base.ref)[0],
        version=version,
        bom_ref="base-image",
        purl=_oci(base.ref, version),
        hashes=[_sha256(base.id)],
        properties=_props([("base.ref", base.ref), ("base.id", base.id), ("base.digest", base.digest)]),
    )


def _os_components(inventory: Inventory) -> list[Component]:
    release = inventory.os_release
    distro = (release.get("ID") or "linux").lower()
    version_id = release.get("VERSION_ID")
    components: list[Component] = []
    if release.get("ID"):
        components.append(
            Component(
                type=ComponentType.OPERATING_SYSTEM,
                name=distro,
                version=version_id,
                bom_ref=f"os:{distro}",
                description=release.get("PRETTY_NAME"),
            )
        )
    kind = {"dpkg": "deb", "rpm": "rpm"}.get(inventory.os_package_manager or "")
    if kind is None:
        return components
    for name, version in sorted(inventory.os_packages.items()):
        qualifiers = {}
        arch = inventory.os_package_architectures.get(name)
        if arch:
            qualifiers["arch"] = arch
        if version_id:
            qualifiers["distro"] = f"{distro}-{version_id}"
        purl = PackageURL(kind, namespace=distro, name=name, version=version or None, qualifiers=qualifiers)
        components.append(
            Component(
                type=ComponentType.LIBRARY,
                name=name,
                version=version or None,
                bom_ref=purl.to_string(),
                purl=purl,
                properties=_props([("package.manager", inventory.os_package_manager)]),
            )
        )
    return components


def _installed(inventory: Inventory) -> list[dict[str, Any]]:
    """(name, version, installer, direct URL) of every distribution: `pip inspect`, else `pip freeze`."""
    inspect = inventory.pip_inspect or {}
    rows = [
        {
            "name": str(item.get("name")),
            "version": str(item.get("version")),
            "installer": item.get("installer"),
            "direct_url": (item.get("direct_url") or {}).get("url")
            if isinstance(item.get("direct_url"), dict)
            else None,
        }
        for item in inspect.get("installed") or []
        if isinstance(item, dict) and item.get("name") and item.get("version")
    ]
    if rows:
        return rows
    return [
        {"name": name, "version": version, "installer": None, "direct_url": None}
        for name, version in parse_freeze(inventory.pip_freeze).items()
        if not version.startswith("@")
    ]


def _python_components(
    record: BuildRecord, inventory: Inventory, lock: Lock, sources: Sequence[str], locked_from: Mapping[str, str]
) -> list[Component]:
    wheels: dict[tuple[str, str], str] = {}
    for wheel in record.context.wheels:
        try:
            name, version, _, _ = parse_wheel_filename(wheel.file)
        except InvalidWheelFilename:
            continue
        wheels[(canonicalize_name(name), str(version))] = wheel.sha256
    single_index = sources[0] if len(sources) == 1 and sources[0] != PYPI and "://" in sources[0] else None
    components = []
    for row in _installed(inventory):
        name, version = canonicalize_name(row["name"]), row["version"]
        digest, hash_source = wheels.get((name, version)), "wheel the build installed"
        pinned = lock.get(name)
        if digest is None and pinned is not None and str(pinned.version) == version and len(pinned.hashes) == 1:
            digest, hash_source = pinned.hashes[0], "the lock's hash for this pin"
        index = locked_from.get(name) if pinned is not None and str(pinned.version) == version else None
        index = index or single_index
        purl = PackageURL(
            "pypi",
            name=name,
            version=version,
            qualifiers={"repository_url": index} if index and index != PYPI else {},
        )
        torch = inventory.backend if name == "torch" else None
        components.append(
            Component(
                type=ComponentType.LIBRARY,
                name=name,
                version=version,
                bom_ref=PackageURL("pypi", name=name, version=version).to_string(),
                purl=purl,
                hashes=[_sha256(digest)] if digest else [],
                properties=_props(
                    [
                        ("installer", row["installer"]),
                        ("hash.source", hash_source if digest else None),
                        ("locked", "yes" if pinned is not None else "no"),
                        ("index", index),
                        ("direct_url", public_url(row["direct_url"]) if row["direct_url"] else None),
                        ("torch.cuda", torch.torch_cuda if torch else None),
                        ("torch.hip", torch.torch_hip if torch else None),
                        ("torch.arch_list", " ".join(torch.torch_arch_list) if torch else None),
                    ]
                ),
            )
        )
    return components


def _backend_components(inventory: Inventory) -> list[Component]:
    backend = inventory.backend
    components = []
    if backend.cuda_toolkit:
        components.append(
            Component(type=ComponentType.FRAMEWORK, name="cuda-toolkit", version=backend.cuda_toolkit, bom_ref="cuda")
        )
    if backend.rocm:
        components.append(Component(type=ComponentType.FRAMEWORK, name="rocm", version=backend.rocm, bom_ref="rocm"))
    for artefact in inventory.extensions.artefacts if inventory.extensions else []:
        components.append(
            Component(
                type=ComponentType.LIBRARY,
                name=artefact.name,
                bom_ref=f"extension:{artefact.name}",
                hashes=[_sha256(artefact.sha256)] if artefact.sha256 else [],
                properties=_props(
                    [("extension.file", artefact.file), ("extension.compilers", "; ".join(artefact.compilers))]
                ),
            )
        )
    return components


def sbom_bom(record: BuildRecord, lock: Lock, python: PythonSpec, lock_text: str = "") -> Bom:
    """The CycloneDX BOM of a passed build's image (`record.image` and `record.inventory` are set).

    `lock_text`, the lock as written, gives each package's index when `orch lock` noted it (`# from URL`).
    """
    if record.image is None or record.inventory is None:
        raise ValueError("an SBOM describes a built image whose inventory was read")
    sources = python_sources(python)
    root = _image_component(record, record.image)
    bom = Bom(
        serial_number=uuid.uuid5(SERIAL_NAMESPACE, f"{record.image.id} orch {__version__}"),
        metadata=BomMetaData(
            timestamp=_created(record),
            component=root,
            tools=ToolRepository(
                components=[Component(type=ComponentType.APPLICATION, name="orch", version=__version__)]
            ),
            properties=_props(
                [
                    *((f"python.source.{position}", source) for position, source in enumerate(sources)),
                    ("python.version", record.inventory.python_version),
                    ("torch.version", record.inventory.backend.torch),
                    ("torch.cuda", record.inventory.backend.torch_cuda),
                    ("torch.hip", record.inventory.backend.torch_hip),
                ]
            ),
        ),
    )
    base = _base_component(record)
    parts = [
        base,
        *_os_components(record.inventory),
        *_python_components(record, record.inventory, lock, sources, lock_sources(lock_text)),
        *_backend_components(record.inventory),
    ]
    for component in parts:
        bom.components.add(component)
    bom.register_dependency(root, parts)
    return bom


def sbom_json(record: BuildRecord, lock: Lock, python: PythonSpec, lock_text: str = "") -> str:
    """The BOM as CycloneDX 1.6 JSON text, indented, ending with a newline."""
    return JsonV1Dot6(sbom_bom(record, lock, python, lock_text)).output_as_string(indent=2) + "\n"
