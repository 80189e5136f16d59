"""Numbers and tables as text, shared by the verify report and the model card (torch-free), and numbers rounded
for a JSON report.

One formatter per kind of number, so the terminal report, its Markdown and the
model card print a value the same way; a missing value is always ``n/a``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MISSING = "n/a"


def rounded(x: float | None, digits: int = 4) -> float | None:
    """``x`` rounded for the JSON report; ``None`` when missing, NaN or infinite (JSON has no such numbers)."""
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


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


def shell_lines(example: str, width: int, indent: str = "  ") -> str:
    """A shell command (``"cmd    (why)"``: the comment goes on a ``#`` line above it) broken before its options
    into continuation lines of at most ``width`` characters, each line after ``indent``, so that it pastes whole
    into a shell. A line breaks only outside single quotes, where a shell reads backslash-newline as a space
    (inside double quotes it joins the lines: still one Python statement)."""
    command, _, comment = example.partition("    (")
    pieces: list[list[tuple[str, bool]]] = []  # an option with its values (or the command before them): its words,
    quoted = False                             # each with whether a line may break before it
    for token in command.split():
        if not pieces or (token.startswith("-") and not quoted):
            pieces.append([])
        pieces[-1].append((token, not quoted))
        quoted ^= token.count("'") % 2 == 1
    words = [w for piece in pieces
             for w in ([(" ".join(t for t, _ in piece), True)] if len(" ".join(t for t, _ in piece)) <= width else piece)]
    lines = [f"# {comment.rstrip(')')}"] if comment else []
    line = ""
    for word, breakable in words:
        if line and breakable and len(line) + 1 + len(word) > width:
            lines.append(line + " \\")
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join(indent + x for x in [*lines, line])


def one_line(text: object) -> str:
    """A library's message on one line, whole: its lines joined with spaces (a first line can end mid-sentence)."""
    return " ".join(part.strip() for part in str(text).split("\n") if part.strip())
