"""An in-memory engine for unit tests: every call recorded, every result scripted, no Docker anywhere.

It behaves as the Docker adapter does where orch relies on it: a build makes an image whose id is the
sha256 of its config (so `save` writes a `docker save` tarball that `orch verify` accepts, and `load`
gives the same id back); a container "writes" its scripted files into the host folder mounted at the
container path they name; containers and images carry the engine's labels. It reads no Dockerfile: a built
image's labels are the request's (`BuildRequest.dockerfile_labels`, `.labels`) and the script's, its history
the script's (after that of `ScriptedBuild.base`). A BuildKit build reads its context from the context
server that `serve` holds, as the engine fetches it.

Why one module of 400+ lines: it is the whole Engine protocol in memory, every member beside the others it
shares state with (images, builds, served contexts); split, each part would import the others' dictionaries.

    engine = FakeEngine(runs={"sample": ScriptedRun(files={"/orch/output/x.npy": data})})
    record = run_build(loaded, engine, options)
    assert engine.calls[0] == ("image", "orch/debian-python:bookworm")
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import IO, TYPE_CHECKING, Self

from orchestrator.engine import (
    BuildOutcome,
    BuildRequest,
    Connection,
    CopyOut,
    Engine,
    EngineInfo,
    EngineSettings,
    ImageInfo,
    LayerEntry,
    PullRequest,
    RegistryAuth,
    RemoveContainers,
    RemoveImage,
    RootfsImport,
    RunOutcome,
    Served,
)
from orchestrator.errors import BaseImageMissing, ImageNotBuilt, RegistryError
from orchestrator.plan.specs import BuildNetwork, RunSpec, ServiceSpec
from orchestrator.plan.wheels_image import ROLE as WHEELS_ROLE
from orchestrator.plan.wheels_image import ROLE_LABEL as WHEELS_ROLE_LABEL

PROBE_LABEL = "io.orch.probe"


@dataclass(frozen=True)
class ScriptedBuild:
    """What the next build does: fail with the engine's `error` (after `log`), or make an image with `labels`."""

    log: str = "Step 1/1 : FROM base\n"
    #: The engine's own error; as the Docker adapter does, the fake ends the log with `ERROR: <error>`.
    error: str | None = None
    #: Labels of the built image besides those the request names (`dockerfile_labels`, `labels`).
    labels: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    size: int = 1 << 20
    #: The image the build starts FROM (a ref the fake holds): its history comes first in the built image's.
    base: str | None = None
    #: The history entries the build adds on its base's.
    layers: Sequence[LayerEntry] = ()


@dataclass(frozen=True)
class ScriptedRun:
    """What a container does: its exit, its output, and the files it writes (container path → bytes)."""

    exit_code: int | None = 0
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = 0.01
    files: Mapping[str, bytes] = field(default_factory=dict)
    #: What `run(spec, copy)` copies out: container folder → the engine's tar of it.
    archives: Mapping[str, bytes] = field(default_factory=dict)


def image_config(labels: Mapping[str, str], env: Mapping[str, str]) -> bytes:
    """A minimal image config; its sha256 is the image id, as for a real image."""
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": dict(labels), "Env": [f"{k}={v}" for k, v in env.items()], "Cmd": ["true"]},
        "rootfs": {"type": "layers", "diff_ids": []},
    }
    return json.dumps(config, sort_keys=True).encode()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def history_entry(instruction: str, size: int) -> LayerEntry:
    """What the classic builder records for an instruction: RUN's shell command, `#(nop)` for the rest."""
    word, _, rest = instruction.partition(" ")
    text = f"/bin/sh -c {rest}" if word == "RUN" else f"/bin/sh -c #(nop)  {instruction}"
    return LayerEntry(created_by=text, size=size if word in ("RUN", "COPY", "ADD") else 0)


