"""Fault injection for the CLI: start a command, stop it with SIGINT, SIGTERM or SIGKILL, check what is left.

A command runs in a child process: by default a fork of the test process (which has imported torch,
transformers and onnx once, so a tiny command takes a second instead of the 10-30 s of a fresh interpreter on
a loaded machine) that calls the CLI's ``main``; with ``fresh=True`` a real ``python -m espresso_export``.
Either way it is a separate process with its own PID, receiving real signals.

A *chain* runs one command again and again, each attempt stopped at a drawn point (a random delay, or the
moment a file appears: a temp folder, a teacher chunk, a checkpoint) by a drawn signal, and continued the way
a user or a scheduler would (``--resume`` once a checkpoint exists), until an attempt finishes. After every
attempt it checks that the output path shows either what was there before or nothing (never a partial
folder); after Ctrl-C and SIGTERM, that no temp file or folder is left anywhere; after a finished attempt,
that no temp of the killed ones survived and that the output is byte-identical to an uninterrupted run's.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from espresso_export.core.signals import raise_for, signum_of

ROOT = Path(__file__).resolve().parents[1]
TEMP_NAME = re.compile(r"^\..+\.(tmp|old)-")  # every temp name beside an output, tagged or not
EXPECTED = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}
NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGKILL: "SIGKILL"}


def tree(folder: Path, skip: tuple[str, ...] = ("run.json",)) -> dict[str, str] | None:
    """relative path -> sha256 of every file under ``folder`` (None when it does not exist)."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in skip}


def _differ(got: dict | None, want: dict | None) -> list[str]:
    """The files that differ between two :func:`tree` results (missing, extra or other bytes)."""
    got, want = got or {}, want or {}
    return sorted(k for k in got.keys() | want.keys() if got.get(k) != want.get(k))


def temps(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob(".*") if TEMP_NAME.match(p.name))


def _raise_stop(signum, frame):
    """SIGTERM outside the CLI's handlers: the CLI's own exception for it (``Terminated``)."""
    raise_for(signum)


class Child:
    """One CLI process: a fork calling ``main(argv)``, or a fresh interpreter (``fresh``)."""

    def __init__(self, argv: list, log: Path, fresh: bool = False):
        self.log, self.code, self.proc = log, None, None
        argv = [str(a) for a in argv]
        if fresh:
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            with open(log, "wb") as fh:
                self.proc = subprocess.Popen([sys.executable, "-m", "espresso_export", *argv], cwd=ROOT, env=env,
                                             stdout=fh, stderr=subprocess.STDOUT)
            self.pid = self.proc.pid
            return
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.pid = os.fork()
        if self.pid == 0:  # the child: the CLI, then exit without running any of the parent's cleanup
            code, sig = 99, None
            try:
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                # pytest's capture may have replaced sys.stdout/stderr in the parent: write to the log instead
                sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                # outside main() (the parent's handlers are inherited, and main() puts them back on its way out)
                # a stop raises here, so that one landing after main() returned cannot pass for an early one
                signal.signal(signal.SIGINT, signal.default_int_handler)
                signal.signal(signal.SIGTERM, _raise_stop)
                from espresso_export.cli.app import main

                code = main(argv)
            except KeyboardInterrupt as e:  # before main() installed its handlers: die of it, as Python does
                sig = signum_of(e)
            finally:
                stops = {signal.SIGINT, signal.SIGTERM}
                while True:  # block further stops; one landing before the block is in place raises here again
                    try:
                        signal.pthread_sigmask(signal.SIG_BLOCK, stops)
                        break
                    except KeyboardInterrupt as e:
                        sig = signum_of(e)
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                if code == 99 and sig is not None:  # stopped before main() returned
                    signal.signal(sig, signal.SIG_DFL)
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
                    os.kill(os.getpid(), sig)
                os._exit(code)
        os.close(fd)

    def poll(self) -> int | None:
        if self.code is None:
            if self.proc is not None:
                self.code = self.proc.poll()
            else:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.code = os.waitstatus_to_exitcode(status)
        return self.code

    def wait(self, timeout: float = 300) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                raise AssertionError(f"{self.log.name}: no exit after {timeout} s")
            time.sleep(0.01)
        return self.code

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""


def run_to_end(argv: list, log: Path, fresh: bool = False) -> float:
    """Run a command to its end (exit 0 asserted); returns its seconds."""
    start = time.monotonic()
    child = Child(argv, log, fresh)
    assert child.wait() == 0, child.text()[-3000:]
    return time.monotonic() - start


def unchanged(before: dict | None, after: dict | None) -> None:
    assert after == before, "the output changed or is partial"


