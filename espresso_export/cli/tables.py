"""The CLI's tables, built so they read at any width: 80 columns (what output gets when it is not a
terminal) up to a wide terminal, whose full width they use.

Rich wraps a cell at word boundaries and folds (cuts mid-word) only a word longer than its column, and it
shortens a column to fit the line. So a table is printed as a grid only when every column can hold its
longest word and a wrapped column stays readable; otherwise each row is stacked (a heading line, then one ``header  value`` line per
column, indented), which gives a long value the whole line. ``--json`` is the machine format; these are for
people. Each builder returns a renderable, printed with :func:`show`; ``tests/cli/test_tables.py`` renders every
table at 80 columns against ``tests/data/tables/*.txt``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from espresso_export.core.console import out_console
from espresso_export.core.formatting import shell_lines

SWEEP_LEGEND = "ret. = retention of the source's {metric}; speed = sent/s vs the source; B/vec = bytes per vector; " \
               "* = on the Pareto front (no point is better and faster)"


def _text(value: Any):
    from rich.text import Text

    return value if isinstance(value, Text) else Text(str(value))  # plain text: '[...]' is not markup


_READABLE = 24  # a wrapped column narrower than this reads as a word list: stack the rows instead


def grid(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]], width: int, *,
         right: Sequence[str] = (), whole: Sequence[str] = (), heading: int = 1):
    """A table of ``rows`` under ``headers``; stacked (row by row) when it cannot fit ``width``. Columns named
    in ``whole`` (ids, folder names, numbers) are never wrapped; the others wrap at words."""
    from rich import box
    from rich.table import Table

    table = Table(title=_text(title), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    needed = 2  # the table's edges
    for i, h in enumerate(headers):
        cells = [str(r[i]) for r in rows] + [h]
        longest = max(map(len, cells))
        words = max(len(w) for c in cells for w in (c.split() or [""]))  # a word is never cut in a fitting grid
        least = longest if h in whole else max(words, min(_READABLE, longest))
        needed += least + 3  # its padding and the gap to the next column
        table.add_column(h, overflow="fold", justify="right" if h in right else "left", no_wrap=h in whole,
                         min_width=least)
    for row in rows:
        table.add_row(*(_text(c) for c in row))
    return table if needed <= width else stacked(title, headers, rows, heading)


def stacked(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]], heading: int = 1):
    """Each row as a bold heading line (its first ``heading`` cells), then one ``header  value`` line per other
    column, indented; a value wraps at words within the rest of the line."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    keys = max(len(h) for h in headers[heading:]) + 2
    parts: list = [Text(title, style="italic")]
    for row in rows:
        parts.append(Text(" ".join(str(c) for c in row[:heading]), style="bold"))
        block = Table.grid(padding=(0, 2))
        block.add_column(no_wrap=True, style="dim", min_width=keys)
        block.add_column(overflow="fold")
        for h, cell in list(zip(headers, row))[heading:]:
            if str(cell):
                block.add_row("  " + h, _text(cell))
        parts.append(block)
    return Group(*parts)


def key_values(title: str, rows: Sequence[tuple[str, Any]]):
    """A summary: one ``key  value`` line per row; keys never wrap, a value wraps at words."""
    from rich import box
    from rich.table import Table

    table = Table(title=_text(title), show_header=False, title_justify="left", box=box.SIMPLE, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, _text(value))
    return table


