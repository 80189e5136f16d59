"""What a sweep point is scored on: STS sets (Spearman x100) or retrieval sets (nDCG@10 x100).

``sweep --metric retrieval --retrieval BEIR_DIR`` ranks, plots and recommends the cuts on nDCG@10 instead of
STS: the score of every point, its retention, the Pareto front and the target all use it. A retrieval set
enters the sweep like an STS set: its texts (the judged queries, then the corpus) join the encoded texts, and
:func:`set_score` scores a point's embedding rows of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from espresso_export.core.metrics import sts_spearman, top_k_by_cosine
from espresso_export.data import RetrievalSet


@dataclass(frozen=True)
class RetrievalTarget:
    """A retrieval set as a sweep scores it."""

    spec: str
    data: RetrievalSet
    kind: str = "retrieval"
    smoke: bool = False

    @property
    def name(self) -> str:
        return self.data.name

    @property
    def queries(self) -> list[str]:
        return [self.data.queries[i] for i in self.data.evaluated_queries]

    def texts(self) -> list[str]:
        return self.queries + list(self.data.docs)

    def info(self) -> dict:
        return {"name": self.name, "spec": self.spec, "kind": self.kind, "queries": len(self.queries),
                "docs": len(self.data.docs), "metric": "nDCG@10 x100", "smoke_set": False}


def load_targets(specs, *, columns, min_score: float, limit: int | None) -> list[RetrievalTarget]:
    from espresso_export.verification.retrieval import load_retrieval

    return [RetrievalTarget(str(spec), load_retrieval(spec, columns=columns, min_score=min_score, limit=limit))
            for spec in specs]


def set_texts(s) -> list[str]:
    """The texts a scored set needs encoded: an STS set's two sentences of every pair, or queries and corpus."""
    return s.texts() if isinstance(s, RetrievalTarget) else s.pairs.sentence1 + s.pairs.sentence2


def set_info(s) -> dict:
    if isinstance(s, RetrievalTarget):
        return s.info()
    return {"name": s.name, "spec": s.spec, "kind": s.kind, "pairs": len(s.pairs), "smoke_set": s.smoke}


def set_score(s, emb: np.ndarray, rows: Callable[[list[str]], np.ndarray]) -> float:
    """The score x100 of embeddings ``emb`` on set ``s`` (``rows``: the rows of given texts in ``emb``)."""
    if isinstance(s, RetrievalTarget):
        ranked = top_k_by_cosine(emb[rows(s.queries)], emb[rows(list(s.data.docs))], 10)
        return 100.0 * s.data.scores(ranked, s.data.evaluated_queries)["ndcg_at_10"]
    return sts_spearman(emb[rows(s.pairs.sentence1)], emb[rows(s.pairs.sentence2)], s.pairs.scores)
