"""The lines ``run`` prints as each step starts and ends (``step 2/4 distill: done in 3m12s``): a run of twenty
minutes shows where it is between the steps' own progress bars, and a quiet step (an export) is not mistaken for
a hang. They go to stderr, so stdout keeps the result (``--json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from espresso_export.pipeline.recipe_runner import StepOutcome


def step_line(outcome: "StepOutcome", total: int, finished: bool) -> str:
    """``step 2/4 distill: running, writes 2-distill`` when a step starts, ``... done in 3m12s`` when it ends."""
    head = f"step {outcome.index}/{total} {outcome.kind}"
    if not finished:
        return f"{head}: running, writes {outcome.folder.name}"
    if outcome.status == "reused":
        return f"{head}: kept from the previous run (same settings and inputs)"
    if outcome.status == "gate failed":
        return f"{head}: gate failed, after {duration(outcome.seconds)}"
    return f"{head}: done in {duration(outcome.seconds)}"


def print_step(outcome: "StepOutcome", total: int, finished: bool) -> None:
    """:func:`step_line` on stderr (the console for messages: stdout keeps the result, as ``--json`` needs)."""
    from espresso_export.core.console import err_console

    err_console().print(step_line(outcome, total, finished), highlight=False, markup=False, soft_wrap=True)


def duration(seconds: float) -> str:
    """``8.4s``, ``3m12s``, ``1h05m``: a step's time at a glance."""
    if round(seconds, 1) < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole // 60 % 60:02d}m"


__all__ = ["duration", "print_step", "step_line"]
