"""ESE's sentence-embedding losses on one batch of pairs: AnglE (CoSENT + in-batch negatives + angle),
CoSENT, InfoNCE. Any width: learn-to-express applies them to first-``k`` slices."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from espresso_export.core.errors import ValidationError
from espresso_export.finetuning.ese.config import DEFAULT_SCALE, AngleWeights, SentenceLoss


# --- similarities of aligned pairs --------------------------------------------------------------------


def cosine_pairs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine of two ``(P, d)`` tensors -> ``(P,)``."""
    return F.cosine_similarity(a, b, dim=-1, eps=1e-8)


def angle_pairs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """AnglE's angle similarity of two ``(P, d)`` tensors -> ``(P,)``, as its released code computes it.

    Each embedding is a complex vector (first half real, second half imaginary); the score is
    ``|Re rho + Im rho|`` of their normalised complex quotient. ``d`` must be even.
    """
    if a.shape[-1] % 2:
        raise ValidationError(f"the angle loss needs an even embedding width, got {a.shape[-1]}")
    a_re, a_im = a.chunk(2, dim=-1)
    b_re, b_im = b.chunk(2, dim=-1)
    re = (a_re * b_re + a_im * b_im).sum(-1)
    im = (a_im * b_re - a_re * b_im).sum(-1)
    norm = a.norm(dim=-1) * b.norm(dim=-1)
    return ((re + im) / norm.clamp(min=1e-12)).abs()


# --- sentence losses ----------------------------------------------------------------------------------


def ranking_loss(sim: torch.Tensor, scores: torch.Tensor, scale: float = DEFAULT_SCALE) -> torch.Tensor:
    """CoSENT ranking: ``log(1 + sum_{s_i > s_j} exp(scale * (sim_j - sim_i)))``.

    Every pair of pairs whose gold scores are ordered contributes when the
    similarities are in the wrong order; ties in the scores contribute nothing.
    """
    diff = scale * (sim[None, :] - sim[:, None])  # [i, j] = scale * (sim_j - sim_i)
    ordered = scores[:, None] > scores[None, :]
    diff = diff.masked_fill(~ordered, float("-inf"))
    zero = torch.zeros(1, dtype=sim.dtype, device=sim.device)
    return torch.logsumexp(torch.cat([zero, diff.flatten()]), dim=0)


def cosent_loss(a, b, scores, scale: float = DEFAULT_SCALE) -> torch.Tensor:
    return ranking_loss(cosine_pairs(a, b), scores, scale)


def angle_term(a, b, scores, scale: float = DEFAULT_SCALE) -> torch.Tensor:
    return ranking_loss(angle_pairs(a, b), scores, scale)


def infonce_loss(
    anchor: torch.Tensor,
    positive: torch.Tensor,
    negative: torch.Tensor | None = None,
    *,
    scale: float = DEFAULT_SCALE,
    rows: torch.Tensor | None = None,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    """In-batch negatives: anchor ``i`` must pick ``positive[i]`` among every positive (and negative) of the batch.

    ``rows`` (bool ``(B,)``) selects the anchors that take part (pairs that are
    positives); ``exclude`` (bool ``(B, C)``) drops candidates that are copies
    of the row's own positive (the same sentence twice in a batch is not a negative).
    Cross-entropy of ``scale * cos`` logits, averaged over the rows taken.
    """
    candidates = positive if negative is None else torch.cat([positive, negative], dim=0)
    logits = scale * (F.normalize(anchor, dim=-1) @ F.normalize(candidates, dim=-1).T)
    if exclude is not None:
        logits = logits.masked_fill(exclude, float("-inf"))
    target = torch.arange(anchor.shape[0], device=anchor.device)
    if rows is not None:
        if not bool(rows.any()):
            return logits.sum() * 0.0  # no positive pair in this batch: no signal, keep the graph
        logits, target = logits[rows], target[rows]
    return F.cross_entropy(logits, target)


@dataclass
class PairEmbeddings:
    """Embeddings of one batch: anchors, their positives, optional hard negatives, and the supervision.

    ``scores``: gold similarity of (anchor, positive) for scored pairs, else None.
    ``is_positive``: which (anchor, positive) pairs count as positives for in-batch negatives.
    ``exclude``: ``(B, C)`` candidates to drop from row ``i``'s in-batch negatives.
    """

    anchor: torch.Tensor
    positive: torch.Tensor
    negative: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    is_positive: torch.Tensor | None = None
    exclude: torch.Tensor | None = None

    def first(self, k: int) -> PairEmbeddings:
        """The same batch with every embedding cut to its first ``k`` dims."""
        return PairEmbeddings(
            self.anchor[:, :k], self.positive[:, :k], None if self.negative is None else self.negative[:, :k],
            self.scores, self.is_positive, self.exclude,
        )

    def ranked_pairs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """``(left, right, scores)`` for the ranking terms, or None when the batch has no order to learn.

        Scored pairs rank by their score; triplets rank (anchor, positive) = 1
        above (anchor, negative) = 0; plain positive pairs have no order.
        """
        if self.scores is not None:
            return self.anchor, self.positive, self.scores
        if self.negative is not None:
            b = self.anchor.shape[0]
            scores = torch.cat([self.anchor.new_ones(b), self.anchor.new_zeros(b)])
            return torch.cat([self.anchor, self.anchor]), torch.cat([self.positive, self.negative]), scores
        return None


def sentence_loss(kind: SentenceLoss, emb: PairEmbeddings, weights: AngleWeights = AngleWeights()) -> torch.Tensor:
    """One sentence-embedding loss on one batch (any width)."""
    kind = SentenceLoss(kind)
    ranked = emb.ranked_pairs()

    def contrastive(scale: float) -> torch.Tensor:
        return infonce_loss(emb.anchor, emb.positive, emb.negative, scale=scale, rows=emb.is_positive,
                            exclude=emb.exclude)

    if kind is SentenceLoss.INFONCE:
        return contrastive(weights.ibn_scale)
    if kind is SentenceLoss.COSENT:
        if ranked is None:
            raise ValidationError("--loss cosent needs scored pairs or triplets; plain positive pairs have no ranking")
        return cosent_loss(*ranked, scale=weights.cosine_scale)
    total = emb.anchor.new_zeros(())
    if ranked is not None and weights.cosine:
        total = total + weights.cosine * cosent_loss(*ranked, scale=weights.cosine_scale)
    if weights.ibn:
        total = total + weights.ibn * contrastive(weights.ibn_scale)
    if ranked is not None and weights.angle:
        total = total + weights.angle * angle_term(*ranked, scale=weights.angle_scale)
    return total
