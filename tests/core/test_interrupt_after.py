"""``interrupt_after``: a time budget stops a block the way Ctrl-C does, and only while the block runs."""

from __future__ import annotations

import time

import pytest

from espresso_export.core import signals
from espresso_export.core.signals import interrupt_after, stop_flag


def test_a_block_still_running_at_the_deadline_is_interrupted_and_the_signal_forgotten():
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt), interrupt_after(0.2) as deadline:
        time.sleep(5)
    assert deadline["fired"] and 0.15 <= time.perf_counter() - start < 2
    assert signals.received() is None  # the command's exit code is not taken for an interrupt's


def test_a_training_loop_sees_the_stop_flag_and_finishes_its_step():
    steps = 0
    with interrupt_after(0.2) as deadline, stop_flag() as flag:
        while not flag["stop"]:
            steps += 1
            time.sleep(0.01)
    assert deadline["fired"] and steps > 5


def test_a_block_that_ends_first_is_never_interrupted():
    with interrupt_after(0.2) as deadline:
        pass
    time.sleep(0.4)  # a KeyboardInterrupt raised here would fail the test
    assert not deadline["fired"]
