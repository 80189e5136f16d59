"""Latency and throughput, measured side by side in one process.

Every model runs the same texts in the same full batches with the same
thread count. After a warm-up, the models take turns batch by batch (and the
turn order flips every round), so a load spike from another process hits all
of them alike instead of biasing one. Throughput is ``batch size / median
batch time``: one slow batch caused by a neighbour does not move it. A batch's
time includes tokenisation, as a caller of ``encode`` would see it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.verification.embedders import Embedder


@dataclass(frozen=True)
class LatencyStats:
    batch_size: int
    p50_ms: float  # per batch
    p95_ms: float
    mean_ms: float
    sentences_per_s: float  # batch size / p50 batch time
    timed_batches: int

    def to_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def default_threads() -> int:
    """torch's own default (the physical core count), else the CPU count."""
    try:
        import torch

        return int(torch.get_num_threads())
    except ImportError:
        return os.cpu_count() or 1


@contextmanager
def fixed_threads(threads: int | None) -> Iterator[None]:
    """Pin torch's intra-op thread count for the block (ONNX sessions get theirs when opened)."""
    if threads is None:
        yield
        return
    if threads < 1:
        raise ValidationError(f"--threads must be at least 1, got {threads}")
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def full_batches(texts: Sequence[str], batch_size: int) -> list[list[str]]:
    """``ceil(n / batch_size)`` batches of exactly ``batch_size`` texts, wrapping around the list."""
    if not texts:
        raise ValidationError("latency needs at least one text")
    n = len(texts)
    count = max(1, math.ceil(n / batch_size))
    return [[texts[(b * batch_size + i) % n] for i in range(batch_size)] for b in range(count)]


def _stats(batch_size: int, times: list[float]) -> LatencyStats:
    ms = np.asarray(times) * 1000.0
    p50 = float(np.percentile(ms, 50))
    return LatencyStats(
        batch_size=batch_size, p50_ms=p50, p95_ms=float(np.percentile(ms, 95)), mean_ms=float(ms.mean()),
        sentences_per_s=1000.0 * batch_size / p50 if p50 > 0 else float("inf"), timed_batches=len(times),
    )


def measure(
    embedders: Sequence[Embedder],
    texts: Sequence[str],
    batch_sizes: Sequence[int],
    *,
    rounds: int = 3,
    warmup: int = 2,
    progress: str | None = None,
) -> list[dict[int, LatencyStats]]:
    """Per embedder (same order), per batch size: p50/p95 ms per batch and sentences/s."""
    from espresso_export.core.progress import track

    if rounds < 1:
        raise ValidationError(f"latency rounds must be at least 1, got {rounds}")
    times: list[dict[int, list[float]]] = [{bs: [] for bs in batch_sizes} for _ in embedders]
    plan = [(bs, r) for bs in batch_sizes for r in range(rounds)]
    for bs, r in track(plan, description=progress, total_items=len(plan)):
        batches = full_batches(texts, bs)
        if r == 0:  # untimed warm-up: first-call allocations and kernel selection
            for emb in embedders:
                for i in range(warmup):
                    emb.encode(batches[i % len(batches)], batch_size=bs)
        order = list(range(len(embedders)))
        if r % 2:
            order.reverse()
        for batch in batches:
            for idx in order:
                start = time.perf_counter()
                embedders[idx].encode(batch, batch_size=bs)
                times[idx][bs].append(time.perf_counter() - start)
    return [{bs: _stats(bs, per[bs]) for bs in batch_sizes} for per in times]
