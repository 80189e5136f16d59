"""Entry point: the Typer app, the exit-code map and Ctrl-C handling.

Exit codes (shared by every command): 0 ok, 1 runtime failure, 2 usage or
validation error, 3 failed quality gate, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import os
import sys

import typer

from espresso_export import __version__
from espresso_export.core import signals
from espresso_export.core.errors import EXIT_INTERRUPTED, EXIT_RUNTIME, EXIT_USAGE, EspressoError

app = typer.Typer(
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


def _cli_exceptions() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """Click's usage-error and abort classes, both click's own and the copy recent typer versions vendor.

    typer >= 0.2x raises ``typer._click`` exceptions, which are not ``click``'s; found through
    ``typer.BadParameter``'s bases so no private module is imported by name.
    """
    import click
    import typer

    usage: set[type] = {click.exceptions.ClickException}
    abort: set[type] = {click.exceptions.Abort, typer.Abort}
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == "ClickException":
            usage.add(cls)
            vendored_abort = getattr(sys.modules.get(cls.__module__), "Abort", None)
            if isinstance(vendored_abort, type):
                abort.add(vendored_abort)
    return tuple(usage), tuple(abort)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and map every outcome to an exit code."""
    from rich.markup import escape

    from espresso_export.core.console import err_console

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("ESPRESSO_DEBUG") == "1"
    usage_errors, aborts = _cli_exceptions()
    try:
        with signals.signals_raise():  # SIGTERM unwinds like Ctrl-C: temp outputs removed, training saves
            code = app(args=args, prog_name="espresso-export", standalone_mode=False)
        code = code if isinstance(code, int) else 0
        if code == EXIT_INTERRUPTED:  # typer returns 130 for any KeyboardInterrupt: which signal was it?
            code = signals.exit_code()
    except EspressoError as e:
        if debug:
            err_console().print_exception()
        err_console().print(f"[bold red]error:[/] {escape(e.message)}", highlight=False, soft_wrap=True)
        code = e.exit_code
    except (KeyboardInterrupt, *aborts):
        err_console().print("[yellow]interrupted[/]")
        code = signals.exit_code()  # 130 after Ctrl-C, 143 after SIGTERM
    except usage_errors as e:
        e.show()
        code = EXIT_USAGE if e.exit_code == 2 else e.exit_code
    except Exception as e:  # an unexpected failure: one line, traceback with --debug
        if debug:
            err_console().print_exception()
        first = str(e).splitlines()[0] if str(e) else ""
        err_console().print(f"[bold red]error:[/] {e.__class__.__name__}: {escape(first)}"
                            + ("" if debug else " (run with --debug for the traceback)"), highlight=False, soft_wrap=True)
        code = EXIT_RUNTIME
    if argv is None:
        sys.exit(code)
    return code
