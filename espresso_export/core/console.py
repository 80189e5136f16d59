"""The rich consoles: results go to stdout, progress and messages to stderr."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def err_console():
    from rich.console import Console

    return Console(stderr=True)


@lru_cache(maxsize=1)
def out_console():
    from rich.console import Console

    return Console()
