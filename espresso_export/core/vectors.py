"""Unit-length rows: the one L2 normalisation of embeddings, for every stage and the runtime (numpy only)."""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

MIN_NORM = 1e-12  # a zero row is divided by this, so it stays zero instead of turning into NaNs


def l2_normalised(x, dtype: DTypeLike | None = np.float32) -> np.ndarray:
    """The rows of ``x`` scaled to unit length (zero rows stay zero), C-contiguous, as ``dtype``: float32 (what an
    index holds) by default, the input's own precision with ``None``."""
    x = np.ascontiguousarray(x, dtype=dtype)
    return np.ascontiguousarray(x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), MIN_NORM), dtype=dtype)
