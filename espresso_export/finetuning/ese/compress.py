"""Learn-to-compress: the PCA target of a batch and the alignment of a first-``k`` slice to it."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from espresso_export.core.errors import ValidationError


@torch.no_grad()
def pca_target(x: torch.Tensor, k: int, *, align_to: torch.Tensor | None = None) -> torch.Tensor:
    """The compressed target ``X^k_pca`` of a batch of full embeddings ``x`` (``(B, d)`` -> ``(B, k)``), no gradient.

    Built from the whole batch ``M``, as the authors' released code does: ``A = softmax(M^T M / sqrt(d))``,
    ``A_k = U[:, :k] S[:k, :k]`` from its exact SVD, and the target ``M A_k``; one basis per batch makes target
    coordinate ``j`` the same direction for every sentence, which first-k slicing needs. With ``align_to`` (the
    slice it supervises) each component's sign agrees with it, so coordinates do not flip between steps.
    """
    d = x.shape[-1]
    if not 1 <= k <= d:
        raise ValidationError(f"--compression-dim must be between 1 and {d} (the embedding width), got {k}")
    with torch.autocast(device_type=x.device.type, enabled=False):  # SVD needs float32 even under mixed precision
        x = x.detach().float()
        dep = torch.softmax((x.T @ x) / math.sqrt(d), dim=-1)
        u, s, _ = torch.linalg.svd(dep, full_matrices=False)
        target = x @ (u[:, :k] * s[:k])
        if align_to is not None:
            agree = (target * align_to.detach().float()[:, :k]).sum(0)
            target = target * torch.where(agree < 0, -1.0, 1.0).to(target)
    return target


def align_loss(x: torch.Tensor, target: torch.Tensor, *, temperature: float = 1.0) -> torch.Tensor:
    """``MSE(x, target) + KL(softmax(target / T) || softmax(x / T)) * T^2``; ``target`` must be constant.

    MSE is the mean over elements; KL is summed over the k dims and averaged
    over the batch (``batchmean``); ``T^2`` keeps gradients comparable across
    temperatures (at the default ``T = 1`` it is 1).
    """
    if target.requires_grad:
        raise ValueError("align_loss: the target must be detached (no gradient through the PCA target)")
    mse = F.mse_loss(x, target)
    kl = F.kl_div(F.log_softmax(x / temperature, dim=-1), F.log_softmax(target / temperature, dim=-1),
                  reduction="batchmean", log_target=True)
    return mse + kl * temperature**2


def compress_loss(x: torch.Tensor, k: int, *, temperature: float = 1.0) -> torch.Tensor:
    """``align(X^k, X^k_pca)`` for one layer's batch of full embeddings ``x``."""
    return align_loss(x[:, :k], pca_target(x, k, align_to=x), temperature=temperature)
