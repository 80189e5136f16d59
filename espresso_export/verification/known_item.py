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

A stored form (int8, binary) of a candidate is scored as its float32 search times how closely the stored search
follows that float32 search (:func:`stored_ndcg`), query by query, never on its own known-item hits: a binary
index re-ranks cut-out fragments differently from a float one, and on that task alone it can out-score its own
float vectors (and the source) while it loses on labelled queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.evidence import MIN_ITEMS
from espresso_export.core.metrics import ratio_interval
from espresso_export.core.vectors import l2_normalised
from espresso_export.runtime.precision import CalibrationRanges, search_at

K = 10


def known_item_index(docs: np.ndarray, origins, targets: np.ndarray) -> np.ndarray:
    """The corpus' vectors with each query's passage replaced by its target's vector (the document with the query cut out)."""
    index = np.array(docs, dtype=np.float32, copy=True)
    index[np.asarray(origins, dtype=np.int64)] = targets
    return index


def stored_ndcg(queries: np.ndarray, index: np.ndarray, origins, *, k: int = K, precision: str = "float32",
                rescore: int = 0) -> np.ndarray:
    """Per query, known-item nDCG@k with the documents stored at ``precision``: the float32 search's
    (:func:`known_item_ndcg`) times the stored search's :func:`belief_known_item` ratio against the float32 search
    (its belief reaching :data:`BELIEF_DEPTH` deep). A stored form keeps at most what its float vectors find."""
    found = known_item_ndcg(queries, index, origins, k=k)
    return found if precision == "float32" else found * _kept(queries, index, precision, rescore, k)


def _kept(queries: np.ndarray, index: np.ndarray, precision: str, rescore: int, k: int) -> np.ndarray:
    """Per query, how closely the search with the documents stored at ``precision`` follows the float32 search's
    own belief (its :func:`belief_known_item` ratio): what a stored form keeps of its float32 read."""
    kept = followed(source_belief(queries, index), queries, index, precision=precision, rescore=rescore, k=k)
    return np.divide(kept.candidate, kept.source, out=np.zeros(len(kept.source)), where=kept.source > 0)


def _discount(k: int) -> np.ndarray:
    """nDCG's discounts of places 1..k."""
    return 1.0 / np.log2(np.arange(2, k + 2))


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
    stored at ``precision`` (:func:`stored_ndcg`), the source's at float32 (the reference)."""
    q, d, t = candidate
    found = stored_ndcg(q, known_item_index(d, origins, t), origins, precision=precision, rescore=rescore)
    q, d, t = source
    return KnownItem(found, known_item_ndcg(q, known_item_index(d, origins, t), origins))


# The source's belief about which document a query asks for: softmax(scale x cosine) over the documents, the
# distribution sentence-transformers' MultipleNegativesRankingLoss trains a model to put on a query's one
# positive; 20 is that loss's default scale (all-MiniLM-L6-v2 and all-mpnet-base-v2 were trained with it).
BELIEF_SCALE = 20.0
BELIEF_DEPTH = 100  # the source's ranked documents its belief spreads over; below them it is negligible


def belief_known_item(source_top: np.ndarray, source_cosines: np.ndarray, candidate_ranked: np.ndarray, *,
                      k: int = K, scale: float = BELIEF_SCALE) -> KnownItem:
    """Known-item retention where each query's known item is drawn from the source's belief instead of fixed.

    For a query, the source's belief ``p`` is the softmax of ``scale`` x its cosines over its ranked documents
    (``source_top``: positions, best first, as deep as the belief should reach; ``source_cosines``: theirs).
    A model's score is the expected nDCG@k of that drawn item in its own top ``k`` (``candidate_ranked``),
    ``sum(p(d) / log2(rank + 1))``: the source's is its top ``k``'s, the most any ranking can score. The
    retention is the candidate's mean over the source's, with the paired bootstrap interval. It needs no
    document cut and no label, so it runs on real queries: a candidate keeps it by finding what the source is
    sure of, and loses little by swapping documents the source finds alike."""
    top, cos = np.asarray(source_top), np.asarray(source_cosines, dtype=np.float64)
    ranked = np.asarray(candidate_ranked)[:, :k]
    if top.shape != cos.shape or top.shape[0] != ranked.shape[0] or top.shape[1] < k:
        raise ValidationError(f"source ranking {top.shape}, cosines {cos.shape} and candidate ranking "
                              f"{ranked.shape} do not fit (the source's needs {k}+ places)")
    p = np.exp(scale * (cos - cos[:, :1]))
    p = np.where(top >= 0, p, 0.0)
    p /= np.maximum(p.sum(axis=1, keepdims=True), 1e-300)
    discount = _discount(k)
    source = p[:, :k] @ discount
    candidate = np.zeros(len(ranked))
    for i, (docs, row) in enumerate(zip(top, ranked)):
        weight = dict(zip(docs.tolist(), p[i].tolist()))
        candidate[i] = sum(weight.get(int(d), 0.0) * discount[j] for j, d in enumerate(row) if d >= 0)
    return KnownItem(candidate, source)


