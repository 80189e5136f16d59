"""Length-sorted batching: the one batch planner of every encode loop (torch-free, stdlib only).

Batches of texts of similar length waste little padding. The PyTorch encode loop
(:mod:`espresso_export.model.embed`, which the distill teacher pass and training
evaluation go through) and the ONNX runtime (:mod:`espresso_export.runtime`) plan
their batches here, so they group the same texts the same way.

Which texts share a batch decides the float rounding of their embeddings (the
padded width changes the kernels' blocking), so the order here is part of the
bit-identical output: longest first, ties in input order.
"""

from __future__ import annotations

from collections.abc import Sequence


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of ``batch_size`` of similar length, longest first (ties keep input order)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def windows(start: int, stop: int, size: int) -> list[range]:
    """``range(start, stop)`` cut into consecutive ranges of at most ``size`` (bounds the memory of a long pass)."""
    return [range(s, min(s + size, stop)) for s in range(start, stop, size)]
