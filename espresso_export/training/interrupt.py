"""Ctrl-C or SIGTERM during training: the first one asks the loop to save a resumable checkpoint and stop.

The signal handling is :mod:`espresso_export.core.signals` (one mechanism for every command); this module
holds the exception a stopped training run raises."""

from __future__ import annotations

from espresso_export.core import signals
from espresso_export.core.errors import EXIT_INTERRUPTED, EspressoError


class TrainingInterrupted(EspressoError):
    """Training (or the teacher pass of ``distill``) stopped by Ctrl-C or SIGTERM; what was done is kept.

    Exit code 130 after Ctrl-C, 143 after SIGTERM."""

    exit_code = EXIT_INTERRUPTED


def interrupted(message: str, signum: int | None = None) -> TrainingInterrupted:
    """A :class:`TrainingInterrupted` whose message starts with how it stopped and whose exit code says which
    signal (``signum``, else the last one received)."""
    return TrainingInterrupted(f"{signals.describe(signum)} {message}", exit_code=signals.exit_code(signum))


stop_flag = signals.stop_flag
stop_requested = signals.stop_requested
