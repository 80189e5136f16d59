"""Rich progress bars for long loops, silent when no description is given.

When stderr is not a terminal (a log file, CI, ``nohup``) a live bar would print nothing, so
:class:`LogLines` writes a plain line instead, at most every ``ESPRESSO_PROGRESS_SECONDS`` (default 30).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def track(
    items: Iterable[T],
    *,
    description: str | None,
    total_items: int | None = None,
    count: Callable[[T], int] | None = None,
) -> Iterator[T]:
    """Yield ``items``; with a description, show a bar counting ``count(item)`` units per item."""
    if not description:
        yield from items
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from espresso_export.core.console import err_console

    if not err_console().is_terminal:
        lines = LogLines(description, total_items)
        for item in items:
            yield item
            lines.advance(count(item) if count else 1)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=err_console(), transient=True) as bar:
        task = bar.add_task(description, total=total_items)
        for item in items:
            yield item
            bar.advance(task, count(item) if count else 1)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class LogLines:
    """Progress as plain lines for logs: ``label: done/total (pct) k=v elapsed h:mm:ss ETA h:mm:ss``.

    A line is printed when ``every`` seconds have passed since the last one and when the total is reached.
    """

    def __init__(self, label: str, total: int | None, done: int = 0, every: float | None = None) -> None:
        from espresso_export.core.console import err_console

        self.label, self.total, self.done = label, total, done
        self.every = float(os.environ.get("ESPRESSO_PROGRESS_SECONDS", 30)) if every is None else every
        self.start = self.last = time.monotonic()
        self.first = done
        self.console = err_console()

    def advance(self, n: int = 1, **fields) -> None:
        self.done += n
        now = time.monotonic()
        finished = self.total is not None and self.done >= self.total
        if now - self.last < self.every and not finished:
            return
        self.last = now
        elapsed = now - self.start
        parts = [f"{self.label}: {self.done}"]
        if self.total:
            parts[0] += f"/{self.total} ({100 * self.done / self.total:.0f}%)"
        parts += [f"{k} {v}" for k, v in fields.items()]
        parts.append(f"elapsed {_clock(elapsed)}")
        if self.total and self.done > self.first and not finished:
            rate = (self.done - self.first) / max(elapsed, 1e-9)
            parts.append(f"ETA {_clock((self.total - self.done) / rate)}")
        self.console.print(", ".join(parts), highlight=False, markup=False, soft_wrap=True)
