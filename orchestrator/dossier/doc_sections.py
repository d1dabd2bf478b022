"""The parts of docs/dossier.md that are not the schema: the sample's mounts, the determinism knobs and the
vendor tables, generated from the data files so the page cannot drift from what orch does. Pure."""

from __future__ import annotations

from packaging.version import Version

from orchestrator import vendor

#: Every mount the sample's container gets: (target, mode, what). `orchestrator.plan.run.sample_mounts` makes
#: them; a unit test checks the two agree.
SAMPLE_MOUNTS: tuple[tuple[str, str, str], ...] = (
    ("/orch/input/<path>", "read-only", "each `expect.inputs` file, at its dossier-relative `path`"),
    ("/orch/data/<name>", "read-only", "each `data` item with a local `path`, under its `name`"),
    ("/orch/weights/<name>", "read-only", "each `weights` item with a local `path`, under its `name`"),
    ("/orch/output", "read-write", "the output folder: the sample writes its outputs here; the host re-reads them"),
    (
        "/orch/meta",
        "read-write",
        "orch's own folder: the probe site records the determinism settings it applied (`determinism.json`)",
    ),
    (
        "/orch/probe-site",
        "read-only",
        "`sitecustomize.py`, first on `PYTHONPATH`: applies `determinism` in every Python process of the sample",
    ),
)

#: The environment the sample gets from `determinism` (besides ORCH_DETERMINISM, the settings as JSON).
_DETERMINISM_ENV: tuple[tuple[str, str], ...] = (
    ("`PYTHONHASHSEED`", "`seed`"),
    ("`CUBLAS_WORKSPACE_CONFIG`, `HIPBLAS_WORKSPACE_CONFIG`", "`cublas_workspace_config`"),
    ("`ATEN_CPU_CAPABILITY`", "`cpu.aten_cpu_capability`"),
    ("`ONEDNN_MAX_CPU_ISA`", "`cpu.onednn_max_cpu_isa`"),
    ("`OMP_NUM_THREADS`, `MKL_NUM_THREADS`", "`cpu.threads`"),
)


def _cells(values: tuple[str, ...]) -> str:
    return ", ".join(values) if values else "—"


def mounts_markdown() -> list[str]:
    lines = [
        "## The sample's mounts",
        "",
        "The sample command runs in the image's working directory with no network, capabilities dropped, "
        "memory and pids limits and the dossier's timeout. It sees exactly these folders:",
        "",
        "| path in the container | mode | what |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{target}` | {mode} | {what} |" for target, mode, what in SAMPLE_MOUNTS]
    lines += [
        "",
        "Remote `data`/`weights` (`uri`) are not mounted: fetch them to a local path first. A by-hand "
        "`docker run` that replays the sample needs the same mounts.",
        "",
    ]
    return lines


