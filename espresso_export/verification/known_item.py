"""Known-item retention: a label-free estimate, on the retention scale, of the retrieval quality a candidate keeps
on a user's own corpus.

Agreement@10 (:mod:`.agreement`) orders candidates as labelled retention does, but its values sit far below
retention (a candidate can keep nearly all of the source's nDCG@10 while sharing little more than half of its top
10: the tail of a top 10 is where models differ most and matters least). A target such as "keep 97%" needs a
score on the retention scale. Known-item search gives one without labels: each query
(:func:`~espresso_export.data.pseudo_queries.known_item_queries`, a title or a sentence cut out of its passage) has
exactly one relevant document, what is left of its passage, which replaces the passage in the index. Both
models search that index; the estimate is the candidate's mean nDCG@10 over the source's, with the same paired
bootstrap interval as the labelled retentions (:func:`espresso_export.core.metrics.ratio_interval`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.metrics import ratio_interval
from espresso_export.core.vectors import l2_normalised
from espresso_export.runtime.precision import CalibrationRanges, search_at

K = 10


def known_item_index(docs: np.ndarray, origins, targets: np.ndarray) -> np.ndarray:
    """The corpus' vectors with each query's passage replaced by its target's vector (the document with the query cut out)."""
    index = np.array(docs, dtype=np.float32, copy=True)
    index[np.asarray(origins, dtype=np.int64)] = targets
    return index


def known_item_ndcg(queries: np.ndarray, index: np.ndarray, origins, *, k: int = K, precision: str = "float32",
                    rescore: int = 0) -> np.ndarray:
    """Per query, nDCG@k of its one relevant document (corpus position ``origins[i]``): 1 / log2(rank + 1) when
    it is in the top ``k``, else 0. The documents are stored at ``precision`` (int8 ranges fitted on them;
    binary searched by Hamming distance, ``rescore`` x ``k`` candidates re-ranked with the float query), the
    queries stay float (:func:`espresso_export.runtime.precision.search_at`)."""
    q, d = l2_normalised(queries), l2_normalised(index)
    if q.shape[1] != d.shape[1]:
        raise ValidationError(f"queries {q.shape} and documents {d.shape} are not of one width")
    ranges = CalibrationRanges.fit(d) if precision in ("int8", "uint8") else None
    ranked = search_at(q, d, k, precision=precision, ranges=ranges, rescore_factor=rescore).ranked
    hits = ranked == np.asarray(origins, dtype=np.int64)[:, None]
    found = hits.any(axis=1)
    rank = hits.argmax(axis=1)
    return np.where(found, 1.0 / np.log2(rank + 2.0), 0.0)


@dataclass(frozen=True)
class KnownItem:
    """A candidate's known-item nDCG@10 beside its source's, per query."""

    candidate: np.ndarray = field(repr=False)
    source: np.ndarray = field(repr=False)

    @property
    def retention(self) -> float:
        s = float(np.mean(self.source))
        return float(np.mean(self.candidate)) / s if s > 0 else float("nan")

    def interval(self) -> tuple[float, float] | None:
        return ratio_interval(self.candidate, self.source)

    def to_dict(self) -> dict:
        iv = self.interval()
        return {"retention": round(self.retention, 4), "ci95": None if iv is None else [round(v, 4) for v in iv],
                "candidate_ndcg_at_10": round(float(np.mean(self.candidate)), 4),
                "source_ndcg_at_10": round(float(np.mean(self.source)), 4), "queries": int(len(self.source))}


def known_item(source: tuple[np.ndarray, np.ndarray, np.ndarray], candidate: tuple[np.ndarray, np.ndarray, np.ndarray],
               origins, *, precision: str = "float32", rescore: int = 0) -> KnownItem:
    """``source`` and ``candidate``: each model's (query, corpus, known-item target) vectors; the candidate's documents
    stored at ``precision``, the source's at float32 (the reference)."""
    q, d, t = candidate
    found = known_item_ndcg(q, known_item_index(d, origins, t), origins, precision=precision, rescore=rescore)
    q, d, t = source
    return KnownItem(found, known_item_ndcg(q, known_item_index(d, origins, t), origins))
