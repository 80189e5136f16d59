"""Entry point: the Typer app, the exit-code map and Ctrl-C handling.

Exit codes (shared by every command): 0 ok, 1 runtime failure, 2 usage or
validation error, 3 failed quality gate, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence

import typer
from typer.core import TyperCommand, TyperGroup

from espresso_export import __version__
from espresso_export.core import signals
from espresso_export.core.errors import EXIT_RUNTIME, EXIT_USAGE, EspressoError
from espresso_export.core.formatting import shell_lines


def _bare_switches(params) -> None:
    """Switches print bare (``--overwrite``), not ``--overwrite <bool>``: typer shows a type for every option,
    and a switch takes no value. An empty metavar is typer's way to show none."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


# Below this many columns help is click's plain layout (each option's name in full, its help wrapped beside it).
# typer's rich panels give every option five columns (name, short name, "--no-" name, type, help): at 80 columns
# they cut the long names ("--trust-remote-c…") and squeeze the help into a narrow column.
RICH_HELP_MIN_COLUMNS = 120


def _help_columns(ctx: typer.Context) -> int:
    """The width help is drawn at: the caller's (``CliRunner(terminal_width=)``), else ``COLUMNS`` or the terminal's."""
    return ctx.terminal_width or shutil.get_terminal_size().columns


def _epilog(epilog: str | None, width: int, *, plain: bool) -> str | None:
    """An epilog for click's layout (``plain``) or typer's rich one. Each indented paragraph is an example command:
    click would re-wrap it mid-word ("all-mpnet-" / "base-v2") and rich wraps it mid-command, so its comment
    ("cmd    (why)") goes on a ``#`` line above it and it is broken before its options into continuation lines
    that fit (in click's layout marked ``\\b``, printed as written; in rich's, its markup escapes kept)."""
    if not epilog:
        return epilog
    paragraphs = (epilog.replace("\\[", "[") if plain else epilog).split("\n\n")
    # rich's text goes through inspect.cleandoc, which drops the examples' indent only when every line after the
    # first has it: rich gets them unindented, the same for every command
    mark, indent = ("\b\n", "  ") if plain else ("", "")
    return "\n\n".join(mark + shell_lines(p.strip(), width - 4, indent) if p.startswith("  ") else p
                        for p in paragraphs)