def determinism_markdown() -> list[str]:
    lines = [
        "## Determinism settings",
        "",
        "`determinism` is applied in every Python process the sample starts (seeds, deterministic algorithms, "
        "TF32, matmul precision) and passed as environment:",
        "",
        "| environment | from |",
        "| --- | --- |",
    ]
    lines += [f"| {env} | {source} |" for env, source in _DETERMINISM_ENV]
    lines += [
        "",
        "What was applied is recorded in the sample stage's facts (`determinism`), and the device stage reports "
        "`cpu_capability` (`torch.backends.cpu.get_cpu_capability()`) under the same CPU knobs; the host stage "
        "records the host's CPU model and ISA flags (`cpu`).",
        "",
        "### CPU knobs",
        "",
        "The same image gives float results that differ in their last bits from one x86-64 host to another: "
        "torch and oneDNN pick vector kernels by what the CPU offers (AVX2, AVX-512, AMX), and threads split "
        "reductions differently. `determinism.cpu` pins those choices so CPU results are steadier across hosts. "
        "It narrows the differences; it does not promise identical bits, so keep a tolerance in `compare`. "
        "Pin a level that every host you run on has (the host stage's `cpu.isa_flags` lists them): torch "
        "takes `ATEN_CPU_CAPABILITY` as given, without checking the CPU, so `avx512` on an AVX2-only host can "
        "stop the sample with an illegal instruction.",
        "",
        "| key | environment | values | effect |",
        "| --- | --- | --- | --- |",
        "| `aten_cpu_capability` | `ATEN_CPU_CAPABILITY` | `default`, `avx2`, `avx512` | the widest vector code "
        "torch's own CPU kernels use (pytorch `aten/src/ATen/native/DispatchStub.cpp`) |",
        "| `onednn_max_cpu_isa` | `ONEDNN_MAX_CPU_ISA` | `DEFAULT`, `SSE41`, `AVX`, `AVX2`, `AVX2_VNNI`, "
        "`AVX512_CORE`, `AVX512_CORE_VNNI`, `AVX512_CORE_BF16`, `AVX512_CORE_AMX`, … | the newest ISA oneDNN "
        "(convolutions, some matmuls) dispatches to (oneDNN, *CPU Dispatcher Control*) |",
        "| `threads` | `OMP_NUM_THREADS`, `MKL_NUM_THREADS` | 1 to 1024 | a fixed thread count |",
        "",
        "For example, to keep AVX-512/AMX machines on the AVX2 code paths of an AVX2 reference:",
        "",
        "```yaml",
        "determinism:",
        "  seed: 0",
        "  cpu:",
        "    aten_cpu_capability: avx2",
        "    onednn_max_cpu_isa: AVX2",
        "    threads: 1",
        "```",
        "",
    ]
    return lines


def vendor_tables_markdown() -> list[str]:
    torch_source = vendor.torch_platforms().source
    images_source = vendor.base_images_file().source
    releases = sorted(vendor.torch_releases().values(), key=lambda release: Version(release.series))
    lines = [
        "## Vendor tables",
        "",
        "orch checks a dossier against these tables (`orchestrator/data/*.json`) before anything is built. "
        "This section is generated from them; `orch tables` prints them (`--json` for scripts).",
        "",
        "### torch ↔ CUDA / ROCm",
        "",
        "A build from torch's own index carries a local tag (`torch==2.6.0+cu124`, `+rocm6.2.4`, `+cpu`) and "
        f"comes from `{vendor.torch_index_url('<tag>')}`. PyPI's wheel (no local tag) is a CUDA build: the column "
        '*PyPI wheel* gives its CUDA, for `system.platform: cuda` with that `system.version`. "—": none known.',
        "",
        "| torch | CUDA builds (torch's index) | ROCm builds (torch's index) | PyPI wheel | Python ≥ |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r.series} | {_cells(r.cuda)} | {_cells(r.rocm)} | {'CUDA ' + r.pypi_cuda if r.pypi_cuda else '—'} "
        f"| {r.min_python} |"
        for r in releases
    ]
    lines += [
        "",
        f"Source: {torch_source}",
        "",
        "### Base images",
        "",
        "`system.base_image` defaults to the row marked *default* for the platform and version. Rows without a "
        "platform fit any platform (torch's wheels bring their own CUDA or ROCm libraries); "
        "`orch/debian-python:*` are made locally by `orch base`. An image not listed needs "
        "`system.base_image.python` (and `glibc` for wheelhouse mode).",
        "",
        "| image | platform | CUDA / ROCm | OS | glibc | Python | default |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| `{image.ref}` | {image.platform or 'any'} | {image.backend_version or '—'} | {image.os} | {image.glibc} "
        f"| {_cells(image.python_versions)} | {'yes' if image.default else ''} |"
        for image in vendor.base_images()
    ]
    lines += ["", f"Source: {images_source}", ""]
    return lines


def extra_sections() -> list[str]:
    return [*mounts_markdown(), *determinism_markdown(), *vendor_tables_markdown()]
