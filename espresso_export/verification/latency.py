"""Latency and throughput, measured side by side in one process, with the spread and a verdict on trust.

Built as benchmark harnesses (pyperf, Google benchmark) are, because a shared machine lies:

* **Warm-up.** Each model runs a few untimed batches first (allocations, kernel selection, lazy imports).
* **Interleaving.** A *round* is one pass over the same fixed batches; within it the models take turns, each
  running all its batches after one untimed batch of its own, and the turn order flips every round. Turns batch
  by batch would bias both ways: a model running right after another finds cold caches, or the other runtime's
  threads still spinning. The speed-up is the median of the per-round *paired* ratios (candidate round time /
  source round time of the same round), which cancels slow drifts in the machine's speed.
* **Enough repetitions.** Rounds continue (at least ``min_rounds``) until the median ratio's 95% confidence
  interval is within ``ci_target`` of it, or ``budget_s`` seconds of measuring, or ``MAX_ROUNDS``.
* **Spread reported**, **threads fixed and recorded** (:func:`~espresso_export.model.threads.fixed_threads`),
  and **a verdict**: :meth:`BatchTiming.reasons` lists why a measurement is not to be trusted (see :class:`Limits`).

The clock and the load probe are parameters, so a test can feed a noisy or a quiet clock. A batch's time
includes tokenisation, as a caller of ``encode`` would see it.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from espresso_export.core.cpu import MAX_OTHER_CORES, cpu_seconds, other_cores, usable_cores
from espresso_export.core.errors import ValidationError
from espresso_export.core.formatting import rounded
from espresso_export.verification.embedders import Embedder

Clock = Callable[[], float]
MAX_ROUNDS = 50


@dataclass(frozen=True)
class Limits:
    """Above these, a latency measurement is reported as unreliable."""

    max_spread: float = 0.10  # IQR / median of a model's round times
    max_tail: float = 2.0  # p95 / p50 of one batch's repeated times (spikes from other processes)
    max_ci: float = 0.10  # half-width of the ratio's 95% CI / the ratio
    min_rounds: int = 3  # fewer rounds: the spread is unknown
    max_other_cores: float = MAX_OTHER_CORES  # CPU other processes used on average


def one_minute_load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform
        return None


def median_ci(values: Sequence[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval of the median: order statistics of a Binomial(n, 1/2).

    Hand-written (a few lines) because scipy is not a dependency; with fewer than 6 values no pair of order
    statistics reaches 95% and (min, max) is returned."""
    x = sorted(values)
    n = len(x)
    tail, j = 0.0, 0  # the largest j with P(Binomial(n, 1/2) < j) <= 2.5%
    while j < n // 2:
        tail += math.comb(n, j) / 2**n
        if tail > 0.025:
            break
        j += 1
    j = max(j, 1)
    return x[j - 1], x[n - j]


@dataclass(frozen=True)
class LatencyStats:
    """One model at one batch size. Times are ms per batch."""

    batch_size: int
    p50_ms: float  # median over every timed batch
    p95_ms: float
    mean_ms: float
    sentences_per_s: float  # batch size / median round's mean batch time
    timed_batches: int
    rounds: int
    round_ms: tuple[float, float, float, float, float]  # min, q1, median, q3, max of the rounds' mean batch time
    spread: float  # (q3 - q1) / median of the round times
    tail: float  # p95 / p50 of a batch's time relative to that batch's median over rounds

    def to_dict(self) -> dict:
        out = {k: rounded(getattr(self, k)) if isinstance(getattr(self, k), float) else getattr(self, k)
               for k in ("batch_size", "p50_ms", "p95_ms", "mean_ms", "sentences_per_s", "timed_batches", "rounds",
                         "spread", "tail")}
        out["round_ms"] = dict(zip(("min", "q1", "median", "q3", "max"), (rounded(v) for v in self.round_ms)))
        return out


@dataclass(frozen=True)
class Ratio:
    """The median of per-round paired time ratios (a / b) and its 95% CI."""

    median: float
    low: float
    high: float

    @property
    def half_width(self) -> float:
        """Half the CI's width relative to the median."""
        return (self.high - self.low) / (2 * self.median) if self.median > 0 else math.inf

    def to_dict(self) -> dict:
        return {"median": rounded(self.median), "ci95": [rounded(self.low), rounded(self.high)]}


