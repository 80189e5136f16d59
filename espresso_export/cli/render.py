"""Printing results: rich tables for people, JSON for machines."""

from __future__ import annotations

import json
from collections.abc import Iterable


def print_json(obj) -> None:
    import sys

    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def print_table(title: str, rows: Iterable[tuple[str, object]]) -> None:
    from espresso_export.cli.tables import key_values, show

    show(key_values(title, list(rows)))


def print_hints(hints: Iterable[str]) -> None:
    from rich.markup import escape

    from espresso_export.core.console import clean, err_console

    for hint in hints:
        err_console().print(f"[yellow]{escape(clean(hint))}[/]", highlight=False, soft_wrap=True)


def report_json(result, json_out: bool, *, main: bool = True) -> bool:
    """The start every command's report shares: nothing on ranks other than 0 (``main``), the result's hints on
    stderr, and with ``--json`` the result on stdout. True when the report is complete (no table follows)."""
    if not main:  # under torchrun, rank 0 reports
        return True
    print_hints(getattr(result, "hints", ()))
    if json_out:
        print_json(result.to_dict())
    return json_out


def finish_table(title: str, rows: list, result) -> None:
    """Print ``rows`` plus the output folder and wall time every command's table ends with."""
    print_table(title, [*rows, ("output", result.output), ("time", f"{result.seconds:.1f} s")])
