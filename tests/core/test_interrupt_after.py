"""``interrupt_after``: a time budget stops a block the way Ctrl-C does, and only while the block runs.

The timer signals the main thread and the tests change the SIGINT handler: each test that lets it fire runs in a
process of its own (the ``own_process`` fixture), so no handler, timer or signal another test left can change it.
The deadlines are generous and the times only bounded far away from them: a slow or busy machine passes too."""

from __future__ import annotations

import json
import signal

from espresso_export.core import signals
from espresso_export.core.signals import check_budget, interrupt_after, stop_flag, stop_requested

PRELUDE = """
import json, signal, sys, time
from contextlib import contextmanager

from espresso_export.core import signals
from espresso_export.core.signals import interrupt_after, signals_raise, stop_flag, stop_requested


@contextmanager
def lost_signals():
    # SIGINT ignored inside: the timer's signal is lost, as it is when Python drops an exception raised inside a
    # weakref callback
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def report(**seen):
    print(json.dumps(seen))  # what the test asserts on, in its own process's parent
"""


def _seen(own_process, body: str, *args) -> dict:
    """The values the body's process reports (its last line of output)."""
    return json.loads(own_process(PRELUDE + body, *args).strip().splitlines()[-1])


def test_a_block_still_running_at_the_deadline_is_interrupted_and_the_signal_forgotten(own_process):
    seen = _seen(own_process, """
start = time.perf_counter()
with signals_raise():  # the CLI's handler records the signal, as it would the user's Ctrl-C
    try:
        with interrupt_after(0.5) as deadline:
            time.sleep(300)
    except KeyboardInterrupt:
        pass
    else:
        sys.exit("the block ran to its end")
report(fired=deadline["fired"], took=time.perf_counter() - start, received=signals.received())
""")
    assert seen["fired"] and 0.45 <= seen["took"] < 120, seen  # stopped at the deadline, long before the block's end
    assert seen["received"] is None  # the command's exit code is not taken for an interrupt's


def test_a_training_loop_sees_the_stop_flag_and_finishes_its_step(own_process):
    seen = _seen(own_process, """
steps = 0
with interrupt_after(0.5) as deadline, stop_flag() as flag:
    while not stop_requested(flag):  # no KeyboardInterrupt: the loop ends itself
        steps += 1
        time.sleep(0.01)
report(fired=deadline["fired"], stop=flag["stop"], signum=int(flag["signum"]), steps=steps)
""")
    assert seen["fired"] and seen["stop"] and seen["signum"] == signal.SIGINT and seen["steps"] >= 1, seen


def test_a_block_that_ends_first_is_never_interrupted(own_process):
    seen = _seen(own_process, """
with interrupt_after(0.2) as deadline:
    pass
time.sleep(1)  # a KeyboardInterrupt raised here would end the process with an error
report(fired=deadline["fired"])
""")
    assert not seen["fired"]


def test_a_training_loop_stops_at_the_deadline_when_the_signal_is_lost(own_process):
    seen = _seen(own_process, """
steps, start = 0, time.perf_counter()
with interrupt_after(0.5) as deadline, stop_flag() as flag, lost_signals():
    while not stop_requested(flag) and time.perf_counter() - start < 300:
        steps += 1
        time.sleep(0.01)
report(fired=deadline["fired"], signum=int(flag["signum"]), took=time.perf_counter() - start)
""")
    assert seen["fired"] and seen["signum"] == signal.SIGINT and seen["took"] < 120, seen


def test_encoding_stops_between_batches_when_the_signal_is_lost(own_process, tiny_bert):
    seen = _seen(own_process, """
from espresso_export.model.checkpoint import load
from espresso_export.model.embed import encode

ckpt, texts = load(sys.argv[1]), [f"sentence number {i}" for i in range(64)]
try:
    with interrupt_after(0.1) as deadline, lost_signals():
        time.sleep(0.5)  # the deadline passes; its signal is lost
        encode(ckpt, texts, batch_size=8)
except KeyboardInterrupt:
    pass
else:
    sys.exit("encoding ran to its end")
report(fired=deadline["fired"], after=encode(ckpt, texts[:8], batch_size=8).shape[0])
""", tiny_bert)
    assert seen["fired"]
    assert seen["after"] == 8  # outside the block nothing stops it


def test_the_clock_checks_do_nothing_outside_a_budget_or_before_its_deadline():
    check_budget()
    with stop_flag() as flag:
        assert not stop_requested(flag)
    with interrupt_after(600) as deadline:
        check_budget()
        assert not signals.budget_spent()
    assert not deadline["fired"]