class _BareSwitches:
    """Mixed into the class of every command and of the root (set once, here, through typer's ``cls`` hook)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _bare_switches(self.params)

    def format_help(self, ctx: typer.Context, formatter) -> None:
        columns = _help_columns(ctx)
        if columns >= RICH_HELP_MIN_COLUMNS:  # typer's panels, the examples broken to the width
            saved = [(self, "epilog", _epilog(self.epilog, columns, plain=False))]
        else:  # typer's switch for its click layout; the texts lose rich's escapes ("\\[")
            saved = [(self, "rich_markup_mode", None), (self, "epilog", _epilog(self.epilog, formatter.width, plain=True))]
            saved += [(p, "help", p.help.replace("\\[", "[")) for p in self.params if getattr(p, "help", None)]
        saved = [(obj, name, getattr(obj, name), value) for obj, name, value in saved]
        try:
            for obj, name, _, value in saved:
                setattr(obj, name, value)
            super().format_help(ctx, formatter)
        finally:
            for obj, name, old, _ in saved:
                setattr(obj, name, old)

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        _bare_switches([option] if option is not None else [])
        return option


class _Command(_BareSwitches, TyperCommand):
    pass


class _Group(_BareSwitches, TyperGroup):
    pass


app = typer.Typer(
    cls=_Group,
    name="espresso-export",
    help="Turn a sentence-embedding checkpoint into a small, fast, verified model.\n\n"
    "Exit codes: 0 ok, 1 runtime failure, 2 usage/validation error, 3 failed quality gate, 130 interrupted, "
    "143 terminated (SIGTERM).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"espresso-export {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """``--debug`` is read by :func:`main` from the arguments (it applies to errors raised anywhere)."""


def _register() -> None:
    """Import every ``cli/*_cmd.py``: each module adds its command to ``app`` (no heavy imports there)."""
    import importlib
    import pkgutil

    from espresso_export.cli import __path__ as here

    for info in sorted(pkgutil.iter_modules(here), key=lambda m: m.name):
        if info.name.endswith("_cmd"):
            importlib.import_module(f"{__package__}.{info.name}")


_register()

# outputs are assembled in a temp folder and renamed into place when complete (core/files.py: atomic_output)
INTERRUPTED_NOTE = "nothing written (an output appears only when complete; existing outputs are unchanged)"

# The line each command has in the top-level --help list, for commands whose registration gives no ``short_help``:
# one sentence that fits beside the names at 80 columns (click cut the docstring's first line with "...").
SHORT_HELP = {
    "distill": "Distil a teacher into a small student, or heal a cut model.",
    "export": "Export to ONNX (int8 optional), checked against PyTorch.",
    "models": "List model aliases and supported architectures.",
    "push": "Upload a model folder to the Hugging Face Hub, with its card.",
    "sweep": "Measure every (layers, dim) cut: quality, speed and size.",
    "train": "Fine-tune a model, with ESE so its first layers stand alone.",
    "verify": "Measure a model against its source; exit 3 if a gate fails.",
}

for _info in app.registered_commands:  # every command gets the class whose switches print bare
    if _info.cls in (None, TyperCommand):
        _info.cls = _Command
    if _info.short_help is None:
        _info.short_help = SHORT_HELP.get(_info.name or getattr(_info.callback, "__name__", ""))


def _cli_exceptions() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """Click's usage-error, abort and exit classes, both click's own and the copy recent typer versions vendor.

    typer >= 0.2x raises ``typer._click`` exceptions, which are not ``click``'s; found through
    ``typer.BadParameter``'s bases so no private module is imported by name.
    """
    import click
    import typer

    usage: set[type] = {click.exceptions.ClickException}
    abort: set[type] = {click.exceptions.Abort, typer.Abort}
    exits: set[type] = {click.exceptions.Exit, typer.Exit}
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == "ClickException":
            usage.add(cls)
            for name, found in (("Abort", abort), ("Exit", exits)):
                vendored = getattr(sys.modules.get(cls.__module__), name, None)
                if isinstance(vendored, type):
                    found.add(vendored)
    return tuple(usage), tuple(abort), tuple(exits)


def _invoke(args: list[str], exits: tuple[type, ...]) -> int:
    """Run the command the way typer's ``main`` does, without its exception mapping.

    typer's main (``typer.core._main``) turns Ctrl-C into a silent ``Exit(130)``, so no handler of ours would
    see it; here ``KeyboardInterrupt`` reaches :func:`main` like every other outcome."""
    import typer.main

    command = typer.main.get_command(app)
    try:
        with command.make_context("espresso-export", args) as ctx:
            code = command.invoke(ctx)
    except exits as e:  # --help, --version, ctx.exit(n)
        return int(e.exit_code or 0)
    return code if isinstance(code, int) else 0


def _usage_line(e, args: Sequence[str] = ()) -> str:
    """Click's usage error as one line, with where to read more: click prints the usage, a hint and the message
    on three lines, and typer's value coercion prefixes its message with "Value error, "."""
    message = " ".join(e.format_message().replace("Value error, ", "").split())
    if "unexpected extra argument" in message and "--json" in args[:-1]:
        after = args[args.index("--json") + 1]
        if f"({after})" in message:  # `sweep ... --json out.json`, as verify takes it
            message += (f"; --json is a switch here (the result as JSON on stdout): redirect it, --json > {after} "
                        "(verify's --json takes a FILE)")
    ctx = getattr(e, "ctx", None)
    return f"{message} (see '{ctx.command_path} --help')" if ctx is not None else message


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and map every outcome to an exit code."""
    from espresso_export.core.console import quiet_libraries
    from espresso_export.core.tempfiles import forget_written

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("ESPRESSO_DEBUG") == "1"
    signals.record(None)  # a stop signal is counted from here (main may run more than once in a process)
    forget_written()
    code = None
    try:
        with quiet_libraries(debug), signals.signals_raise():  # SIGTERM unwinds like Ctrl-C: temps removed
            code = _run(args, debug)
    except KeyboardInterrupt as e:  # a stop outside _run's reach: while the handlers went on or came off
        if code is None:  # the command had not finished: say what it left, as _run does
            code = _stopped(e)
        # else it came after the command finished (its outputs are whole): the command's own code stands
    if argv is None:
        sys.exit(code)
    return code


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file descriptor (captured): nothing is flushed to the pipe
        pass


def _run(args: list[str], debug: bool) -> int:
    from espresso_export.core.console import err_console

    usage_errors, aborts, exits = _cli_exceptions()
    try:
        return _invoke(args, exits)
    except (KeyboardInterrupt, *aborts) as e:
        return _stopped(e)
    except BrokenPipeError:  # `espresso-export ... | head` stopped reading: silent, exit 1, as rich and click do
        _drop_stdout()
        return EXIT_RUNTIME
    except usage_errors as e:
        _say("[bold red]error:[/]", _usage_line(e, args))
        return EXIT_USAGE if e.exit_code == 2 else e.exit_code
    except Exception as e:  # ours: one line and its code; anything else: one line, exit 1; traceback with --debug
        if debug:
            err_console().print_exception()
        if signals.received() is not None and not isinstance(e, EspressoError):  # a library turned the KeyboardInterrupt into its own error (e.g.
            # transformers' lazy import: "Could not import module 'BertModel'"): it was still the user's stop
            return _stopped(e)
        known = e if isinstance(e, EspressoError) else _os_failure(e)
        if known is not None:
            _say("[bold red]error:[/]", known.message)
            return known.exit_code
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        _say("[bold red]error:[/]", f"{e.__class__.__name__}: {first}",
             "" if debug else " (run with --debug for the traceback)")
        return EXIT_RUNTIME


def _stopped(e: BaseException) -> int:
    """A stop (Ctrl-C, SIGTERM, or a library's error raised by one): one line saying what it left; returns 130
    after Ctrl-C, 143 after SIGTERM."""
    if isinstance(e, KeyboardInterrupt):
        signals.record(signals.signum_of(e))
    _say(f"[yellow]{signals.describe()}:[/]", _interrupted_note())
    return signals.exit_code()


def _interrupted_note() -> str:
    """What a stop left: nothing, or the outputs that were renamed into place whole before it came."""
    from espresso_export.core.tempfiles import kept, written

    done, folders = written(), kept()
    keeps = "; ".join(f"kept {p} ({what})" for p, what in folders.items())
    if not done:
        return f"{keeps}; nothing else written (existing outputs are unchanged)" if keeps else INTERRUPTED_NOTE
    names = ", ".join(str(p) for p in done)
    return (f"stopped after {names} {'was' if len(done) == 1 else 'were'} written whole; {keeps + '; ' if keeps else ''}"
            "nothing else written (existing outputs are unchanged)")


def _os_failure(e: Exception) -> EspressoError | None:
    """A write failure deep in a library (disk full, file too large): exit 1 with the errno's text."""
    from espresso_export.core.errors import os_error_in, write_failure

    cause = os_error_in(e)
    return None if cause is None else write_failure(cause.filename or "the output", cause)


def _say(label: str, message: str, suffix: str = "") -> None:
    """One line on stderr: ``label`` (rich markup) and ``message`` with escape sequences removed."""
    from rich.markup import escape

    from espresso_export.core.console import clean, err_console

    err_console().print(f"{label} {escape(clean(message))}{suffix}", highlight=False, soft_wrap=True)