@dataclass(frozen=True)
class BatchTiming:
    """Every timing at one batch size: ``seconds[e, r, b]`` for embedder ``e``, round ``r``, batch ``b``."""

    batch_size: int
    seconds: np.ndarray
    load_average: float | None  # the highest 1-minute load average seen while measuring
    cores: int
    threads: int | None
    other_cores: float | None = None  # CPU cores other processes kept busy on average while measuring (Linux)

    @property
    def rounds(self) -> int:
        return self.seconds.shape[1]

    def stats(self, e: int) -> LatencyStats:
        t = self.seconds[e] * 1000.0  # (rounds, batches)
        per_round = t.mean(axis=1)
        lo, q1, med, q3, hi = (float(v) for v in np.percentile(per_round, [0, 25, 50, 75, 100]))
        p50, p95 = (float(v) for v in np.percentile(t, [50, 95]))
        relative = t / np.maximum(np.median(t, axis=0, keepdims=True), 1e-12)
        rel50, rel95 = np.percentile(relative, [50, 95])
        return LatencyStats(
            batch_size=self.batch_size, p50_ms=p50, p95_ms=p95, mean_ms=float(t.mean()),
            sentences_per_s=1000.0 * self.batch_size / med if med > 0 else math.inf, timed_batches=t.size,
            rounds=self.rounds, round_ms=(lo, q1, med, q3, hi), spread=(q3 - q1) / med if med > 0 else math.inf,
            tail=float(rel95 / rel50) if rel50 > 0 else math.inf)

    def ratio(self, a: int, b: int) -> Ratio:
        per_round = self.seconds[a].sum(axis=1) / np.maximum(self.seconds[b].sum(axis=1), 1e-12)
        low, high = median_ci(per_round.tolist())
        return Ratio(float(np.median(per_round)), float(low), float(high))

    def reasons(self, labels: Sequence[str], limits: Limits = Limits()) -> list[str]:
        """Why this measurement is not to be trusted; empty when it is. ``labels`` name the embedders."""
        out = []
        if self.rounds < limits.min_rounds:
            out.append(f"{self.rounds} round(s): too few to know the spread (needs {limits.min_rounds})")
        for e, label in enumerate(labels):
            s = self.stats(e)
            if s.spread > limits.max_spread:
                out.append(f"{label} spread {s.spread:.0%} (IQR/median of rounds) above {limits.max_spread:.0%}")
            if s.tail > limits.max_tail:
                out.append(f"{label} p95/p50 of repeated batches {s.tail:.1f} above {limits.max_tail:g}")
        if len(labels) == 2 and self.rounds >= limits.min_rounds:
            r = self.ratio(0, 1)
            if r.half_width > limits.max_ci:
                out.append(f"ratio 95% CI {r.low:.3f}-{r.high:.3f} wider than +-{limits.max_ci:.0%}")
        if self.other_cores is not None:  # what other processes used while measuring, this process left out
            if self.other_cores > limits.max_other_cores:
                out.append(f"other processes kept {self.other_cores:.2f} of {self.cores} cores busy while measuring "
                           f"(above {limits.max_other_cores:g})")
        elif self.load_average is not None and self.load_average > self.cores:
            out.append(f"1-min load average {self.load_average:.1f} above {self.cores} cores (other processes "
                       f"compete)")
        if self.threads is not None and self.threads > self.cores:
            out.append(f"{self.threads} threads on {self.cores} cores")
        return out


def torch_threads() -> int | None:
    """torch's intra-op thread count now, if torch is loaded (never imports it)."""
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else None


def full_batches(texts: Sequence[str], batch_size: int) -> list[list[str]]:
    """``ceil(n / batch_size)`` batches of exactly ``batch_size`` texts, wrapping around the list."""
    if not texts:
        raise ValidationError("latency needs at least one text")
    n = len(texts)
    count = max(1, math.ceil(n / batch_size))
    return [[texts[(b * batch_size + i) % n] for i in range(batch_size)] for b in range(count)]


@dataclass(frozen=True)
class Plan:
    """How long to measure: at least ``min_rounds``, then until the ratio's CI is within ``ci_target`` (of the
    first two embedders) or ``budget_s`` seconds have been spent at this batch size."""

    min_rounds: int = 3
    budget_s: float = 0.0
    ci_target: float = 0.03
    warmup: int = 3
    max_rounds: int = MAX_ROUNDS


