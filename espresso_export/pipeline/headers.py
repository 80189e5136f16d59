"""A recipe file's header: the comment lines above its keys, which say what it does and what it gave."""

from __future__ import annotations

from pathlib import Path


def recipe_header(path: Path) -> list[str]:
    """The leading comment lines of a recipe file (its description, expected retention and speed-up)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return lines


def recipe_summary(header: list[str]) -> str:
    """What a recipe does: its header up to the measured numbers ("Expected ..."), as one paragraph."""
    text = " ".join(" ".join(header).split())
    return text.split("Expected (", 1)[0].strip() or text


__all__ = ["recipe_header", "recipe_summary"]
