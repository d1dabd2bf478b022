"""The CLI reference (docs/cli.md), generated from the Click commands themselves.

Walks `orchestrator.cli.main.cli` and renders every command's usage, help text and options (names,
type or choices, default, environment variable, help) as Markdown, plus the exit codes and the error
kinds with the code each prints as `error[code]`. Pure and deterministic: the same commands give the
same text, whatever the terminal width or the Click version, so a unit test can compare it with the
committed file. Regenerate with:

    .venv/bin/python -c "from orchestrator.cli.reference import cli_reference_markdown; \\
print(cli_reference_markdown(), end='')" > docs/cli.md

Not imported by `orch` itself: the CLI's start-up path stays as light as it is.
"""

from __future__ import annotations

import click

from orchestrator.errors import EXIT_CODES

REGENERATE = (
    '.venv/bin/python -c "from orchestrator.cli.reference import cli_reference_markdown; '
    "print(cli_reference_markdown(), end='')\" > docs/cli.md"
)


def _cell(text: str) -> str:
    """One Markdown table cell: a single line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _help_text(command: click.Command) -> str:
    """The command's help as Markdown paragraphs (Click's `\\f` cut and `\\b` markers honoured)."""
    text = (command.help or "").split("\f", 1)[0]
    paragraphs = []
    for block in text.strip().split("\n\n"):
        lines = [line for line in block.splitlines() if line.strip() != "\b"]
        if lines:
            paragraphs.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(paragraphs)


def _value_type(param: click.Parameter) -> str:
    kind = param.type
    if isinstance(kind, click.Choice):
        return " \\| ".join(f"`{choice}`" for choice in kind.choices)
    if isinstance(kind, click.Path):
        name = "FILE" if not kind.dir_okay else "DIRECTORY" if not kind.file_okay else "PATH"
        return f"`{name}`"
    return f"`{kind.name.upper()}`"


def _option_type(option: click.Option) -> str:
    if option.is_flag:
        return "flag"
    named = option.metavar and not isinstance(option.type, click.Choice)
    kind = f"`{option.metavar}`" if named else _value_type(option)
    return f"{kind}, repeatable" if option.multiple else kind


def _default_of(option: click.Option) -> str:
    """The default when it is a plain value; Click's own sentinels (unset, callables) show nothing."""
    default = option.default
    if option.is_flag:
        if option.secondary_opts and isinstance(default, bool):
            return f"`{option.opts[0] if default else option.secondary_opts[0]}`"
        return ""
    plain = (str, int, float)
    if isinstance(default, plain) and not isinstance(default, bool):
        return f"`{default}`"
    if isinstance(default, tuple | list) and default and all(isinstance(item, plain) for item in default):
        return ", ".join(f"`{item}`" for item in default)
    return ""


def _argument_metavar(argument: click.Argument) -> str:
    name = argument.metavar or (argument.name or "").upper()
    if argument.nargs != 1:
        name += "..."
    return name if argument.required else f"[{name}]"