def source_belief(queries: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The source's ranked documents (:data:`BELIEF_DEPTH` deep) and their cosines, per query: what
    :func:`belief_known_item` spreads its belief over."""
    q, d = l2_normalised(queries), l2_normalised(index)
    top = search_at(q, d, min(BELIEF_DEPTH, len(d))).ranked
    return top, np.einsum("qw,qkw->qk", q, d[top])


def followed(belief: tuple[np.ndarray, np.ndarray], queries: np.ndarray, index: np.ndarray, *,
             precision: str = "float32", rescore: int = 0, k: int = K) -> KnownItem:
    """How closely the candidate's search (its documents stored at ``precision``) follows the source's
    ``belief`` (:func:`source_belief`) on the same queries: :func:`belief_known_item`."""
    q, d = l2_normalised(queries), l2_normalised(index)
    k = min(k, len(d))  # a corpus of fewer than k documents: all of them
    ranges = CalibrationRanges.fit(d) if precision in ("int8", "uint8") else None
    ranked = search_at(q, d, k, precision=precision, ranges=ranges, rescore_factor=rescore).ranked
    return belief_known_item(*belief, ranked, k=k)


@dataclass(frozen=True)
class DocumentBelief:
    """The source's belief read from the documents' side, for the user's own queries.

    For each document, the softmax of :data:`BELIEF_SCALE` x its cosines over a pool of queries (the user's and
    the known-item ones): which query it answers. A query's gain on a document is that document's belief in it,
    so it does not shrink when many documents answer the query, as the query's own belief (a softmax over the
    documents) does. A candidate that brings in other documents answering the query loses nothing by them, and
    can read above the source. The pool's known-item queries give every document a query of its own to answer,
    so that a document near no user query does not answer the nearest one by default."""

    queries: np.ndarray = field(repr=False)  # the source's unit vectors of the user's queries
    documents: np.ndarray = field(repr=False)  # and of the documents
    log_z: np.ndarray = field(repr=False)  # per document, the log of its softmax's normaliser over the pool
    ideal: np.ndarray = field(repr=False)  # per query, the DCG@k of its k best-answering documents
    scale: float = BELIEF_SCALE
    source: np.ndarray = field(default=None, repr=False)  # per query, the source's own nDCG@k under these gains

    def gains(self, ranked: np.ndarray) -> np.ndarray:
        """Each ranked document's belief in its query (0 where ``ranked`` is -1: fewer documents than places)."""
        ranked = np.asarray(ranked)
        at = np.maximum(ranked, 0)
        cos = np.einsum("qw,qkw->qk", self.queries, self.documents[at]).astype(np.float64)
        return np.exp(self.scale * cos - self.log_z[at]) * (ranked >= 0)

    def ndcg(self, ranked: np.ndarray) -> np.ndarray:
        discount = _discount(np.asarray(ranked).shape[1])
        return np.divide(self.gains(ranked) @ discount, self.ideal, out=np.zeros(len(self.ideal)),
                         where=self.ideal > 0)


# The known-item queries in the documents' pool: at most as many as the search's sample asks by default, so that
# the search and the final check (which asks more over every document) read alike: more pseudo-queries in the pool
# draw each document's belief away from the user's queries, and the read falls with their number.
POOL_KNOWN_ITEMS = 200


