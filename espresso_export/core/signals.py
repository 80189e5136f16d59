"""SIGINT (Ctrl-C) and SIGTERM (``docker stop``, Kubernetes, SLURM, ``kill``): one way to stop, for every command.

Both signals take the path Ctrl-C always took: the exception unwinds the command, every temporary output is
removed on the way out (``atomic_output``), and training saves a resumable checkpoint first
(:func:`stop_flag`). The exit code says which signal stopped the run, as a shell reports a killed process:
``128 + signal number``, so 130 after Ctrl-C and 143 after SIGTERM.

* :func:`signals_raise` (the CLI, around every command): SIGINT raises :class:`KeyboardInterrupt`, SIGTERM
  :class:`Terminated` (a ``KeyboardInterrupt``, so code that cleans up on Ctrl-C also cleans up on SIGTERM).
* :func:`stop_flag` (the training loop): the first signal only sets a flag, so the loop finishes its step,
  saves and stops; a second one interrupts at once.
* :func:`interrupt_after` (a time budget, e.g. ``auto``'s): the same stop, asked for by a timer. A signal can
  be lost (Python drops an exception raised inside a weakref callback or a ``__del__``), so the loops that take
  long also look at the clock: :func:`stop_requested` in training, :func:`check_budget` between encoded batches.
"""

from __future__ import annotations

import _thread
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_last: dict[str, int | None] = {"signum": None}
_budgets: list[dict] = []  # the states of the interrupt_after blocks in force, each with its deadline ("at")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises :class:`KeyboardInterrupt`."""


def exit_code(signum: int | None = None) -> int:
    """``128 + signal``: 130 for Ctrl-C (also when no signal was seen, e.g. a KeyboardInterrupt raised by hand),
    143 for SIGTERM."""
    signum = signum or _last["signum"] or signal.SIGINT
    return 128 + int(signum)


def describe(signum: int | None = None) -> str:
    """``"interrupted"`` (Ctrl-C) or ``"terminated (SIGTERM)"``: how a message names the stop."""
    signum = signum or _last["signum"] or signal.SIGINT
    return "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"


def signum_of(e: BaseException) -> int:
    """The signal a KeyboardInterrupt stands for: SIGTERM for :class:`Terminated`, else SIGINT."""
    return signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT


def record(signum: int | None) -> None:
    _last["signum"] = signum


def received() -> int | None:
    """The stop signal this process received since the last ``record(None)`` (None: none)."""
    return _last["signum"]


def raise_for(signum: int) -> None:
    """Raise what ``signum`` raises: :class:`Terminated` for SIGTERM, :class:`KeyboardInterrupt` otherwise."""
    record(signum)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


@contextmanager
def _handlers(handler) -> Iterator[bool]:
    """Install ``handler`` for SIGINT and SIGTERM, restoring the previous ones on exit; yields whether it could
    (only the main thread may install handlers)."""
    previous = {}
    try:
        for s in STOP_SIGNALS:
            previous[s] = signal.signal(s, handler)
    except ValueError:  # not the main thread: signals behave as they did
        yield False
        return
    try:
        yield True
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def signals_raise() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt and SIGTERM raises :class:`Terminated` while inside (the CLI's scope)."""
    _last["signum"] = None

    def handler(signum, frame):
        raise_for(signum)

    with _handlers(handler):
        yield


@contextmanager
def stop_flag(repeat_interrupts: bool = True) -> Iterator[dict]:
    """The first SIGINT or SIGTERM sets ``flag["stop"]`` (and ``flag["signum"]``); a second one raises.

    Under torchrun a single Ctrl-C reaches each worker twice (from the terminal and forwarded by the agent),
    so there (``repeat_interrupts=False``) every signal only sets the flag: the ranks agree on the step to stop
    after, rank 0 saves, all exit."""
    flag: dict = {"stop": False, "signum": None}

    def handler(signum, frame):
        record(signum)
        if flag["stop"] and repeat_interrupts:
            raise_for(signum)
        flag["stop"], flag["signum"] = True, signum

    with _handlers(handler):
        yield flag


def budget_spent() -> bool:
    """Whether an :func:`interrupt_after` block in force has reached its deadline (each one that has is marked
    fired, so its caller treats the stop as the budget's)."""
    now, spent = time.monotonic(), False
    for state in _budgets:
        if now >= state["at"]:
            state["fired"] = spent = True
    return spent


def check_budget() -> None:
    """Raise as Ctrl-C would when a time budget in force is spent: the half of :func:`interrupt_after` that cannot
    be lost, for loops that run outside training (encoding, the teacher pass)."""
    if budget_spent():
        raise KeyboardInterrupt()


def stop_requested(flag: dict) -> bool:
    """Whether the training loop holding ``flag`` (:func:`stop_flag`) should save and stop: a signal set it, or a
    time budget in force is spent (set then, as the signal would have)."""
    if not flag["stop"] and budget_spent():
        flag["stop"], flag["signum"] = True, signal.SIGINT
    return bool(flag["stop"])


@contextmanager
def interrupt_after(seconds: float) -> Iterator[dict]:
    """Stop the block as Ctrl-C would, ``seconds`` from now, if it is still running: a SIGINT to the main thread
    (a simulated one where ``pthread_kill`` is missing), so training inside saves a resumable checkpoint and raises
    as after a real Ctrl-C; the handler in force at that moment decides, as it would for the user's. Yields
    ``{"fired": bool}``; the caller catches the interrupt when ``fired``, and the signal is forgotten (the exit
    code is not an interrupt's). It may arrive while the block ends: the caller's ``except`` sees it then too.
    The loops that look at the clock (:func:`stop_requested`, :func:`check_budget`) stop at the deadline even
    when the signal is lost."""
    state = {"fired": False, "done": False, "at": time.monotonic() + max(float(seconds), 0.0)}
    lock = threading.Lock()

    def fire() -> None:
        with lock:
            if not state["done"] and not state["fired"]:
                state["fired"] = True
                if hasattr(signal, "pthread_kill"):  # a real signal: it also wakes a sleeping main thread
                    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                else:
                    _thread.interrupt_main(signal.SIGINT)

    timer = threading.Timer(max(float(seconds), 0.0), fire)
    timer.daemon = True
    _budgets.append(state)
    timer.start()
    try:
        yield state
    finally:
        with lock:
            state["done"] = True
        timer.cancel()
        _budgets.remove(state)
        if state["fired"]:
            record(None)


__all__ = ["STOP_SIGNALS", "Terminated", "budget_spent", "check_budget", "describe", "exit_code", "interrupt_after",
           "raise_for", "record", "signals_raise", "signum_of", "stop_flag", "stop_requested"]
