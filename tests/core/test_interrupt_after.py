"""``interrupt_after``: a time budget stops a block the way Ctrl-C does, and only while the block runs."""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager

import pytest

from espresso_export.core import signals
from espresso_export.core.signals import (
    check_budget,
    interrupt_after,
    stop_flag,
    stop_requested,
)


@contextmanager
def lost_signals():
    """SIGINT ignored inside: the timer's signal is lost, as it is when Python drops an exception raised inside a
    weakref callback."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_block_still_running_at_the_deadline_is_interrupted_and_the_signal_forgotten():
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt), interrupt_after(0.2) as deadline:
        time.sleep(5)
    assert deadline["fired"] and 0.15 <= time.perf_counter() - start < 2
    assert signals.received() is None  # the command's exit code is not taken for an interrupt's


def test_a_training_loop_sees_the_stop_flag_and_finishes_its_step():
    steps = 0
    with interrupt_after(0.2) as deadline, stop_flag() as flag:
        while not stop_requested(flag):
            steps += 1
            time.sleep(0.01)
    assert deadline["fired"] and steps > 5


def test_a_block_that_ends_first_is_never_interrupted():
    with interrupt_after(0.2) as deadline:
        pass
    time.sleep(0.4)  # a KeyboardInterrupt raised here would fail the test
    assert not deadline["fired"]


def test_a_training_loop_stops_at_the_deadline_when_the_signal_is_lost():
    steps, start = 0, time.perf_counter()
    with interrupt_after(0.2) as deadline, stop_flag() as flag, lost_signals():
        while not stop_requested(flag) and time.perf_counter() - start < 5:
            steps += 1
            time.sleep(0.01)
    assert deadline["fired"] and flag["signum"] == signal.SIGINT and time.perf_counter() - start < 2


def test_encoding_stops_between_batches_when_the_signal_is_lost(tiny_bert):
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode

    ckpt, texts = load(str(tiny_bert)), [f"sentence number {i}" for i in range(64)]
    with pytest.raises(KeyboardInterrupt), interrupt_after(0.1) as deadline, lost_signals():
        time.sleep(0.3)  # the deadline passes; its signal is lost
        encode(ckpt, texts, batch_size=8)
    assert deadline["fired"]
    assert encode(ckpt, texts[:8], batch_size=8).shape[0] == 8  # outside the block nothing stops it


def test_the_clock_checks_do_nothing_outside_a_budget_or_before_its_deadline():
    check_budget()
    with stop_flag() as flag:
        assert not stop_requested(flag)
    with interrupt_after(30) as deadline:
        check_budget()
        assert not signals.budget_spent()
    assert not deadline["fired"]