class FakeEngine:
    """Scripted by probe label (`inventory`, `device`, `sample`): `runs[label]` is one run or a list, used in turn."""

    def __init__(
        self,
        *,
        images: Iterable[ImageInfo] = (),
        builds: Sequence[ScriptedBuild] = (ScriptedBuild(),),
        runs: Mapping[str, ScriptedRun | Sequence[ScriptedRun]] | None = None,
        info: EngineInfo | None = None,
        labels: Mapping[str, str] | None = None,
        tag_namespace: str = "orch",
        registry_error: str | None = None,
        registry_auth: RegistryAuth | None = None,
    ) -> None:
        self._settings = EngineSettings(labels=dict(labels or {}), tag_namespace=tag_namespace)
        #: When set, every push and pull fails with this as the registry's answer (a registry that is down).
        self.registry_error = registry_error
        #: When set, the registry accepts only these credentials.
        self.registry_auth = registry_auth
        #: What the fake registry holds: `name@sha256:…` → the image pushed there.
        self.registry: dict[str, ImageInfo] = {}
        self._images: dict[str, ImageInfo] = {}
        self._configs: dict[str, bytes] = {}
        self._histories: dict[str, list[LayerEntry]] = {}
        for image in images:
            self.add_image(image)
        self._builds = list(builds)
        self._runs = {
            key: [value] if isinstance(value, ScriptedRun) else list(value) for key, value in (runs or {}).items()
        }
        self._info = info or EngineInfo(
            endpoint="fake://", server_version="0", api_version="0", os="linux", runtimes=("runc",), cdi_spec_dirs=()
        )
        #: Every call, in order: (method, main argument, …).
        self.calls: list[tuple[str, ...]] = []
        #: Every container spec `run` received, in order.
        self.specs: list[RunSpec] = []
        #: The tag, network and build labels of each build, in order.
        self.builds: list[tuple[str, BuildNetwork, dict[str, str]]] = []
        self.feeds: list[tuple[ServiceSpec, list[str]]] = []
        #: The entry names of each build's context tar, in build order.
        self.contexts: list[list[str]] = []
        self.feeds_running: set[str] = set()
        #: The context tars the context servers held, by their path under the server's root.
        self.served: dict[str, bytes] = {}
        #: The names in each wheels image's context (plan/wheels_image.py), apart from `contexts`.
        self.wheels_contexts: list[list[str]] = []
        self.closed = False

    # -- scripting helpers ---------------------------------------------------------------------------

    def add_image(self, image: ImageInfo, *tags: str, history: Sequence[LayerEntry] | None = None) -> None:
        for ref in {image.id, *image.tags, *tags}:
            self._images[ref] = image
        if history is not None or image.id not in self._histories:
            self._histories[image.id] = list(
                history or [LayerEntry("/bin/sh -c #(nop) ADD file:rootfs in / ", image.size)]
            )

    def _make_image(
        self, labels: Mapping[str, str], env: Mapping[str, str], tags: Sequence[str], size: int
    ) -> ImageInfo:
        config = image_config(labels, env)
        image_id = "sha256:" + hashlib.sha256(config).hexdigest()
        image = ImageInfo(id=image_id, tags=tuple(tags), labels=dict(labels), env=dict(env), repo_digests=(), size=size)
        self._configs[image_id] = config
        self.add_image(image)
        return image

    def connection(self) -> Connection:
        """What `connect()` would return, for code that opens its own connection."""
        return Connection(self, self.close)

    # -- the Engine protocol ---------------------------------------------------------------------------

    @property
    def settings(self) -> EngineSettings:
        return self._settings

    def info(self) -> EngineInfo:
        self.calls.append(("info",))
        return self._info

    def image(self, ref: str, *, layers: bool = False) -> ImageInfo | None:
        self.calls.append(("image", ref, "layers") if layers else ("image", ref))
        image = self._images.get(ref)
        if image is None:
            return None
        # As `docker image inspect` does, every tag the image has now (tags added by `tag` included).
        names = [k for k, v in self._images.items() if v.id == image.id and "@" not in k and k != image.id]
        tags = (*[t for t in image.tags if t in names], *[n for n in names if n not in image.tags])
        history = tuple(self._histories.get(image.id, [])) if layers else ()
        return replace(image, tags=tags, layers=history)

    def pull(self, request: PullRequest) -> ImageInfo:
        self.calls.append(("pull", request.ref))
        if request.missing == "base":
            raise BaseImageMissing(f"the fake engine pulls nothing: {request.ref} is not among its images")
        self._registry_gate(f"pulling {request.ref}", request.auth)
        image = self.registry.get(request.ref)
        if image is None:
            raise RegistryError(f"pulling {request.ref} failed: manifest unknown")
        pulled = ImageInfo(
            id=image.id, tags=(), labels=image.labels, env=image.env, repo_digests=(request.ref,), size=image.size
        )
        for ref in (image.id, request.ref):
            self._images.setdefault(ref, pulled)
        return self._images[request.ref]

    def build(self, request: BuildRequest) -> BuildOutcome:
        self.calls.append(("build", request.tag))
        if request.network == "wheel-feed" and request.feed not in self.feeds_running:
            raise AssertionError("a wheel-feed build ran without its feed running")
        if request.builder == "buildkit":
            # The engine fetches the context from the URL: only from a context server running now.
            running = request.remote is not None and any(
                request.remote.startswith(f"http://fake-{feed}/") for feed in self.feeds_running
            )
            if not running or request.remote is None:
                raise AssertionError("a BuildKit build ran without its context server running")
            context: IO[bytes] = io.BytesIO(self.served[request.remote.split("/", 3)[3]])
        else:
            assert request.context is not None
            context = request.context
        with tarfile.open(fileobj=context, mode="r") as tar:
            names = sorted(tar.getnames())
        if request.labels.get(WHEELS_ROLE_LABEL) == WHEELS_ROLE:
            # BuildKit's wheels image (FROM scratch, one COPY) is not scripted: it is made, as a real engine would.
            self.wheels_contexts.append(names)
            image = self._make_image(dict(request.labels), {}, [request.tag], 1 << 20)
            return BuildOutcome(image.id, "#1 [1/1] COPY wheels /wheels\n")
        self.contexts.append(names)
        script = self._builds.pop(0) if len(self._builds) > 1 else self._builds[0]
        self.builds.append((request.tag, request.network, dict(request.labels)))
        for line in script.log.splitlines():
            if request.on_line is not None:
                request.on_line(line)
        if script.error is not None:
            return BuildOutcome(None, f"{script.log}ERROR: {script.error}\n", script.error)
        image_labels = {**request.dockerfile_labels, **script.labels, **request.labels}
        image = self._make_image(image_labels, script.env, [request.tag], script.size)
        base_image = self._images.get(script.base) if script.base else None
        base_history = self._histories.get(base_image.id, []) if base_image else []
        self._histories[image.id] = [*base_history, *script.layers]
        return BuildOutcome(image.id, script.log)

    @contextlib.contextmanager
    def _serve(self, spec: ServiceSpec, files: IO[bytes]) -> Iterator[Served]:
        with tarfile.open(fileobj=files, mode="r") as tar:
            self.feeds.append((spec, sorted(tar.getnames())))
            # A context server's one member is the context tar: kept, so a BuildKit build can read it.
            for member in tar.getmembers():
                if member.name.endswith("/context.tar") and (handle := tar.extractfile(member)) is not None:
                    self.served[member.name.partition("/")[2]] = handle.read()
        feed = f"feed-{len(self.feeds)}"
        self.feeds_running.add(feed)
        try:
            yield Served(feed, f"http://fake-{feed}/" if spec.network == "bridge" else None)
        finally:
            self.feeds_running.discard(feed)

    def serve(self, spec: ServiceSpec, files: IO[bytes]) -> contextlib.AbstractContextManager[Served]:
        """Records the service and the names it would serve; a wheel-feed build asserts that it runs inside it."""
        return self._serve(spec, files)

    def run(self, spec: RunSpec, copy: CopyOut | None = None) -> RunOutcome:
        probe = spec.labels.get(PROBE_LABEL, "")
        self.calls.append(("run", probe, spec.image))
        self.specs.append(spec)
        queue = self._runs.get(probe)
        if not queue:
            raise AssertionError(f"the fake engine has no scripted run for the {probe or 'unlabelled'} container")
        script = queue.pop(0) if len(queue) > 1 else queue[0]
        for path, data in script.files.items():
            self._write(spec, path, data)
        if copy is not None and script.exit_code == 0:
            if copy.path not in script.archives:
                raise AssertionError(f"the fake engine has no scripted archive of {copy.path}")
            copy.dest.write(script.archives[copy.path][: copy.max_bytes + 1])
        return RunOutcome(
            exit_code=script.exit_code,
            stdout=script.stdout,
            stderr=script.stderr,
            timed_out=script.timed_out,
            duration_s=script.duration_s,
            oom_killed=script.oom_killed,
        )

    @staticmethod
    def _write(spec: RunSpec, path: str, data: bytes) -> None:
        """Into the host folder of the writable mount that holds `path`, as a bind mount would."""
        target = PurePosixPath(path)
        for mount in spec.mounts:
            if not mount.read_only and target.is_relative_to(mount.target):
                dest = mount.source / target.relative_to(mount.target)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
                return
        raise AssertionError(f"{path} is not under a writable mount of the {spec.labels.get(PROBE_LABEL)} container")

    def _registry_gate(self, what: str, auth: RegistryAuth | None) -> None:
        if self.registry_error is not None:
            raise RegistryError(f"{what} failed: {self.registry_error}")
        if self.registry_auth is not None and auth != self.registry_auth:
            raise RegistryError(f"{what} failed: unauthorized: authentication required")

    def push(self, repository: str, tag: str, auth: RegistryAuth | None = None) -> str:
        self.calls.append(("push", f"{repository}:{tag}"))
        image = self._images.get(f"{repository}:{tag}")
        if image is None:
            raise ImageNotBuilt(f"image {repository}:{tag} is not in the engine")
        self._registry_gate(f"pushing {repository}:{tag}", auth)
        # A registry's digest is that of the manifest it stores: here, of the image id and the repository.
        digest = "sha256:" + hashlib.sha256(f"{repository}|{image.id}".encode()).hexdigest()
        pinned = f"{repository}@{digest}"
        self.registry[pinned] = image
        known = replace(image, repo_digests=(*image.repo_digests, pinned))
        for ref, held in list(self._images.items()):
            if held.id == image.id:
                self._images[ref] = known
        self._images[pinned] = known  # `docker image inspect name@digest` finds it, as RepoDigests says
        return digest

    def load(self, source: IO[bytes] | Iterable[bytes] | RootfsImport) -> list[str]:
        if isinstance(source, RootfsImport):
            name = f"{source.repository}:{source.tag}"
            self.calls.append(("import", name))
            return [self._make_image({}, {}, [name], source.tar_path.stat().st_size).id]
        self.calls.append(("load",))
        data = source.read() if hasattr(source, "read") else b"".join(source)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
            loaded = []
            for entry in manifest:
                config = tar.extractfile(entry["Config"]).read()  # type: ignore[union-attr]
                document = json.loads(config)
                labels = document["config"].get("Labels") or {}
                env = dict(item.split("=", 1) for item in document["config"].get("Env") or [])
                image = self._make_image(labels, env, entry.get("RepoTags") or [], len(data))
                if image.id != "sha256:" + hashlib.sha256(config).hexdigest():
                    raise AssertionError("a loaded image's id is the sha256 of its config")
                loaded.append(image.id)
        return loaded

    def save(self, ref: str, dest: IO[bytes]) -> None:
        """A `docker save` tarball (legacy layout) of the image `ref` names."""
        self.calls.append(("save", ref))
        image = self._images[ref]
        config = self._configs[image.id]
        digest = image.id.removeprefix("sha256:")
        with tarfile.open(fileobj=dest, mode="w|") as tar:
            _add(tar, f"{digest}.json", config)
            _add(tar, "0a1b2c/layer.tar", b"\0" * 1024)
            manifest = [{"Config": f"{digest}.json", "RepoTags": [ref], "Layers": ["0a1b2c/layer.tar"]}]
            _add(tar, "manifest.json", json.dumps(manifest).encode())

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.calls.append(("tag", image_id, f"{repository}:{tag}"))
        self._images[f"{repository}:{tag}"] = self._images[image_id]

    def remove(self, target: RemoveImage | RemoveContainers) -> list[str]:
        if isinstance(target, RemoveContainers):
            self.calls.append(("remove_containers", target.label))
            return []  # every fake container is removed as soon as it stops
        if target.tag_only:
            self.calls.append(("untag", target.ref))
            self._untag(target.ref)
            return []
        self.calls.append(("remove_image", target.ref))
        image = self._images.pop(target.ref, None)
        if image is not None:
            for key in [k for k, v in self._images.items() if v.id == image.id and k in image.tags]:
                del self._images[key]
        return []

    def _untag(self, ref: str) -> None:
        image = self._images.get(ref)
        if image is None:
            return
        names = [k for k, v in self._images.items() if v.id == image.id and "@" not in k and k != image.id]
        if ref not in names:
            return
        if len(names) < 2:
            raise AssertionError(f"untagging {ref}, the image's last name, would remove the image")
        del self._images[ref]
        # As Docker does: untagging a repository's last tag forgets that repository's digest too.
        repository = ref.rpartition(":")[0]
        if not any(name.rpartition(":")[0] == repository for name in names if name != ref):
            for key in [k for k, v in self._images.items() if v.id == image.id and k.startswith(repository + "@")]:
                del self._images[key]

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


if TYPE_CHECKING:  # mypy proves the fake implements the whole protocol, as the Docker adapter does
    _engine: Engine = FakeEngine()
