"""Model names as a public card shows them: Hub ids linked, local folders cut to their last component.

A card is published, so no local directory name may appear on it; every place that prints a model id
goes through :func:`display_id` or :func:`short_id`.
"""

from __future__ import annotations

import re

from espresso_export.model.aliases import resolve_alias
from espresso_export.model.static import STATIC_STUDENT

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_hub_id(text: str | None) -> bool:
    return bool(text) and bool(_HUB_ID.match(text)) and "--" not in text and ".." not in text


def is_local_path(text: str) -> bool:
    return text.startswith(("/", "~", ".")) or "\\" in text or bool(re.match(r"^[A-Za-z]:", text)) or text.count("/") > 1


def short_id(ident: str | None) -> str:
    """A Hub id (aliases resolved) as is; a local path by its last component only (no local paths on a public card)."""
    if not ident:
        return "the source"
    ident = resolve_alias(ident)
    return re.split(r"[\\/]", ident.rstrip("/\\"))[-1] if is_local_path(ident) else ident


def display_id(ident: str | None) -> str:
    """Markdown for a model: a Hub link, or a local folder by its last component."""
    if not ident:
        return "unknown"
    ident = resolve_alias(ident)
    if is_hub_id(ident):
        return f"[{ident}](https://huggingface.co/{ident})"
    return f"`{short_id(ident)}`" + (" (a local folder)" if is_local_path(ident) else "")


def step_source(step: dict) -> str | None:
    """The model a provenance step started from: the shrink source, else a distillation's student or teacher (a
    static student is made from the teacher: ``distill --student static``)."""
    for key in ("source", "student", "teacher", "base"):
        value = step.get(key)
        ident = value.get("id") if isinstance(value, dict) else value
        if key == "student" and ident == STATIC_STUDENT:
            continue
        if isinstance(ident, str) and ident and not ident.endswith("(cut)"):
            return ident
    teacher = step.get("teacher")
    return teacher.get("id") if isinstance(teacher, dict) else None