def newer(pattern: str, folder: Path, since: float) -> bool:
    """Whether an entry matching ``pattern`` in ``folder`` appeared since ``since`` (wall-clock seconds)."""
    for p in folder.glob(pattern):
        try:
            if p.stat().st_mtime >= since - 0.01:
                return True
        except OSError:  # renamed or removed meanwhile
            continue
    return False


@dataclass
class Chain:
    """One command run until it finishes, each attempt stopped at a drawn point by a drawn signal."""

    name: str
    argv: Callable[[], list]  # the next attempt's arguments (may depend on what the last one left)
    output: Path  # what the command writes
    root: Path  # where temps are looked for (the output's parent, the run and cache folders)
    logs: Path
    reference: dict  # the output's tree after an uninterrupted run
    seconds: float  # how long an uninterrupted run took
    waypoints: list[Callable[[float], bool]] = field(default_factory=list)  # "stop once this holds" (arg: start)
    check_visible: Callable[[dict | None, dict | None], None] = unchanged  # (before, after) an interrupted attempt
    fresh: bool = False
    window: tuple[float, float] = (0.05, 0.6)  # random delays: this fraction of ``seconds``
    points: list[str] = field(default_factory=list)  # the interruption points tried, for the report

    def attempt(self, rng: random.Random, sig: int, waypoint: Callable[[float], bool] | None, n: int) -> int:
        before = tree(self.output)
        delay, extra = rng.uniform(*self.window) * self.seconds, rng.uniform(0.0, 0.05)
        start, since = time.monotonic(), time.time()
        child = Child(self.argv(), self.logs / f"{self.name}-{n}.log", self.fresh)
        if waypoint is None:
            while time.monotonic() < start + delay and child.poll() is None:
                time.sleep(0.005)
            where = f"after {delay:.2f} s"
        else:
            while not waypoint(since) and child.poll() is None and time.monotonic() < start + 3 * self.seconds + 30:
                time.sleep(0.005)
            time.sleep(extra)
            where = f"{extra:.2f} s after {waypoint.__name__.replace('_', ' ')}"
        if child.poll() is None:
            os.kill(child.pid, sig)
        code, text = child.wait(), child.text()
        what = f"{self.name}, {NAMES[sig]} {where}"
        # stopped before the CLI installed its handlers (an interpreter starting, a child not yet scheduled on a
        # loaded machine), a process dies of the signal itself: nothing was written yet
        early = code == -sig and sig != signal.SIGKILL
        assert code in (0, EXPECTED[sig]) or early, f"{what}: exit {code}\n{text[-3000:]}"
        if code == 0:  # finished before the signal
            self.check_finished(what)
            return code
        self.points.append(what + (" (before the CLI started)" if early else ""))
        after = tree(self.output)
        # the rename is the commit point: a stop just after it leaves the new output whole, and the message says
        # so (a SIGKILL cannot say anything)
        if after == self.reference and after != before and (
                sig == signal.SIGKILL or "written whole" in " ".join(text.split())):
            self.points[-1] += " (after the output was renamed in)"
        else:
            try:
                self.check_visible(before, after)
            except AssertionError as e:
                raise AssertionError(f"{what}: {e}") from e
        if sig != signal.SIGKILL:  # the command unwound: it removed its own temps on the way out (a killed
            # earlier attempt's temps may remain until a command reaches its output check: check_finished)
            own = [p for p in temps(self.root) if f".tmp-{child.pid}-" in p.name or f".old-{child.pid}-" in p.name]
            assert not own, f"{what}: left {own}"
        return code

    def check_finished(self, what: str) -> None:
        got = tree(self.output)
        assert got == self.reference, f"{what}: the finished output differs from the reference: {_differ(got, self.reference)}"
        assert not temps(self.root), f"{what}: temps survived a finished run: {temps(self.root)}"

    def run(self, rng: random.Random, attempts: int) -> list[str]:
        """``attempts`` stops (the waypoints first), then a run to the end if none finished; returns the points."""
        sigs = [(signal.SIGINT, signal.SIGTERM, signal.SIGKILL)[i % 3] for i in range(attempts)]
        rng.shuffle(sigs)
        stops = list(self.waypoints) + [None] * max(0, attempts - len(self.waypoints))
        for n, (sig, waypoint) in enumerate(zip(sigs, stops)):
            if self.attempt(rng, sig, waypoint, n) == 0:
                return self.points
        run_to_end(self.argv(), self.logs / f"{self.name}-end.log", self.fresh)
        self.check_finished(f"{self.name}, the run after the last stop")
        return self.points
