"""A recipe file's header: the comment lines above its keys, which say what it does and what it gave."""

from __future__ import annotations

from pathlib import Path

from espresso_export.data.files import text_lines


def recipe_header(path: Path) -> list[str]:
    """The leading comment lines of a recipe file (its description, expected retention and speed-up)."""
    lines = []
    for line in text_lines(path.read_text(encoding="utf-8-sig")):
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return lines


def recipe_summary(header: list[str]) -> str:
    """What a recipe does: its header up to the measured numbers ("Expected ..."), as one paragraph."""
    text = " ".join(" ".join(header).split())
    return text.split("Expected (", 1)[0].strip() or text


__all__ = ["recipe_header", "recipe_summary"]
