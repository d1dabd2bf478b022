"""The `orch` command line: a thin Click layer over the library.

Imports stay lazy (inside each command) so `orch --help` starts fast; `benchmarks/cli_startup.py`
measures it. Only `main()` turns an `OrchError` into a message and an exit code; the codes and what
they mean are the one table in orchestrator/errors.py (`EXIT_CODES`), which the epilog below prints.
"""

from __future__ import annotations

import sys
import threading

import click

from orchestrator import __version__
from orchestrator.cli.base_cmd import base
from orchestrator.cli.build_cmd import build
from orchestrator.cli.compare_cmd import compare
from orchestrator.cli.dossier_cmds import render, schema, validate
from orchestrator.cli.fetch_cmds import cache, fetch
from orchestrator.cli.handover_cmds import handover, verify
from orchestrator.cli.init_cmd import init
from orchestrator.cli.lock_cmds import lock
from orchestrator.cli.nightly_cmd import nightly
from orchestrator.cli.probe_cmds import doctor, probe, probe_host, rebuild
from orchestrator.cli.record_cmd import record
from orchestrator.cli.tables_cmd import tables
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_SUCCESS, exit_codes_help


@click.group(epilog=exit_codes_help(), context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="orch")
def cli() -> None:
    """Rebuild GPU machine-learning environments in containers and prove they still do what the reference did."""


cli.add_command(validate)
cli.add_command(fetch)
cli.add_command(cache)
cli.add_command(schema)
cli.add_command(render)
cli.add_command(base)
cli.add_command(build)
cli.add_command(probe)
cli.add_command(rebuild)
cli.add_command(doctor)
cli.add_command(probe_host)
cli.add_command(compare)
cli.add_command(handover)
cli.add_command(verify)
cli.add_command(lock)
cli.add_command(tables)
cli.add_command(record)
cli.add_command(init)
cli.add_command(nightly)


def _terminated(signum: int, frame: object) -> None:
    # `kill PID` (SIGTERM) and a closed terminal (SIGHUP) end orch like Ctrl-C does: as an exception, so every
    # `finally` runs and the containers orch started are removed (Python's default would exit without them).
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    import signal

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, _terminated)
    try:
        _main(argv)
    finally:
        # Called in-process (tests, an embedding program): leave the caller's handlers as they were.
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _main(argv: list[str] | None) -> None:
    from orchestrator.errors import OrchError, from_os_error

    try:
        cli.main(args=argv, prog_name="orch", standalone_mode=False)
    except (OrchError, OSError) as exc:
        # A full disk or an unreadable folder can strike any write: it is said like any other error,
        # with its file, exit 3 and no traceback. (rich is imported only here: `orch --help` stays fast.)
        from orchestrator.cli.console import print_error

        error = exc if isinstance(exc, OrchError) else from_os_error(exc)
        print_error(error)
        sys.exit(error.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        # Containers are removed by the engine's `finally` blocks before we get here.
        click.echo("Interrupted; orch removed the containers it had started.", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_BAD_INPUT if isinstance(exc, click.UsageError) else exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(EXIT_SUCCESS)
