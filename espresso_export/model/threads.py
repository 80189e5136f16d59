"""torch's intra-op thread count: its default, and pinned for a block. Shared by the stages that time or
compare models (verify, sweep, auto), so each measures with the threads it reports."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from espresso_export.core.errors import ValidationError


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
