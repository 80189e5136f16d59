"""Label-free retrieval agreement: each metric against an example counted by hand, rankings from vectors, the
excluded passage, intervals, and a corpus searched in batches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from espresso_export.core.errors import ValidationError
from espresso_export.core.metrics import ratio_interval, top_k_by_cosine
from espresso_export.verification.agreement import (
    agreement, mean_interval, query_scores, ranked_ids, retrieval_agreement,
)

pytest.importorskip("faiss")


def unit(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_each_metric_by_hand():
    # the source ranks 0 then 1 (grades 2 and 1 at k = 2); the candidate ranks 1, 3, then 0
    scores = query_scores(np.array([[0, 1]]), np.array([[1, 3, 0]]), k=2, depth=3)
    agreement_at_2, ndcg, recall_at_3 = scores[0]
    assert agreement_at_2 == 0.5  # of {0, 1}, only 1 is in the candidate's top 2
    # DCG: doc 1 (grade 1) at rank 1 -> 1 / log2(2) = 1; doc 3 has no grade. Ideal: 2 / log2(2) + 1 / log2(3)
    assert ndcg == pytest.approx(1 / (2 + 1 / math.log2(3)))
    assert recall_at_3 == 1.0  # both of the source's top 2 are in the candidate's first 3


def test_swapped_and_missing_by_hand():
    source = np.array([[4, 5, 6], [7, 8, 9]])
    candidate = np.array([[5, 4, 6, 0], [1, 2, 3, 9]])
    scores = query_scores(source, candidate, k=3, depth=4)
    # query 0: the same three documents, the first two swapped: grades 3, 2, 1 at ranks 2, 1, 3
    ideal = 3 + 2 / math.log2(3) + 1 / 2
    assert scores[0].tolist() == pytest.approx([1.0, (2 + 3 / math.log2(3) + 1 / 2) / ideal, 1.0])
    # query 1: none in the top 3; 9 (grade 1) only at rank 4, inside the depth
    assert scores[1].tolist() == pytest.approx([0.0, 0.0, 1 / 3])
    result = agreement(source, candidate, k=3, depth=4)
    assert result.means()["agreement_at_3"] == 0.5
    assert result.to_dict()["recall_at_4"] == pytest.approx((1 + 1 / 3) / 2, abs=1e-6)


def test_identical_rankings_score_one_and_short_source_lists_count_what_exists():
    ranked = np.array([[3, 1, 2, 0], [2, 0, -1, -1]])
    assert (query_scores(ranked, ranked, k=2, depth=4) == 1.0).all()
    # a source that found one document (a corpus of one): its one document decides
    assert query_scores(np.array([[0, -1]]), np.array([[0, -1, -1]]), k=2, depth=3).tolist() == [[1.0, 1.0, 1.0]]
    assert query_scores(np.array([[-1, -1]]), np.array([[0, -1, -1]]), k=2, depth=3).tolist() == [[0.0, 0.0, 0.0]]


def test_rankings_from_vectors_by_hand():
    # documents on the unit circle at 0, 30, 60, 90 degrees; the query at 10 degrees
    angles = np.radians([0, 30, 60, 90])
    docs = unit(np.stack([np.cos(angles), np.sin(angles)], axis=1))
    query = unit([[np.cos(np.radians(10)), np.sin(np.radians(10))]])
    assert ranked_ids(query, docs, 4).tolist() == [[0, 1, 2, 3]]
    # the candidate sees the documents mirrored (90 - angle): it ranks 3, 2, 1, 0
    mirrored = docs[:, ::-1].copy()
    result = retrieval_agreement(query, docs, query, mirrored, k=2, depth=3)
    # source top 2: {0, 1}; candidate: 3, 2, 1: none in the top 2, doc 1 third
    assert result.per_query.tolist() == [[0.0, 0.0, 0.5]]


def test_the_origin_passage_is_left_out_of_both_rankings():
    rng = np.random.default_rng(1)
    docs = unit(rng.normal(size=(50, 8)))
    noisy = unit(docs + 0.05 * rng.normal(size=docs.shape))
    exclude = np.arange(10)
    top = ranked_ids(docs[:10], docs, 10, exclude=exclude)
    assert not (top == exclude[:, None]).any() and (top >= 0).all()
    result = retrieval_agreement(docs[:10], docs, noisy[:10], noisy, k=10, depth=20, exclude=exclude)
    # without the exclusion both would find the passage itself first: a free match in every query
    kept = retrieval_agreement(docs[:10], docs, noisy[:10], noisy, k=10, depth=20)
    assert result.queries == kept.queries == 10
    assert kept.per_query[:, 0].min() >= 0.1


def test_source_rankings_are_reused_and_checked():
    rng = np.random.default_rng(2)
    docs, queries = unit(rng.normal(size=(40, 6))), unit(rng.normal(size=(5, 6)))
    top = ranked_ids(queries, docs, 10)
    assert np.array_equal(top, top_k_by_cosine(queries, docs, 10))
    same = retrieval_agreement(queries, docs, queries, docs, k=10, depth=30, source_top=top)
    assert same.means() == {"agreement_at_10": 1.0, "ndcg_at_10": 1.0, "recall_at_30": 1.0}
    with pytest.raises(ValidationError, match="too short"):
        agreement(top[:, :5], top, k=10, depth=30)
    with pytest.raises(ValidationError, match="2 source rankings but 5"):
        agreement(top[:2], np.zeros((5, 30), dtype=int), k=10, depth=30)
    with pytest.raises(ValidationError, match="one width"):
        ranked_ids(queries[:, :4], docs, 10)


def test_intervals_are_the_retention_bootstrap_of_the_mean():
    values = np.array([1.0, 0.5, 0.0, 0.8, 0.9, 0.6])
    low, high = mean_interval(values)
    assert low <= values.mean() <= high
    assert (low, high) == ratio_interval(values, np.ones(6))
    assert mean_interval(values[:1]) is None
    one = agreement(np.array([[0, 1]]), np.array([[0, 1, 2]]), k=2, depth=3)
    assert one.to_dict()["interval_95"]["agreement_at_2"] is None


def test_a_large_corpus_is_searched_in_bounded_batches():
    rng = np.random.default_rng(4)
    docs = unit(rng.normal(size=(20_000, 16)))
    queries = unit(docs[:1500] + 0.2 * rng.normal(size=(1500, 16)).astype(np.float32))
    top = ranked_ids(queries, docs, 100)  # two batches of queries
    assert top.shape == (1500, 100)
    assert np.array_equal(top[:, :10], top_k_by_cosine(queries, docs, 10))
