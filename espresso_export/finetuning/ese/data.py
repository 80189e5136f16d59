"""ESE's training examples (scored pairs, pairs or triplets) and the batches of texts cut from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from espresso_export.core.errors import ValidationError
from espresso_export.finetuning.ese.config import EseObjectiveSettings, SentenceLoss
from espresso_export.finetuning.ese.losses import PairEmbeddings


@dataclass
class EseBatch:
    """Texts of one training batch (what :meth:`EseData.collate` returns)."""

    anchor: list[str]
    positive: list[str]
    negative: list[str] | None = None
    scores: list[float] | None = None
    is_positive: list[bool] | None = None

    def __len__(self) -> int:
        return len(self.anchor)

    @property
    def texts(self) -> list[str]:
        """All texts in the order of one forward pass: anchors, positives, negatives."""
        return self.anchor + self.positive + (self.negative or [])

    def exclude_mask(self, device=None) -> torch.Tensor:
        """``(B, C)``: candidate ``j`` is a copy of row ``i``'s positive (but not the positive itself)."""
        candidates = self.positive + (self.negative or [])
        return torch.tensor([[c == p and j != i for j, c in enumerate(candidates)] for i, p in enumerate(self.positive)],
                            dtype=torch.bool, device=device)

    def split(self, x: torch.Tensor) -> PairEmbeddings:
        """Cut the ``(len(texts), d)`` output of one forward pass back into anchors, positives, negatives."""
        b = len(self.anchor)
        dev = x.device
        return PairEmbeddings(
            anchor=x[:b], positive=x[b : 2 * b], negative=x[2 * b : 3 * b] if self.negative else None,
            scores=None if self.scores is None else torch.tensor(self.scores, dtype=x.dtype, device=dev),
            is_positive=None if self.is_positive is None else torch.tensor(self.is_positive, dtype=torch.bool, device=dev),
            exclude=self.exclude_mask(dev),
        )


class EseData:
    """Training examples for :class:`EseObjective`, from scored pairs or (anchor, positive[, negative]) pairs.

    Index it and :meth:`collate` a list of examples into an :class:`EseBatch`.
    For scored pairs, a pair counts as a positive for in-batch negatives when
    its score is at least ``positive_threshold`` (default: 80% of the way from
    the lowest to the highest score in the file, i.e. 4.0 on STS-B's 0-5 scale).
    """

    def __init__(self, source, *, positive_threshold: float | None = None):
        from espresso_export.data import StsPairs, TextPairs

        self.name = source.name
        if isinstance(source, StsPairs):
            self.anchor, self.positive, self.negative = list(source.sentence1), list(source.sentence2), None
            self.scores: list[float] | None = list(source.scores)
            lo, hi = min(self.scores), max(self.scores)
            self.positive_threshold = positive_threshold if positive_threshold is not None else lo + 0.8 * (hi - lo)
            self.kind = "scored"
        elif isinstance(source, TextPairs):
            self.anchor, self.positive = list(source.anchor), list(source.positive)
            self.negative = None if source.negative is None else list(source.negative)
            self.scores = None
            self.positive_threshold = None
            self.kind = "triplets" if self.negative is not None else "pairs"
        else:
            raise TypeError(f"EseData needs StsPairs or TextPairs, got {type(source).__name__}")

    @classmethod
    def read(cls, path, *, limit: int | None = None, positive_threshold: float | None = None) -> EseData:
        from espresso_export.data import read_training_data

        return cls(read_training_data(path, limit=limit), positive_threshold=positive_threshold)

    def __len__(self) -> int:
        return len(self.anchor)

    def __getitem__(self, i: int) -> tuple:
        return (self.anchor[i], self.positive[i], None if self.negative is None else self.negative[i],
                None if self.scores is None else self.scores[i])

    def collate(self, items: Sequence[tuple]) -> EseBatch:
        anchor = [it[0] for it in items]
        positive = [it[1] for it in items]
        negative = [it[2] for it in items] if self.negative is not None else None
        if self.scores is None:
            return EseBatch(anchor, positive, negative, None, None)
        scores = [float(it[3]) for it in items]
        return EseBatch(anchor, positive, None, scores, [s >= self.positive_threshold for s in scores])

    def describe(self) -> dict:
        d = {"name": self.name, "kind": self.kind, "examples": len(self)}
        if self.positive_threshold is not None:
            d["positive_threshold"] = self.positive_threshold
        return d


def check_loss_fits(config: EseObjectiveSettings, data: EseData) -> None:
    """Refuse combinations that cannot train (before any model work)."""
    if SentenceLoss(config.loss) is SentenceLoss.COSENT and data.kind == "pairs":
        raise ValidationError("--loss cosent needs scored pairs or triplets; these are plain positive pairs "
                              "(use --loss infonce or angle)")
    if SentenceLoss(config.loss) is not SentenceLoss.COSENT and data.kind == "scored":
        n_pos = sum(s >= data.positive_threshold for s in data.scores or [])
        if n_pos == 0:
            raise ValidationError(f"no pair scores >= {data.positive_threshold:g}, so in-batch negatives have no "
                                  "positives; lower the positive threshold or use --loss cosent")