def _usage(path: str, command: click.Command) -> str:
    pieces = [path, "[OPTIONS]"]
    pieces += [_argument_metavar(p) for p in command.params if isinstance(p, click.Argument)]
    if isinstance(command, click.Group):
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def _options_table(command: click.Command) -> list[str]:
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    if not options:
        return []
    out = [
        "| option | type | required | default | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for option in options:
        names = ", ".join(f"`{name}`" for name in [*option.opts, *option.secondary_opts])
        help_text = option.help or ""
        envvar = option.envvar
        if isinstance(envvar, str):
            help_text += f" Environment variable: `{envvar}`."
        elif envvar:
            help_text += " Environment variables: " + ", ".join(f"`{name}`" for name in envvar) + "."
        out.append(
            f"| {names} | {_option_type(option)} | {'yes' if option.required else ''} | {_default_of(option)} | "
            f"{_cell(help_text)} |"
        )
    return [*out, ""]


def _arguments_list(command: click.Command) -> list[str]:
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    if not arguments:
        return []
    out = []
    for argument in arguments:
        required = "required" if argument.required else "optional"
        out.append(f"- `{_argument_metavar(argument)}`: {required}, {_value_type(argument)}")
    return ["Arguments:", "", *out, ""]


def _command_section(path: str, command: click.Command, level: str) -> list[str]:
    out = [f"{level} `{path}`", "", "```text", _usage(path, command), "```", ""]
    help_text = _help_text(command)
    if help_text:
        out += [help_text, ""]
    out += _arguments_list(command)
    out += _options_table(command)
    if command.epilog:
        out += [" ".join(command.epilog.split()), ""]
    return out


def _import_package() -> None:
    """Import every library module of orchestrator, so every error kind it defines is registered.

    Skipped: the scripts that run inside containers (probes, templates) and the `python -m` entry point.
    """
    import importlib
    import pkgutil

    import orchestrator

    skipped = ("orchestrator.probes", "orchestrator.templates", "orchestrator.__main__")
    for module in pkgutil.walk_packages(orchestrator.__path__, prefix="orchestrator."):
        if not module.name.startswith(skipped):
            importlib.import_module(module.name)


def _error_kinds() -> list[str]:
    """Every `OrchError` kind orch defines, with the code it prints and its exit code."""
    from orchestrator.errors import OrchError

    _import_package()
    kinds: list[type[OrchError]] = []
    pending: list[type[OrchError]] = [OrchError]
    while pending:
        kind = pending.pop()
        if kind.__module__.startswith("orchestrator.") and kind not in kinds:
            kinds.append(kind)
        pending.extend(kind.__subclasses__())
    kinds = [kind for kind in kinds if kind is not OrchError]
    kinds.sort(key=lambda kind: (kind.exit_code, kind.code))
    out = [
        "| printed as | exit code | raised as | kind of |",
        "| --- | --- | --- | --- |",
    ]
    for kind in kinds:
        parent = next(base for base in kind.__mro__[1:] if issubclass(base, OrchError))
        anchor = "error" + kind.code
        out.append(
            f"| [`error[{kind.code}]`](troubleshooting.md#{anchor}) | {kind.exit_code} | "
            f"`{kind.__module__}.{kind.__name__}` | `{parent.__name__}` |"
        )
    return out


def cli_reference_markdown() -> str:
    """docs/cli.md: every command of `orch`, in the order the group registers them, then exit codes and errors."""
    from orchestrator.cli.main import cli

    commands = list(cli.commands.items())
    out = [
        "# CLI reference",
        "",
        "Generated from the Click commands by `orchestrator/cli/reference.py`; do not edit by hand.",
        "`tests/unit/test_cli_reference.py` fails when this file and the commands differ. Regenerate with:",
        "",
        "```sh",
        REGENERATE,
        "```",
        "",
        "Every command also takes `-h` / `--help`. `python -m orchestrator` is the same program as `orch`.",
        "",
        "| command | what it does |",
        "| --- | --- |",
    ]
    for name, command in commands:
        summary = command.get_short_help_str(limit=10_000)
        out.append(f"| [`orch {name}`](#orch-{name}) | {_cell(summary)} |")
    out.append("")
    out += _command_section("orch", cli, "##")
    for name, command in commands:
        out += _command_section(f"orch {name}", command, "##")
        if isinstance(command, click.Group):  # a group's commands (`orch nightly run`) under it
            for sub_name, sub_command in sorted(command.commands.items()):
                out += _command_section(f"orch {name} {sub_name}", sub_command, "###")
    out += ["## Exit codes", "", "| code | meaning |", "| --- | --- |"]
    out += [f"| {row.code} | {_cell(row.meaning)} |" for row in EXIT_CODES]
    out += [
        "",
        "## Error kinds",
        "",
        "A failure is printed as one line, `error[CODE]: what failed`, and, when there is one, a second line",
        "`hint: what to do`; never a traceback. The codes, what produces them and what to do are in",
        "[troubleshooting.md](troubleshooting.md).",
        "",
    ]
    out += _error_kinds()
    return "\n".join(out).rstrip() + "\n"
