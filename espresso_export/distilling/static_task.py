"""Healing a static model on the user's texts: the training task, the corpus's words, the final PCA.

The student is a token table ``T`` (one row per token, float32, at the teacher's width); a text's vector is the
mean of the rows of its tokens, as model2vec encodes (``torch.nn.EmbeddingBag`` in ``mean`` mode). Each step
moves the rows so that the cosine between that mean and the teacher's vector of the text rises (loss ``1 - cos``,
the teacher vectors from the teacher cache). The table is then reduced to ``dim`` by a PCA of the trained
sentence vectors: a mean of rows commutes with an affine map, so ``(T - mu) C^T`` is the same PCA applied to every
text's vector, and one table again.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from espresso_export.training.task import TrainingTask

_WORD = re.compile(r"\w+", re.UNICODE)


class StaticHealTask(TrainingTask):
    """The token table trained so each text's mean of rows points where the teacher's vector does."""

    item_unit = "text"

    def __init__(self, table: np.ndarray, ids: Sequence[np.ndarray], targets: np.ndarray, items: np.ndarray,
                 identity: dict) -> None:
        import torch

        rows = torch.from_numpy(np.array(table, dtype=np.float32))  # host: the engine moves modules() to the device
        self.bag = torch.nn.EmbeddingBag.from_pretrained(rows, freeze=False, mode="mean")
        self.ids, self.targets, self.items, self.identity = ids, targets, np.asarray(items), identity

    def __len__(self) -> int:
        return len(self.items)

    def modules(self) -> dict:
        return {"table": self.bag}

    def config(self) -> dict:
        return self.identity

    def lengths(self) -> list[int]:
        return [len(self.ids[i]) for i in self.items]

    def _means(self, rows: Sequence[int]):
        import torch

        device = self.bag.weight.device
        pieces = [self.ids[r] for r in rows]
        offsets = np.cumsum([0] + [len(p) for p in pieces[:-1]])
        flat = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        return self.bag(torch.from_numpy(flat.astype(np.int64)).to(device),
                        torch.from_numpy(offsets.astype(np.int64)).to(device))

    def loss(self, batch: Sequence[int]):
        import torch

        rows = self.items[np.asarray(batch)]
        target = torch.from_numpy(np.asarray(self.targets[rows], dtype=np.float32)).to(self.bag.weight.device)
        return (1.0 - torch.nn.functional.cosine_similarity(self._means(rows), target, eps=1e-8)).mean()

    def vectors(self, rows: Sequence[int], chunk: int = 4096) -> np.ndarray:
        """The student's (unnormalised) vectors of the texts ``rows``."""
        import torch

        out = []
        with torch.no_grad():
            for i in range(0, len(rows), chunk):
                out.append(self._means(list(rows[i : i + chunk])).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.bag.weight.shape[1]), dtype=np.float32)

    def mean_cosine(self, rows: Sequence[int]) -> float | None:
        """The mean cosine to the teacher over the texts ``rows`` (the held-out check), None for none."""
        if not len(rows):
            return None
        v = self.vectors(rows)
        t = np.asarray(self.targets[np.asarray(rows)], dtype=np.float32)
        cos = (v * t).sum(1) / (np.linalg.norm(v, axis=1) * np.linalg.norm(t, axis=1) + 1e-12)
        return float(cos.mean())

    def table(self) -> np.ndarray:
        return self.bag.weight.detach().cpu().numpy().astype(np.float32)


def corpus_words(texts: Sequence[str], tokenizer, limit: int, *, min_count: int = 2) -> list[str]:
    """The ``limit`` most frequent words of ``texts`` (seen at least ``min_count`` times) that the ``tokenizer``
    (a ``tokenizers.Tokenizer``) has no single token for: split and normalised as it splits and normalises, so
    each becomes one new token of model2vec's vocabulary, not a phrase."""
    if limit <= 0:
        return []
    normalizer, pre = tokenizer.normalizer, tokenizer.pre_tokenizer
    counts: Counter[str] = Counter()
    for text in texts:
        text = normalizer.normalize_str(text) if normalizer is not None else text
        words = [w for w, _ in pre.pre_tokenize_str(text)] if pre is not None else text.split()
        counts.update(w for w in words if _WORD.fullmatch(w))
    vocab = tokenizer.get_vocab()
    found = [w for w, c in counts.most_common() if c >= min_count and w not in vocab]
    return found[:limit]


def reduce_table(table: np.ndarray, sentence_vectors: np.ndarray, dim: int):
    """``(table at dim, PCA)``: the PCA of the trained sentence vectors applied to every row (centred)."""
    from espresso_export.shrinking.heads import fit_pca

    pca = fit_pca(sentence_vectors, dim)
    return pca.transform(table).astype(np.float32), pca
