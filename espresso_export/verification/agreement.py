"""Label-free retrieval agreement: how closely a candidate's search over a corpus follows its source's.

The source's ranking is the reference, so a user's own documents need no relevance labels. Per query:

* agreement@k: the share of the source's top ``k`` that the candidate also ranks in its top ``k``;
* nDCG@k with the source's ranking as graded relevance: the source's first document has gain ``k``, its
  second ``k - 1``, ..., its ``k``-th gain 1, every other document 0; linear gain and log2 discount as BEIR's
  nDCG (:func:`espresso_export.core.metrics.ndcg_at_k`), so the source's own ranking scores 1. Grades from
  ranks, not from the source's cosines: cosines of a top 10 are close together (and on each model's own
  scale), which would make the grades nearly flat and the score little more than the overlap, while rank
  grades reward putting the source's best documents first;
* recall@depth of the source's top ``k``: the share of them the candidate finds in its first ``depth``,
  which is what a re-ranker behind the first-stage search sees.

Means come with a 95% interval by the bootstrap over queries (the STS and retrieval retentions' resampling,
:func:`espresso_export.core.metrics.ratio_interval`). Rankings come from faiss searches in query batches
(:func:`espresso_export.runtime.precision.search`): exact inner product on unit vectors, memory bounded by
the corpus' vectors plus one batch of scores; any precision's search results can be compared the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.metrics import ndcg_at_k, ratio_interval
from espresso_export.runtime.precision import build_index, search

K = 10
DEPTH = 100


def ranked_ids(queries: np.ndarray, docs: np.ndarray, k: int, *, exclude=None) -> np.ndarray:
    """``(queries, k)`` corpus positions by inner product, best first (-1 pads), each query's ``exclude``
    position (its own passage, -1 for none) left out. Exact (faiss ``IndexFlatIP``), queries in batches."""
    q, d = (np.ascontiguousarray(x, dtype=np.float32) for x in (queries, docs))
    if q.ndim != 2 or d.ndim != 2 or q.shape[1] != d.shape[1]:
        raise ValidationError(f"queries {q.shape} and documents {d.shape} are not matrices of one width")
    return search(build_index(d, "float32"), q, k, exclude=exclude)


def query_scores(source_top: np.ndarray, candidate: np.ndarray, *, k: int = K, depth: int = DEPTH) -> np.ndarray:
    """``(queries, 3)``: agreement@k, nDCG@k (source ranks as grades) and recall@depth of each query.

    ``source_top``: the source's ranking, at least ``k`` wide; ``candidate``: the candidate's, at least
    ``depth`` wide (positions best first, -1 for none). A query whose source found nothing scores 0."""
    if source_top.shape[0] != candidate.shape[0]:
        raise ValidationError(f"{source_top.shape[0]} source rankings but {candidate.shape[0]} candidate rankings")
    if source_top.shape[1] < k or candidate.shape[1] < max(k, depth):
        raise ValidationError(f"rankings too short: the source's needs {k} places, the candidate's {max(k, depth)}")
    rows = []
    for ref, got in zip(source_top[:, :k], candidate):
        ref = [int(d) for d in ref if d >= 0]
        if not ref:
            rows.append((0.0, 0.0, 0.0))
            continue
        grades = {doc: float(k - rank) for rank, doc in enumerate(ref)}
        top, deep = set(got[:k].tolist()), set(got[:depth].tolist())
        rows.append((len(top.intersection(ref)) / len(ref), ndcg_at_k([int(d) for d in got[:k]], grades, k),
                     len(deep.intersection(ref)) / len(ref)))
    return np.asarray(rows, dtype=np.float64).reshape(-1, 3)


def mean_interval(values: np.ndarray, *, level: float = 0.95, seed: int = 0) -> tuple[float, float] | None:
    """Bootstrap interval of the mean over queries: :func:`ratio_interval` over a source of ones (a ratio to 1),
    so agreement uses the same resampling, resample count and seed as the retention intervals."""
    v = np.asarray(values, dtype=np.float64)
    return ratio_interval(v, np.ones_like(v), level=level, seed=seed)


@dataclass(frozen=True)
class Agreement:
    """A candidate's agreement with its source over one set of queries."""

    k: int
    depth: int
    per_query: np.ndarray = field(repr=False, compare=False)  # columns as :meth:`names`

    @property
    def queries(self) -> int:
        return int(self.per_query.shape[0])

    def names(self) -> tuple[str, str, str]:
        return f"agreement_at_{self.k}", f"ndcg_at_{self.k}", f"recall_at_{self.depth}"

    def means(self) -> dict[str, float]:
        cols = self.per_query.mean(axis=0) if self.queries else np.zeros(3)
        return dict(zip(self.names(), map(float, cols)))

    def intervals(self) -> dict[str, tuple[float, float] | None]:
        return {name: mean_interval(self.per_query[:, i]) for i, name in enumerate(self.names())}

    def to_dict(self) -> dict:
        means = {n: round(v, 6) for n, v in self.means().items()}
        intervals = {n: None if iv is None else [round(iv[0], 6), round(iv[1], 6)]
                     for n, iv in self.intervals().items()}
        return {**means, "interval_95": intervals, "queries": self.queries, "k": self.k, "depth": self.depth}


def agreement(source_top: np.ndarray, candidate: np.ndarray, *, k: int = K, depth: int = DEPTH) -> Agreement:
    """The candidate's rankings scored against the source's (both: corpus positions, best first)."""
    return Agreement(k, depth, query_scores(np.asarray(source_top), np.asarray(candidate), k=k, depth=depth))


def retrieval_agreement(source_queries: np.ndarray, source_docs: np.ndarray, candidate_queries: np.ndarray,
                        candidate_docs: np.ndarray, *, k: int = K, depth: int = DEPTH, exclude=None,
                        source_top: np.ndarray | None = None) -> Agreement:
    """Search the corpus with both models' vectors (unit length: inner product is cosine) and compare.

    ``exclude[i]``: the corpus position query i came from (a pseudo-query's passage), left out of both
    rankings. ``source_top``: the source's ranking when already searched (reused across candidates)."""
    if source_top is None:
        source_top = ranked_ids(source_queries, source_docs, k, exclude=exclude)
    candidate = ranked_ids(candidate_queries, candidate_docs, max(k, depth), exclude=exclude)
    return agreement(source_top, candidate, k=k, depth=depth)
