"""Small, dependency-free metrics."""

from __future__ import annotations

import numpy as np

from espresso_export.core.vectors import l2_normalised


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks starting at 1, ties get their average rank (as scipy's default, by the same sort-based method)."""
    x = np.asarray(x, dtype=np.float64)
    return _row_ranks(x[None, :])[0] if len(x) else np.empty(0, dtype=np.float64)


def spearman(a, b) -> float:
    return spearman_of_ranks(rankdata(np.asarray(a)), rankdata(np.asarray(b)))


def spearman_of_ranks(ra: np.ndarray, rb: np.ndarray) -> float:
    """Pearson correlation of two rank vectors (Spearman's rho when they are :func:`rankdata` ranks)."""
    return float(_row_correlations(np.asarray(ra)[None, :], np.asarray(rb)[None, :])[0])


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two equally shaped matrices."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(na * nb, 1e-12)


def spearman_ratio_interval(candidate, source, gold, *, level: float = 0.95, resamples: int = 2000,
                            seed: int = 0) -> tuple[float, float] | None:
    """Percentile interval of ``spearman(candidate, gold) / spearman(source, gold)`` by the paired bootstrap
    over pairs (each resample keeps a pair's gold score and both models' cosines together), as
    :func:`ratio_interval` for means. None with fewer than 3 pairs or no resample with a positive source
    correlation. Seeded."""
    c, s, g = (np.asarray(v, dtype=np.float64) for v in (candidate, source, gold))
    if not c.shape == s.shape == g.shape or c.ndim != 1 or len(c) < 3:
        return None
    rng = np.random.default_rng(seed)
    ratios = []
    rows = max(1, _BOOTSTRAP_CELLS // len(c))  # resamples ranked at once: memory bounded, whatever the pairs
    for done in range(0, resamples, rows):
        idx = rng.integers(0, len(c), size=(min(rows, resamples - done), len(c)))  # as drawn one by one
        rg = _row_ranks(g[idx])
        den = _row_correlations(_row_ranks(s[idx]), rg)
        num = _row_correlations(_row_ranks(c[idx]), rg)
        ratios.extend((num[den > 0] / den[den > 0]).tolist())
    return _percentile_interval(ratios, level)


_BOOTSTRAP_CELLS = 200_000  # float64 cells per block of resamples: 1.6 MB an array


def _row_ranks(x: np.ndarray) -> np.ndarray:
    """:func:`rankdata` of each row of a 2-d array, all rows at once: each place's rank is the mean of the first
    and last 1-based places of its run of equal values in the sorted row."""
    n = x.shape[1]
    order = np.argsort(x, axis=1, kind="mergesort")
    ordered = np.take_along_axis(x, order, axis=1)
    place = np.broadcast_to(np.arange(n), x.shape)
    new_run = np.ones(x.shape, dtype=bool)
    new_run[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    run_ends = np.ones(x.shape, dtype=bool)
    run_ends[:, :-1] = new_run[:, 1:]
    first = np.maximum.accumulate(np.where(new_run, place, 0), axis=1)  # each place's run: its first place
    last = np.minimum.accumulate(np.where(run_ends, place, n - 1)[:, ::-1], axis=1)[:, ::-1]  # and its last
    ranks = np.empty(x.shape, dtype=np.float64)
    np.put_along_axis(ranks, order, (first + last) / 2 + 1, axis=1)
    return ranks


def _row_correlations(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row pair (0 where a row is constant)."""
    a, b = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
    denom = np.sqrt((a**2).sum(axis=1) * (b**2).sum(axis=1))
    return np.divide((a * b).sum(axis=1), denom, out=np.zeros(len(a)), where=denom > 0)


def sts_spearman(emb1: np.ndarray, emb2: np.ndarray, gold) -> float:
    """Spearman x100 between the cosine of each pair and the gold score."""
    return 100.0 * spearman(cosine_rows(emb1, emb2), np.asarray(gold, dtype=np.float64))


# --- ranking metrics: hand-written because they are a few lines each and must match BEIR's definitions exactly
# (pytrec_eval's ``ndcg_cut`` and ``recall``) without its C extension; checked against hand-computed examples.

def ndcg_at_k(ranked: list[str], grades: dict[str, float], k: int = 10) -> float:
    """nDCG@k of ``ranked`` (document ids, best first) for one query with graded judgements ``grades``
    (id -> score > 0). Linear gain and a log2 discount, as trec_eval and BEIR: ``DCG = sum rel_i / log2(i + 1)``;
    the ideal DCG ranks the judged documents by grade."""
    dcg = sum(grades.get(doc, 0.0) / np.log2(rank + 1) for rank, doc in enumerate(ranked[:k], 1))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / np.log2(rank + 1) for rank, g in enumerate(ideal, 1))
    return float(dcg / idcg) if idcg > 0 else 0.0


def recall_at_k(ranked: list[str], grades: dict[str, float], k: int) -> float:
    """Share of the relevant documents (grade > 0) found in the first ``k`` of ``ranked``."""
    relevant = {d for d, g in grades.items() if g > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def reciprocal_rank(ranked: list[str], grades: dict[str, float], k: int = 10) -> float:
    """1 / rank of the first relevant document in the first ``k`` (0 when none is)."""
    return next((1.0 / rank for rank, doc in enumerate(ranked[:k], 1) if grades.get(doc, 0.0) > 0), 0.0)


def top_k_by_cosine(queries: np.ndarray, docs: np.ndarray, k: int) -> np.ndarray:
    """Exact top-``k`` document positions per query by cosine similarity, best first (numpy, no index)."""
    q, d = (l2_normalised(x, dtype=None).astype(np.float32) for x in (queries, docs))  # unit at the input's precision
    scores = q @ d.T
    k = min(k, scores.shape[1])
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1)


RANKING_SCORES = ("mrr_at_10", "recall_at_10", "ndcg_at_10", "recall_at_100")


def per_query_ranking_scores(rankings: list[list[str]], judgements: list[dict[str, float]]) -> np.ndarray:
    """``(queries, 4)``: each query's MRR@10, recall@10, nDCG@10 and recall@100 (columns as ``RANKING_SCORES``)."""
    rows = [(reciprocal_rank(r, g, 10), recall_at_k(r, g, 10), ndcg_at_k(r, g, 10), recall_at_k(r, g, 100))
            for r, g in zip(rankings, judgements)]
    return np.asarray(rows, dtype=np.float64).reshape(-1, len(RANKING_SCORES))


def ranking_scores(rankings: list[list[str]], judgements: list[dict[str, float]]) -> dict[str, float]:
    """Means over queries of MRR@10, recall@10, nDCG@10 and recall@100 (``rankings[i]``: the ids retrieved for
    query i, best first; ``judgements[i]``: its graded relevant ids)."""
    return scores_of(per_query_ranking_scores(rankings, judgements))


def scores_of(per_query: np.ndarray) -> dict[str, float]:
    """The means over queries of :func:`per_query_ranking_scores`' columns, by name."""
    means = per_query.mean(axis=0) if len(per_query) else np.zeros(len(RANKING_SCORES))
    return dict(zip(RANKING_SCORES, map(float, means)))


def ratio_interval(candidate, source, *, level: float = 0.95, resamples: int = 2000,
                   seed: int = 0) -> tuple[float, float] | None:
    """Percentile interval of ``mean(candidate) / mean(source)`` by the paired bootstrap over items.

    ``candidate[i]`` and ``source[i]`` are one item's scores (a query's nDCG@10) under the two models; a
    resample draws items with replacement and keeps each item's pair together, so what the interval shows is
    how much the retention depends on which items the set happens to hold (40 queries: a lot). Resamples whose
    source mean is 0 are skipped; None when fewer than two items or no usable resample. Seeded: the same
    scores give the same interval. Hand-written: numpy is all it needs (scipy.stats.bootstrap would add scipy
    as a dependency of verify for one function).
    """
    c, s = np.asarray(candidate, dtype=np.float64), np.asarray(source, dtype=np.float64)
    if c.shape != s.shape or c.ndim != 1 or len(c) < 2:
        return None
    rng = np.random.default_rng(seed)
    ratios = []
    chunk = max(1, 2_000_000 // len(c))  # resamples drawn at once: bounded memory for large sets
    for start in range(0, resamples, chunk):
        idx = rng.integers(0, len(c), size=(min(chunk, resamples - start), len(c)))
        num, den = c[idx].sum(axis=1), s[idx].sum(axis=1)
        ratios.append(num[den > 0] / den[den > 0])
    return _percentile_interval(np.concatenate(ratios), level)


def _percentile_interval(values, level: float) -> tuple[float, float] | None:
    """The central ``level`` share of the bootstrap ``values`` (None when there are none)."""
    if not len(values):
        return None
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)
