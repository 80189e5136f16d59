"""Embedding heads: a fitted PCA or a first-k truncation, as Dense layers.

Both heads become a sentence-transformers ``Dense`` module (identity
activation) followed by ``Normalize``, so a plain ``SentenceTransformer``
yields k-d unit vectors without this package.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from espresso_export.model.checkpoint import DenseLayer
from espresso_export.core.errors import ValidationError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PCAFit:
    mean: np.ndarray  # (d,)
    components: np.ndarray  # (k, d), rows orthonormal
    explained_variance_ratio: np.ndarray  # (k,)
    n_samples: int

    @property
    def dim(self) -> int:
        return int(self.components.shape[0])

    @property
    def explained_variance(self) -> float:
        """Fraction of the total variance the k components keep."""
        return float(self.explained_variance_ratio.sum())

    def transform(self, x: np.ndarray) -> np.ndarray:
        return (np.asarray(x, dtype=np.float64) - self.mean) @ self.components.T

    def as_dense(self) -> DenseLayer:
        """``W x + b`` with ``W = components`` and the mean folded into ``b = -W mean``."""
        import torch

        weight = torch.from_numpy(self.components.astype(np.float32))
        bias = torch.from_numpy((-self.components @ self.mean).astype(np.float32))
        return DenseLayer(weight=weight, bias=bias, activation="torch.nn.modules.linear.Identity")


def fit_pca(x: np.ndarray, k: int) -> PCAFit:
    """Centred PCA of the rows of ``x`` keeping ``k`` components.

    Signs are fixed so that each component's largest-magnitude coordinate is
    positive: the same data always gives the same head.
    """
    x = np.asarray(x, dtype=np.float64)
    n, d = x.shape
    if k < 1 or k > d:
        raise ValidationError(f"PCA dimension must be between 1 and {d} (the embedding width), got {k}")
    if n < k:
        raise ValidationError(f"a PCA to {k} dims needs at least {k} calibration sentences, got {n}")
    if not np.isfinite(x).all():
        raise ValidationError("calibration embeddings contain NaN or Inf")
    mean = x.mean(axis=0)
    centred = x - mean
    if n >= d:  # eigenvectors of the d x d scatter matrix: the SVD's components, cheaper when n >> d
        var, vecs = np.linalg.eigh(centred.T @ centred)
        order = np.argsort(var)[::-1]
        var, vt = np.clip(var[order], 0.0, None), vecs[:, order].T
    else:
        _, s, vt = np.linalg.svd(centred, full_matrices=False)
        var = s**2
    components = vt[:k]
    pivots = np.abs(components).argmax(axis=1)
    signs = np.sign(components[np.arange(k), pivots])
    components = components * signs[:, None]
    ratio = var[:k] / var.sum() if var.sum() > 0 else np.zeros(k)
    fit = PCAFit(mean=mean, components=components, explained_variance_ratio=ratio, n_samples=n)
    log.info("PCA %d -> %d dims on %d samples keeps %.1f%% of the variance", d, k, n, 100 * fit.explained_variance)
    return fit


def truncation(d: int, k: int) -> DenseLayer:
    """The first ``k`` of ``d`` dims as a Dense layer (``[I_k | 0]``, no bias)."""
    import torch

    if k < 1 or k > d:
        raise ValidationError(f"--dim must be between 1 and {d} (the embedding width), got {k}")
    weight = torch.zeros(k, d)
    weight[:, :k] = torch.eye(k)
    return DenseLayer(weight=weight, bias=torch.zeros(k), activation="torch.nn.modules.linear.Identity")
