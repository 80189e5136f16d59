"""Small, dependency-free metrics."""

from __future__ import annotations

import numpy as np


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks starting at 1, ties get their average rank (as scipy's default)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    sorted_x = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a, b) -> float:
    ra, rb = rankdata(np.asarray(a)), rankdata(np.asarray(b))
    ra -= ra.mean()
    rb -= rb.mean()
    denom = np.sqrt((ra**2).sum() * (rb**2).sum())
    return float((ra * rb).sum() / denom) if denom > 0 else 0.0


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two equally shaped matrices."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(na * nb, 1e-12)


def sts_spearman(emb1: np.ndarray, emb2: np.ndarray, gold) -> float:
    """Spearman x100 between the cosine of each pair and the gold score."""
    return 100.0 * spearman(cosine_rows(emb1, emb2), np.asarray(gold, dtype=np.float64))