def _round(embedders: Sequence[Embedder], batches: list[list[str]], bs: int, reverse: bool, clock: Clock) -> np.ndarray:
    """One round: each model in turn runs every batch, after one untimed batch of its own; seconds[e, b]."""
    out = np.zeros((len(embedders), len(batches)))
    order = list(range(len(embedders)))[:: -1 if reverse else 1]
    for e in order:
        embedders[e].encode(batches[0], batch_size=bs)  # untimed: what the previous model left behind passes
        for b, batch in enumerate(batches):
            start = clock()
            embedders[e].encode(batch, batch_size=bs)
            out[e, b] = clock() - start
    return out


def _done(rounds: list[np.ndarray], plan: Plan, started: float, clock: Clock, n_embedders: int) -> bool:
    n = len(rounds)
    if n >= plan.max_rounds:
        return True
    if n < plan.min_rounds:
        return False
    if clock() - started >= plan.budget_s:
        return True
    if n_embedders < 2 or n < 2:
        return n_embedders < 2
    timing = BatchTiming(0, np.stack(rounds, axis=1), None, 1, None)
    return timing.ratio(0, 1).half_width <= plan.ci_target


def time_batch_size(embedders: Sequence[Embedder], texts: Sequence[str], batch_size: int, plan: Plan = Plan(), *,
                    clock: Clock = time.perf_counter, load: Callable[[], float | None] = one_minute_load,
                    cores: int | None = None,
                    cpu: Callable[[], tuple[float, float] | None] = cpu_seconds) -> BatchTiming:
    """Warm up, then time rounds of interleaved batches at one batch size until ``plan`` says stop. ``cpu``
    (:func:`cpu_seconds`) tells what other processes used meanwhile: the 1-minute load average lags by a minute
    and counts this process's own threads (a training step just before would make verify distrust itself)."""
    if plan.min_rounds < 1:
        raise ValidationError(f"latency rounds must be at least 1, got {plan.min_rounds}")
    batches = full_batches(texts, batch_size)
    for i in range(plan.warmup):  # untimed: first-call allocations, kernel selection
        for emb in embedders:
            emb.encode(batches[i % len(batches)], batch_size=batch_size)
    loads = [load()]
    rounds: list[np.ndarray] = []
    started, cpu_before = clock(), cpu()
    enabled = gc.isenabled()
    # the young generations only: a full collection scans the whole heap (hundreds of thousands of objects in a process
    # holding torch), and the old garbage it would free costs the timing nothing while collection is off
    gc.collect(1)
    gc.disable()  # a collection inside one model's batch would bias it
    try:
        while not _done(rounds, plan, started, clock, len(embedders)):
            rounds.append(_round(embedders, batches, batch_size, len(rounds) % 2 == 1, clock))
    finally:
        if enabled:
            gc.enable()
    loads.append(load())
    seen = [x for x in loads if x is not None]
    cpu_after, wall = cpu(), clock() - started
    other = other_cores(cpu_before, cpu_after, wall)
    return BatchTiming(batch_size, np.stack(rounds, axis=1), max(seen) if seen else None,
                       cores or usable_cores(), torch_threads(), other)


def compare(embedders: Sequence[Embedder], texts: Sequence[str], batch_sizes: Sequence[int], plan: Plan = Plan(), *,
            clock: Clock = time.perf_counter, load: Callable[[], float | None] = one_minute_load,
            progress: str | None = None) -> dict[int, BatchTiming]:
    """:func:`time_batch_size` at every batch size, in order."""
    from espresso_export.core.progress import track

    return {bs: time_batch_size(embedders, texts, bs, plan, clock=clock, load=load)
            for bs in track(list(batch_sizes), description=progress, total_items=len(batch_sizes))}


def time_loads(openers: Sequence[Callable[[], Embedder]], repeats: int = 3) -> list[list[float]]:
    """Each model's load time, ``repeats`` times, taking turns (order flipped each time); every model was
    loaded once before, so none pays first-import or cold-disk costs the other does not."""
    out: list[list[float]] = [[] for _ in openers]
    # What was alive before stays out of the collections between loads (gc.freeze): each then scans only what the
    # last load left, not the whole heap (hundreds of thousands of objects in a process holding torch).
    gc.freeze()
    try:
        for r in range(repeats):
            order = list(range(len(openers)))[:: -1 if r % 2 else 1]
            for i in order:
                emb = openers[i]()
                out[i].append(emb.load_seconds)
                del emb
                gc.collect()
    finally:
        gc.unfreeze()
    return out
