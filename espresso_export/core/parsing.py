"""Command-line spellings of structured values, parsed in one place (torch-free: the CLI imports this)."""

from __future__ import annotations

from pathlib import Path

from espresso_export.core.errors import ValidationError


def under_local_folder(spec: str) -> bool:
    """True for ``out/nothing`` when ``out/`` is a folder here: a mistyped path, not the Hub id ``out/nothing``.

    A Hub id has the form of a relative path (``owner/name``); when its first part names a local folder, the user
    meant a path, and the answer is "no such folder" (exit 2), not a download attempt."""
    head, sep, _ = spec.partition("/")
    return bool(sep) and bool(head) and Path(head).expanduser().is_dir()


def parse_layers(text: str) -> int | list[int]:
    """CLI form: ``"4"`` is a count, ``"0,2,4"`` (or a single ``"3,"``) is a list of indices."""
    text = text.strip()
    try:
        if "," in text:
            return [int(p) for p in text.split(",") if p.strip()]
        return int(text)
    except ValueError as e:
        raise ValidationError(f"--layers must be a count (4) or a comma-separated list of layer indices (0,2,4), got {text!r}") from e


def parse_int_list(text: str, option: str, *, positive: bool = True) -> list[int]:
    """``"2,3,4"`` -> ``[2, 3, 4]`` (positive, duplicates dropped, order kept); a clear error otherwise.

    ``positive=False`` leaves the range check to the caller (layer counts: it knows the model's depth)."""
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError as e:
        raise ValidationError(f"{option} must be comma-separated integers like 1,32, got {text!r}") from e
    if not values or (positive and any(v < 1 for v in values)):
        raise ValidationError(f"{option} must be positive integers like 1,32, got {text!r}")
    return list(dict.fromkeys(values))


def parse_name_list(text: str) -> list[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]``."""
    return [p.strip() for p in text.split(",") if p.strip()]


_DURATION = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "hours": 3600}


def parse_duration(text: str | float | int, option: str) -> float:
    """Seconds in ``90``, ``90s``, ``45m``, ``45min``, ``2h`` or ``1h30m``; a bare number is seconds."""
    import re

    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        raw = str(text).strip().lower().replace(" ", "")
        parts = re.findall(r"(\d+(?:\.\d+)?)([a-z]*)", raw)
        if not raw or "".join(n + u for n, u in parts) != raw or any(u and u not in _DURATION for _, u in parts):
            raise ValidationError(f"{option} {text!r}: give a duration such as 90s, 45m, 2h or 1h30m")
        seconds = sum(float(n) * _DURATION[u or "s"] for n, u in parts)
    if seconds <= 0:
        raise ValidationError(f"{option} must be longer than 0 seconds, got {text!r}")
    return seconds
