"""Ctrl-C during training: the first one asks the loop to save a resumable checkpoint and stop."""

from __future__ import annotations

import signal
from contextlib import contextmanager

from espresso_export.core.errors import EXIT_INTERRUPTED, EspressoError


class TrainingInterrupted(EspressoError):
    """Ctrl-C during training: a resumable checkpoint was saved. Exit code 130."""

    exit_code = EXIT_INTERRUPTED


@contextmanager
def sigint_flag(repeat_interrupts: bool = True):
    """First Ctrl-C sets a flag (the loop saves and stops); a second one interrupts at once.

    Under torchrun a single Ctrl-C reaches each worker twice (from the terminal and forwarded by
    the agent), so there (``repeat_interrupts=False``) every Ctrl-C only sets the flag: the ranks
    agree on the step to stop after, rank 0 saves, all exit."""
    state = {"stop": False}

    def handler(signum, frame):
        if state["stop"] and repeat_interrupts:
            raise KeyboardInterrupt
        state["stop"] = True

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: no handler, Ctrl-C behaves as usual
        yield state
        return
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)
