"""When a label-free estimate may decide a threshold: enough queries and a narrow enough 95% interval.

A retention ratio over a handful of queries, or over queries the source itself rarely answers, swings far above 1
and below any target alike; a gate or a search that compared it with a threshold would answer by luck. Kept apart
from :mod:`.metrics` (numpy) so the settings that declare ``--max-noise`` import nothing heavy.
"""

from __future__ import annotations

MIN_ITEMS = 10  # an estimate over fewer queries (or pairs) decides no gate: one item moves it by a tenth or more
MAX_NOISE = 0.1  # the widest half of a 95% interval a gated estimate may have: wider, it cannot tell 0.97 from 0.87


def undecided(items: int, interval: tuple[float, float] | None, max_noise: float = MAX_NOISE) -> str | None:
    """Why an estimate over ``items`` queries with 95% ``interval`` cannot decide a threshold, or None when it can:
    too few items, no interval, or an interval wider than ``max_noise`` on either side (a source that finds few
    of its known items, or a handful of queries, makes a retention ratio swing far above 1 and below the
    target alike)."""
    if items < MIN_ITEMS:
        return f"{items} queries, fewer than the {MIN_ITEMS} an estimate needs"
    if interval is None:
        return f"no 95% interval over its {items} queries"
    half = (interval[1] - interval[0]) / 2
    if not half <= max_noise:
        return (f"its 95% interval {interval[0]:.3f}-{interval[1]:.3f} over {items} queries is +-{half:.3f} wide, "
                f"more than +-{max_noise:g}")
    return None
