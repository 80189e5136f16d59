"""The rich consoles: results go to stdout, progress and messages to stderr."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache


@lru_cache(maxsize=1)
def err_console():
    from rich.console import Console

    return Console(stderr=True, emoji=False)  # a path like data/docs.jsonl:-1 printed "docs.jsonl👎"


@lru_cache(maxsize=1)
def out_console():
    from rich.console import Console

    return Console(emoji=False)


def clean(text: str) -> str:
    """``text`` without terminal escape sequences (colours, cursor moves) or other control characters.

    Messages of libraries (torch's exporter colours its errors) reach our one-line errors; a log file or a
    pipe would get the raw codes. rich's ANSI decoder strips the sequences; tabs become spaces."""
    import unicodedata

    from rich.text import Text

    plain = Text.from_ansi(str(text)).plain.replace("\t", " ")
    return "".join(c for c in plain if c == "\n" or unicodedata.category(c) != "Cc")


@contextmanager
def quiet_libraries(debug: bool) -> Iterator[None]:
    """Silence third-party warnings and log records (WARNING and below) unless ``--debug``.

    torch, transformers and onnx log advice meant for their developers ("torchvision is not installed") that
    buries our one-line messages; ``logging.disable`` holds even for loggers the libraries configure on import.
    Restored on exit, so calling :func:`espresso_export.cli.app.main` in-process leaves the caller's state."""
    if debug:
        yield
        return
    previous = logging.root.manager.disable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(previous)
