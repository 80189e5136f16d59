"""Numbers and tables as text, shared by the verify report and the model card (torch-free).

One formatter per kind of number, so the terminal report, its Markdown and the
model card print a value the same way; a missing value is always ``n/a``.
"""

from __future__ import annotations

from collections.abc import Sequence

MISSING = "n/a"


def number(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    """``x`` in ``format`` ``spec`` plus ``suffix``; ``n/a`` (no suffix) when it is missing."""
    return MISSING if x is None else format(x, spec) + suffix


def byte_size(n: float | None) -> str:
    """A size in decimal units: ``1.2 GB``, ``3.4 MB``, ``5.6 kB`` or ``789 B``."""
    if not isinstance(n, (int, float)):
        return MISSING
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def param_count(n: float | None) -> str:
    """A parameter count in millions: ``22.71M``."""
    return f"{n / 1e6:.2f}M" if isinstance(n, (int, float)) else MISSING


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table as lines, followed by one blank line; ``|`` inside a cell is escaped."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in rows]
    return lines + [""]
