"""The one progress display of the package: :class:`Bar`, and :func:`track` to wrap a loop in one.

On a terminal it is a transient rich bar on stderr. When stderr is not a terminal (a log file, CI, ``nohup``)
a live bar would print nothing, so :class:`LogLines` writes a plain line instead, at most every
``ESPRESSO_PROGRESS_SECONDS`` (default 30) and when the total is reached. Without a label it shows nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


class Bar:
    """A progress display: ``with Bar(label, total) as bar: ... bar.advance(n, {"loss": "0.12"})``.

    ``fields`` are extra per-update values shown after the count, as ``(name, template)`` pairs: the
    terminal bar shows ``template`` with ``{}`` replaced by the value, a log line shows ``name value``.
    ``done`` is where a resumed count starts.
    """

    def __init__(self, label: str | None, total: int | None, *, done: int = 0,
                 fields: Sequence[tuple[str, str]] = ()) -> None:
        self.progress = self.lines = None
        self.names = [name for name, _ in fields]
        if not label:
            return
        from espresso_export.core.console import err_console

        if not err_console().is_terminal:
            self.lines = LogLines(label, total, done)
            return
        from rich.progress import Progress

        self.progress = Progress(*_columns([template for _, template in fields]), console=err_console(),
                                 transient=True)
        self.task = self.progress.add_task(label, total=total, completed=done, **{f"f{i}": "-" for i in range(len(fields))})

    def __enter__(self) -> Bar:
        if self.progress:
            self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.progress:
            self.progress.__exit__(*exc)

    def advance(self, n: int = 1, values: Mapping[str, str] | None = None) -> None:
        """Count ``n`` more units; ``values`` (by field name) replace the fields' shown values."""
        values = values or {}
        if self.progress:
            shown = {f"f{i}": values[name] for i, name in enumerate(self.names) if name in values}
            self.progress.update(self.task, advance=n, **shown)
        elif self.lines:
            self.lines.advance(n, **values)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Work inside that is not the bar's units (an evaluation between epochs): its time stays out of the ETA
        (log lines: an evaluation of 90 s counted in the rate after step 1 gave "ETA 1:55:18" for a 13-minute run;
        the terminal bar's speed estimate already forgets a gap longer than its 30-second window)."""
        start = time.monotonic()
        try:
            yield
        finally:
            if self.lines:
                self.lines.paused += time.monotonic() - start

    def note(self, text: str) -> None:
        """Print a line above the bar (or between the log lines); nothing when the bar is silent."""
        if self.progress:
            self.progress.console.print(text, highlight=False)
        elif self.lines:
            self.lines.console.print(text, highlight=False)


def _columns(templates: Sequence[str]) -> tuple:
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    shown = [TextColumn(t.replace("{}", f"{{task.fields[f{i}]}}")) for i, t in enumerate(templates)]
    # between the fields' numbers and the elapsed time, the remaining time needs its name to be read
    eta = [TextColumn("ETA")] if templates else []
    return (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), *shown, TimeElapsedColumn(), *eta,
            TimeRemainingColumn())


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
    with Bar(description, total_items) as bar:
        for item in items:
            yield item
            bar.advance(count(item) if count else 1)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class LogLines:
    """Progress as plain lines for logs: ``label: done/total (pct) k v, elapsed h:mm:ss, ETA h:mm:ss``.

    A line is printed when ``every`` seconds have passed since the last one and when the total is reached.
    """

    def __init__(self, label: str, total: int | None, done: int = 0, every: float | None = None) -> None:
        from espresso_export.core.console import err_console

        self.label, self.total, self.done = label, total, done
        self.every = float(os.environ.get("ESPRESSO_PROGRESS_SECONDS", 30)) if every is None else every
        self.start = self.last = time.monotonic()
        self.paused = 0.0  # seconds spent in Bar.paused(): not in the rate
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
            rate = (self.done - self.first) / max(elapsed - self.paused, 1e-9)
            parts.append(f"ETA {_clock((self.total - self.done) / rate)}")
        self.console.print(", ".join(parts), highlight=False, markup=False, soft_wrap=True)
