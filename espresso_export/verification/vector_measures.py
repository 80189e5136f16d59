"""The labelled measurements again with the candidate's vectors in each stored form (``verify --precision``,
``--dims``): nDCG@10 of every retrieval set at every precision and width, and STS at every width (cosines of
the truncated, renormalised vectors). The source stays at float32, its full width: the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from espresso_export.core.formatting import rounded
from espresso_export.core.metrics import (
    RANKING_SCORES,
    ratio_interval,
    scores_of,
    spearman,
    spearman_ratio_interval,
)
from espresso_export.data import RetrievalSet
from espresso_export.verification.embedders import EncodeCache
from espresso_export.verification.gate import interval_list
from espresso_export.verification.retrieval import TOP_K, RetrievalScores
from espresso_export.verification.sts import StsSet, retention, sts_cosines
from espresso_export.verification.vectors import Variant, VectorForms, at_width, unit


@dataclass(frozen=True)
class VariantScores:
    """A labelled retrieval set searched with the candidate's vectors in one form."""

    variant: Variant
    ndcg_at_10: float
    recall_at_100: float
    retention: float | None  # of the source's float32 nDCG@10
    ci95: tuple[float, float] | None
    index_bytes: int

    def to_dict(self) -> dict:
        return {**self.variant.to_dict(), "index_bytes": self.index_bytes, "ndcg_at_10": rounded(self.ndcg_at_10),
                "recall_at_100": rounded(self.recall_at_100), "ndcg_retention": rounded(self.retention),
                "ndcg_retention_ci95": interval_list(self.ci95)}


@dataclass(frozen=True)
class VectorRetrievalRow:
    name: str
    source_ndcg_at_10: float
    results: list[VariantScores]

    def to_dict(self) -> dict:
        return {"name": self.name, "source_ndcg_at_10": rounded(self.source_ndcg_at_10),
                "variants": [r.to_dict() for r in self.results]}


def retrieval_at(cache: EncodeCache, data: RetrievalSet, source: RetrievalScores, forms: VectorForms,
                 wanted: list[Variant]) -> VectorRetrievalRow:
    """``data`` searched with the candidate's vectors in every ``wanted`` form, scored on its judgements."""
    positions = data.evaluated_queries
    sim = cache.embedder.usage.similarity
    queries = unit(cache.encode([data.queries[i] for i in positions], role="query"), sim)
    docs = unit(cache.encode(data.docs, role="document"), sim)
    src = source.column("ndcg_at_10")
    out = []
    for variant in wanted:
        found = forms.search(queries, docs, TOP_K, variant)
        per_query = data.per_query_scores(found.ranked, positions)
        scores = scores_of(per_query)
        ndcg = per_query[:, RANKING_SCORES.index("ndcg_at_10")]
        out.append(VariantScores(variant, scores["ndcg_at_10"], scores["recall_at_100"],
                                 retention(scores["ndcg_at_10"], source.ndcg_at_10),
                                 None if src is None else ratio_interval(ndcg, src), found.index_bytes))
    return VectorRetrievalRow(data.name, source.ndcg_at_10, out)


@dataclass(frozen=True)
class WidthStsRow:
    """An STS set with the candidate's vectors truncated to ``dim`` (renormalised)."""

    name: str
    dim: int
    candidate: float  # Spearman x100
    source: float
    ci95: tuple[float, float] | None

    @property
    def retention(self) -> float | None:
        return retention(self.candidate, self.source)

    def to_dict(self) -> dict:
        return {"name": self.name, "dim": self.dim, "candidate_spearman": rounded(self.candidate),
                "source_spearman": rounded(self.source), "retention": rounded(self.retention),
                "retention_ci95": interval_list(self.ci95)}


def sts_at_widths(caches: dict[str, EncodeCache], sts: StsSet, dims: list[int]) -> list[WidthStsRow]:
    """Spearman x100 of the candidate's truncated vectors' cosines vs gold, beside the source's."""
    from espresso_export.core.metrics import cosine_rows

    gold = np.asarray(sts.pairs.scores, dtype=np.float64)
    src = sts_cosines(caches["source"], sts)
    a = unit(caches["candidate"].encode(sts.pairs.sentence1))
    b = unit(caches["candidate"].encode(sts.pairs.sentence2))
    rows = []
    for dim in dims:
        cand = cosine_rows(at_width(a, dim), at_width(b, dim))
        finite = bool(np.isfinite(cand).all() and np.isfinite(src).all())
        score = 100.0 * spearman(cand, gold) if finite else float("nan")
        source = 100.0 * spearman(src, gold) if np.isfinite(src).all() else float("nan")
        ci = spearman_ratio_interval(cand, src, gold) if finite and source > 0 else None
        rows.append(WidthStsRow(sts.name, dim, score, source, ci))
    return rows
