"""Rich progress bars for long loops, silent when no description is given."""

from __future__ import annotations

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

    from .console import err_console

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=err_console(), transient=True) as bar:
        task = bar.add_task(description, total=total_items)
        for item in items:
            yield item
            bar.advance(task, count(item) if count else 1)
