"""The sentence-transformers modules after pooling (Dense, Normalize), and how a new head is put on them.

Every step that fits a new head (shrink's PCA or truncation, sweep, distill's
projection) fits it on the unit vectors cosine similarity sees: the source's
post modules with its Normalize layers dropped and one Normalize added
(:func:`renormalized`); the head then ends with a Normalize (:func:`with_head`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class DenseLayer:
    """A sentence-transformers Dense module: ``y = act(W x + b)``."""

    weight: Any  # torch.Tensor (out, in)
    bias: Any | None  # torch.Tensor (out,) or None
    activation: str = "torch.nn.modules.linear.Identity"

    @property
    def in_features(self) -> int:
        return int(self.weight.shape[1])

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[0])


@dataclass(frozen=True)
class Normalize:
    """A sentence-transformers Normalize module: L2 normalisation."""


PostModule = DenseLayer | Normalize


def renormalized(post: Sequence[PostModule]) -> list[PostModule]:
    """``post`` without its Normalize layers, then one Normalize: what a new head is fitted on."""
    return [m for m in post if not isinstance(m, Normalize)] + [Normalize()]


def with_head(base: Sequence[PostModule], head: DenseLayer) -> list[PostModule]:
    """``base``, then ``head`` and a Normalize: the post modules of a model with a new head."""
    return [*base, head, Normalize()]


def normalized_output(post: Sequence[PostModule]) -> list[PostModule]:
    """``post``, with a Normalize appended unless it already ends with one (the exported graph's output)."""
    post = list(post)
    if not post or not isinstance(post[-1], Normalize):
        post.append(Normalize())
    return post