def sweep_table(result, width: int):
    """The sweep's points and the source; headers abbreviated (with a legend) when the full ones do not fit."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    def build(headers: Sequence[str]):
        table = Table(title=_text(f"sweep of {result.source} ({result.head.value} head, layers: {result.selection}, "
                                  f"{result.threads} thread(s))"), title_justify="left", box=box.SIMPLE_HEAD,
                      pad_edge=False)
        for i, h in enumerate(headers):
            table.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
        mark = "" if result.timing_reliable else "?"  # the notes under the table say why
        for p in sorted(result.points, key=lambda p: (p.layers, p.dim)):
            ret = "n/a" if p.retention is None else f"{p.retention:.3f}"
            table.add_row(",".join(map(str, p.kept)), str(p.dim), f"{p.spearman:.2f}", ret,
                          f"{p.sentences_per_s:.1f}", f"{p.sentences_per_s / result.source_sentences_per_s:.2f}x{mark}",
                          f"{p.params / 1e6:.2f}M", str(p.bytes_per_vector), "*" if p.pareto else "",
                          style="green" if p.meets_target else None)
        table.add_row(f"all {result.source_depth} (source)", str(result.source_dim), f"{result.source_spearman:.2f}",
                      "1.000", f"{result.source_sentences_per_s:.1f}", "1.00x", f"{result.source_params / 1e6:.2f}M",
                      str(4 * result.source_dim), "", style="bold")
        return table

    metric = result.metric_name
    wide = build(("layers kept", "dim", metric, "retention", "sent/s", "speed-up", "params", "bytes/vec",
                  "pareto"))
    if _no_wrap_width(wide) <= width:
        return wide
    return Group(build(("kept", "dim", metric, "ret.", "sent/s", "speed", "params", "B/vec", "*")),
                 _text(SWEEP_LEGEND.format(metric=metric)))


def _no_wrap_width(table) -> int:
    from rich.console import Console

    return Console(width=10_000).measure(table).maximum


def sweep_picks(result) -> list:
    """The smallest and the fastest point meeting the target, each with the shrink command that builds it."""
    from rich.text import Text

    target = f"{100 * result.target_retention:g}% of the source's {result.metric_name}"
    lines = []
    for name, point in (("smallest", result.smallest), ("fastest", result.fastest)):
        if point is not None:
            lines.append(Text.assemble((name, "bold"), f" meeting {target}: {point.label} ({result.metric_name} "
                                       f"{point.spearman:.2f}, {point.sentences_per_s:.0f} sent/s, "
                                       f"{point.params / 1e6:.1f}M params)"))
            # broken between options as shell continuation lines: rich's wrap split "--dim" from its value
            lines.append(Text(shell_lines(result.shrink_command(point), out_console().width - 4),
                              no_wrap=True, overflow="ignore"))
    if result.smallest is None:
        best = max(result.points, key=lambda p: p.spearman).label
        lines.append(Text.assemble((f"no point keeps {target}", "yellow"), f"; the best is {best}"))
    return lines


def model_tables(aliases: Sequence[tuple[str, str, str, bool]], architectures: Sequence[tuple[str, str]],
                 width: int) -> list:
    """``models``: the aliases (Hub ids never cut) and the supported architectures."""
    rows = [(a, hub, note + ("; packaged: works offline" if offline and "offline" not in note else ""))
            for a, hub, note, offline in aliases]
    return [grid("model aliases", ("alias", "Hub id", "notes"), rows, width, whole=("alias", "Hub id")),
            grid("supported architectures", ("family", "model_type"), architectures, width, whole=("family",))]


def recipe_list(found: Sequence[tuple[str, str]], title: str = "shipped recipes (espresso-export run NAME)",
                footer: str | None = None):
    """``run --list``: each recipe's name, then what it does as a paragraph using the whole line."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.text import Text

    parts: list = [Text(title, style="italic")]
    for name, header in found:
        parts += [Text(name, style="bold"), Padding(_text(header), (0, 0, 1, 2))]
    if footer:
        parts.append(Text(footer, style="italic"))
    return Group(*parts)


def show(*renderables) -> None:
    from espresso_export.core.console import out_console

    for r in renderables:
        out_console().print(r, soft_wrap=False)


__all__ = [
    "SWEEP_LEGEND",
    "grid",
    "key_values",
    "model_tables",
    "recipe_list",
    "show",
    "stacked",
    "sweep_picks",
    "sweep_table",
]
