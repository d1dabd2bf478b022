"""Terminal summaries of records (rich), shared by the commands that produce them."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.model.build_record import BuildRecord
from orchestrator.model.report import Report
from orchestrator.pipeline.doctor import Diagnosis


def print_build_summary(console: Console, record: BuildRecord, out: Path) -> None:
    mark = "[green]✓[/]" if record.status == "passed" else "[red]✗[/]"
    console.print(f"{mark} image stage {record.status}: {record.dossier.name} ({record.dossier.identity[:12]})")
    if record.image is not None:
        size = record.image.size_bytes / 1e9
        console.print(f"  image   {record.image.tag}  {record.image.id[:19]}  {size:.2f} GB")
    cache = record.cache
    build_s = record.durations_s.get("build", 0.0)
    if record.reused:
        console.print(
            "  reused  the image already built from the same dossier identity and context digest "
            f"({record.context.digest[:12]}): no engine build; --no-cache builds again"
        )
    else:
        console.print(f"  cache   {cache.cached}/{cache.steps} steps from the layer cache; build {build_s:.1f}s")
    environment = record.inventory.environment if record.inventory is not None else None
    if environment is not None:
        console.print(f"  env     {environment.digest}  ({environment.files} files; list in environment.json)")
    if record.code.variant:
        console.print(f"  code    recorded variant {record.code.variant} (uncommitted changes)")
    if record.checks:
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1))
        for column in ("check", "expected", "observed"):
            table.add_column(column)
        for check in record.checks:
            name = f"[green]✓[/] {escape(check.name)}" if check.passed else f"[red]✗[/] {escape(check.name)}"
            table.add_row(name, escape(check.expected), escape(check.observed))
        console.print(table)
    if record.inventory is not None and record.inventory_diff is None:
        console.print(
            "  [yellow]warning:[/] no reference inventory (python.reference_inventory): the packages were checked "
            "against the lock only, not compared with the reference environment's"
        )
    if record.failure is not None:
        console.print(f"  [red]failed at[/] {escape(record.failure.step or '?')}: {escape(record.failure.first_error)}")
    console.print(f"  record  {out / 'build.json'}")
    if record.status == "passed" and (out / "sbom.cdx.json").is_file():
        console.print(f"  sbom    {out / 'sbom.cdx.json'}")


_STATUS = {
    "passed": "[green]passed[/]",
    "failed": "[red]failed[/]",
    "skipped": "[dim]skipped[/]",
    "not_run": "[yellow]not run[/]",
}


def print_report_summary(console: Console, report: Report, paths: dict[str, Path]) -> None:
    verdict = "[green]✓ passed[/]" if report.verdict == "passed" else "[red]✗ failed[/]"
    variant = f", variant {report.dossier.variant}" if report.dossier.variant else ""
    console.print(f"{verdict} {escape(report.dossier.name)} ({report.dossier.platform}{variant})")
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1))
    for column in ("stage", "status", "checks", "first error / reason"):
        table.add_column(column)
    for stage in report.stages.values():
        passed = sum(1 for check in stage.checks if check.passed)
        detail = f"{stage.first_error.step}: {stage.first_error.message}" if stage.first_error else (stage.reason or "")
        table.add_row(stage.name, _STATUS[stage.status], f"{passed}/{len(stage.checks)}", escape(detail))
    console.print(table)
    for stage in report.stages.values():
        for warning in stage.warnings:
            console.print(f"  [yellow]warning ({stage.name}):[/] {escape(warning)}")
    for note in report.notes:
        console.print(f"  note: {escape(note)}")
    console.print(f"  report  {paths.get('html')}  (also .json, .md, junit.xml)")


def print_doctor(console: Console, diagnosis: Diagnosis) -> None:
    host = diagnosis.host
    nvidia = host.nvidia
    console.print(f"kernel   {escape(host.kernel)}")
    if host.cpu:
        flags = " ".join(host.cpu.isa_flags) or "none of note"
        console.print(f"cpu      {escape(host.cpu.model or '?')}, {host.cpu.logical_cpus} logical; ISA {flags}")
    if nvidia:
        console.print(
            f"nvidia   driver {nvidia.driver_version} ({nvidia.source}), CUDA ≤ {nvidia.cuda_driver_version}, {len(nvidia.gpus)} GPU(s)"
        )
        for gpu in nvidia.gpus:
            console.print(
                f"         {gpu.index}: {escape(gpu.name)} cc {gpu.compute_capability} {gpu.memory_total_mib} MiB"
            )
    else:
        console.print("nvidia   no NVIDIA driver found")
    if host.amd:
        console.print(
            f"amd      driver {host.amd.driver_version}, ROCm {host.amd.rocm_version}, {len(host.amd.gpus)} GPU(s)"
        )
    else:
        console.print("amd      no AMD GPU driver found" + (" (/dev/kfd present)" if host.kfd_present else ""))
    if host.docker:
        console.print(
            f"docker   runtimes {', '.join(host.docker.runtimes)}; CDI devices: {', '.join(host.docker.cdi_devices) or 'none'}"
        )
    for note in host.notes:
        console.print(f"  [dim]{escape(note)}[/]")
    if host.l4t_release:
        console.print(f"jetson   L4T {escape(host.l4t_release)}")
    for found in diagnosis.explanations:
        # The layer's brackets are escaped too: rich would read "[host]" as a style tag and print nothing.
        layers = found["layer"] + (f" or {found['other_layer']}" if found.get("other_layer") else "")
        console.print(f"[yellow]![/] {escape(found['seen_in'])}: {escape(f'[{layers}]')} {escape(found['cause'])}")
        console.print(f"  next: {escape(found['next_step'])}")
    if diagnosis.dossier:
        mark = "[green]✓ yes[/]" if diagnosis.can_run else "[red]✗ no[/]"
        where = "on its GPU" if diagnosis.platform != "cpu" else "(CPU platform: no GPU needed)"
        console.print(f"\ncan this host run {escape(diagnosis.dossier)} ({diagnosis.platform}) {where}? {mark}")
        if diagnosis.compatibility:
            console.print(
                f"  compatibility  {diagnosis.compatibility.status}: {escape(diagnosis.compatibility.explanation)}"
            )
        console.print(f"  GPU mapping    {escape(diagnosis.gpu_mapping or 'none')}")
        if diagnosis.reason:
            console.print(f"  why            {escape(diagnosis.reason)}")