def document_belief(queries: np.ndarray, known: np.ndarray | None, documents: np.ndarray, *, k: int = K,
                    scale: float = BELIEF_SCALE, chunk: int = 4096) -> DocumentBelief:
    """:class:`DocumentBelief` of the source's ``queries`` (the user's) over its ``documents``, the pool being
    those queries and the first :data:`POOL_KNOWN_ITEMS` of the ``known``-item ones (drawn at random); chunked
    over the documents, so its memory grows with the documents, not with documents x pool."""
    pool = queries if known is None or not len(known) else np.vstack([queries, known[:POOL_KNOWN_ITEMS]])
    q, p, d = l2_normalised(queries), l2_normalised(pool), l2_normalised(documents)
    k = min(k, len(d))
    log_z = np.empty(len(d))
    best = np.zeros((len(q), 0))
    for start in range(0, len(d), chunk):
        block = d[start:start + chunk].astype(np.float64)
        logits = scale * (block @ p.T.astype(np.float64))
        top = logits.max(axis=1, keepdims=True)
        log_z[start:start + chunk] = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
        gains = np.exp(scale * (q.astype(np.float64) @ block.T) - log_z[None, start:start + chunk])
        best = -np.sort(-np.hstack([best, gains]), axis=1)[:, :k]
    belief = DocumentBelief(q, d, log_z, best @ _discount(k), scale)
    return replace(belief, source=belief.ndcg(search_at(q, d, k).ranked))


def document_followed(belief: DocumentBelief, queries: np.ndarray, index: np.ndarray, *,
                      precision: str = "float32", rescore: int = 0, k: int = K) -> KnownItem:
    """The candidate's nDCG@k under the documents' belief (:class:`DocumentBelief`) over the source's. A stored
    form is read as its float32 search times how closely the stored search follows it, query by query (as
    :func:`stored_ndcg`): a binary index's shortlist would otherwise be credited for documents its float vectors
    rank lower."""
    q, d = l2_normalised(queries), l2_normalised(index)
    k = min(k, len(d))
    got = belief.ndcg(search_at(q, d, k).ranked)
    return KnownItem(got if precision == "float32" else got * _kept(q, d, precision, rescore, k), belief.source)


def higher(a: KnownItem, b: KnownItem | None) -> KnownItem:
    """The read with the higher retention (``a`` on a tie or without ``b``)."""
    return a if b is None or not b.retention > a.retention else b


@dataclass(frozen=True)
class Estimate:
    """The label-free estimate of a candidate's labelled nDCG@10 retention.

    On the known-item queries, the lower of two reads (and the lower of their interval bounds): the known item
    found (:func:`known_item`) and the source's belief followed (:func:`followed`). Each over-reads in its own
    way on some collections (the first where a cut-out fragment rewards a model unlike the source, as halves of
    one-sentence texts do), the lower of the two much less. ``asked``: the belief followed on the user's own
    queries (``--queries``), when given; the estimate is then the higher of it and the known-item read. Both
    under-read, each where the other does not: the known-item read where its cut-out queries are harder than the
    user's, the belief on the user's queries where those have many relevant documents the source ranks alike
    (``benchmarks/README.md#estimate-by-kind``)."""

    found: KnownItem
    follows: KnownItem
    asked: KnownItem | None = None

    @property
    def lower(self) -> KnownItem:
        return self.found if self.found.retention <= self.follows.retention else self.follows

    @property
    def asked_decides(self) -> bool:
        """The belief on the user's queries reads higher, over enough of them to decide anything (a read over a
        few queries the candidate happens to follow would otherwise decide with a narrow interval)."""
        return (self.asked is not None and len(self.asked.source) >= MIN_ITEMS
                and self.asked.retention > self.lower.retention)

    @property
    def retention(self) -> float:
        return self.asked.retention if self.asked_decides else self.lower.retention

    def interval(self) -> tuple[float, float] | None:
        """The deciding read's interval. For the known-item read, the lower of the two reads' bounds, each: the
        interval of the lower of two estimates, as wide as either read is uncertain where it could be the
        lower one."""
        if self.asked_decides:
            return self.asked.interval()
        a, b = self.found.interval(), self.follows.interval()
        if a is None or b is None:
            return None
        return min(a[0], b[0]), min(a[1], b[1])

    def to_dict(self) -> dict:
        iv = self.interval()
        out = {**(self.asked if self.asked_decides else self.lower).to_dict(),
               "ci95": None if iv is None else [round(v, 4) for v in iv],
               "found": round(self.found.retention, 4), "follows": round(self.follows.retention, 4)}
        return out if self.asked is None else {**out, "asked": round(self.asked.retention, 4)}
