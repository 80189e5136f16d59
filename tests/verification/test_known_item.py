"""Known-item retention (verification/known_item.py): nDCG by hand, the retention, the known-item index, and verify's
report of it for a corpus."""

from __future__ import annotations

import numpy as np
import pytest

from espresso_export.verification.known_item import (
    Estimate,
    KnownItem,
    belief_known_item,
    document_belief,
    document_followed,
    followed,
    higher,
    known_item,
    known_item_index,
    known_item_ndcg,
    source_belief,
    stored_ndcg,
)


def _basis(n: int, width: int = 8) -> np.ndarray:
    return np.eye(width, dtype=np.float32)[:n]


def test_known_item_ndcg_by_hand():
    docs = _basis(4)
    # query 0 points at doc 0 (rank 1); query 1 leans to doc 2 first, its own doc 1 second; query 2's doc 3 unseen
    queries = np.array([[1, 0, 0, 0, 0, 0, 0, 0], [0, 0.6, 0.8, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0, 0, 0]],
                       dtype=np.float32)
    got = known_item_ndcg(queries, docs, [0, 1, 3], k=2)
    assert got[0] == pytest.approx(1.0)
    assert got[1] == pytest.approx(1 / np.log2(3))  # second place: 1 / log2(2 + 1)
    assert got[2] == 0.0  # not in the top 2


def test_retention_is_candidate_over_source():
    docs, origins = _basis(4), [0, 1]
    perfect = (docs[:2].copy(), docs, docs[:2].copy())
    lean = 0.9 * docs[[1, 0]] + 0.1 * docs[[0, 1]]  # each query finds the other's document first, its own second
    swapped = (lean, docs, docs[:2].copy())
    same = known_item(perfect, perfect, origins)
    assert same.retention == pytest.approx(1.0)
    worse = known_item(perfect, swapped, origins)
    assert worse.retention == pytest.approx(1 / np.log2(3))
    assert worse.to_dict()["queries"] == 2


def test_belief_known_item_by_hand():
    """Cosines 0.9, 0.9 - ln2/20, 0.5: the belief is 2/3, 1/3 and e^-8 of the rest. At k=2 the source scores
    2/3 + 1/3 / log2(3); the candidate, which swaps the first two, 1/3 + 2/3 / log2(3)."""
    top = np.array([[0, 1, 2], [3, 4, 5]])
    cos = np.array([[0.9, 0.9 - np.log(2) / 20, 0.5], [0.8, 0.1, 0.0]])
    d = 1 / np.log2(3)
    swapped = belief_known_item(top, cos, np.array([[1, 0, 2], [3, 4, 5]]), k=2)
    p3 = np.exp(-14) / (1 + np.exp(-14) + np.exp(-16))
    assert swapped.candidate[0] == pytest.approx(1 / 3 + 2 / 3 * d, abs=1e-3)
    assert swapped.source[0] == pytest.approx(2 / 3 + 1 / 3 * d, abs=1e-3)
    assert swapped.candidate[1] == swapped.source[1] == pytest.approx(1 / (1 + np.exp(-14) + np.exp(-16)) + p3 * d)
    assert belief_known_item(top, cos, top, k=2).retention == pytest.approx(1.0)
    # a document outside the source's ranking, or none found, gains nothing
    missed = belief_known_item(top, cos, np.array([[7, -1, 8], [9, 9, 9]]), k=2)
    assert missed.retention == 0.0


def test_a_stored_form_keeps_at_most_what_its_float_search_finds():
    """Binary and int8 documents: each query's score is the float32 one times the stored search's belief ratio,
    so never above it; float32 is the plain known-item nDCG."""
    rng = np.random.default_rng(0)
    docs = rng.normal(size=(300, 32)).astype(np.float32)
    queries = docs[:60] + 0.8 * rng.normal(size=(60, 32)).astype(np.float32)
    origins = list(range(60))
    plain = known_item_ndcg(queries, docs, origins)
    assert np.array_equal(stored_ndcg(queries, docs, origins), plain)
    for precision, rescore in (("int8", 0), ("binary", 4), ("binary", 0)):
        got = stored_ndcg(queries, docs, origins, precision=precision, rescore=rescore)
        assert np.all(got <= plain + 1e-12) and got.mean() > 0
    assert stored_ndcg(queries, docs, origins, precision="binary").mean() < plain.mean()


def test_known_item_index_replaces_each_origin_by_its_target():
    docs = _basis(3)
    targets = np.full((1, 8), 0.5, dtype=np.float32)
    index = known_item_index(docs, [2], targets)
    assert np.array_equal(index[:2], docs[:2]) and np.allclose(index[2], 0.5)
    assert docs[2, 2] == 1.0  # the corpus' own vectors are untouched


def test_verify_reports_the_known_item_retention_of_a_corpus(tmp_path, tiny_bert, tiny_cut):
    import json
    import random

    from tiny_models import _WORDS

    from espresso_export import verify

    pytest.importorskip("faiss", reason="corpus searches use faiss")
    rng = random.Random(1)
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"_id": str(i), "title": " ".join(rng.sample(_WORDS, 3)),
                                        "text": " ".join(rng.choice(_WORDS) for _ in range(12))}) + "\n"
                            for i in range(60)), encoding="utf-8")
    report = verify(tiny_cut, tiny_bert, corpus=[str(docs)], sts="builtin", sts_limit=20, batch_sizes="none",
                    corpus_queries=30, retrieval=["builtin"], precision=["float32", "binary"], rescore=4, dims=[8])
    row = report.agreement[0]
    known = row.known_item
    assert known["method"] == "known items by title" and known["queries"] == 30
    assert 0 <= known["retention"] and known["source_ndcg_at_10"] > 0
    assert report.to_dict()["agreement"][0]["known_item"] == known
    assert "known-item retention" in report.to_markdown()
    # per stored form too: the float32 full width is the row's own; the others are measured as stored
    forms = {(r.variant.precision, r.variant.dim, r.variant.rescore): r.known_item for r in row.results}
    full = row.results[0].variant.dim
    assert forms[("float32", full, 0)] == known and set(forms) >= {("binary", 8, 0), ("binary", 8, 4)}
    assert all(k["queries"] == 30 and k["source_ndcg_at_10"] == known["source_ndcg_at_10"] for k in forms.values())

    # auto's final check judges the form it chose: a labelled set and the known-item retention, as stored (the tiny
    # model's 30 queries decide nothing at the default --max-noise: tests/searching/test_undecided.py)
    from espresso_export.searching.final_check import verdict as _verdict
    from espresso_export.searching.scoring import Score

    chosen = Score(8, "binary", 0.0)
    stored = next(v for r in report.to_dict()["vectors"]["retrieval"] for v in r["variants"]
                  if (v["precision"], v["dim"], v["rescore"]) == ("binary", 8, 4))
    lowest = min(stored["ndcg_retention"], forms[("binary", 8, 4)]["retention"])
    assert _verdict(report, lowest - 1e-3, chosen, sts_gated=False, max_noise=10.0)["failed"] == [c.describe() for c in report.failed]
    missed = _verdict(report, stored["ndcg_retention"] + 1e-3, chosen, sts_gated=False, max_noise=10.0)
    assert not missed["passed"] and any("of the vectors as stored (8-d binary, rescored 4x)" in line
                                        for line in missed["failed"])

    # --known-items makes them another way (auto's final check asks for the search's own method)
    halves = verify(tiny_cut, tiny_bert, corpus=[str(docs)], sts="builtin", sts_limit=20, batch_sizes="none",
                    corpus_queries=30, known_items="half")
    assert halves.agreement[0].known_item["method"] == "known items by half"


def test_the_estimate_is_the_lower_of_the_known_item_found_and_the_belief_followed():
    """A candidate that finds the cut-out documents better than the source (a fragment rewarding a model unlike
    it) but follows the source's belief less: the estimate is the lower read, with that read's interval; the
    source itself reads 1 both ways."""
    rng = np.random.default_rng(1)
    docs = rng.normal(size=(200, 16)).astype(np.float32)
    origins = list(range(50))
    source_q = docs[:50] + 1.5 * rng.normal(size=(50, 16)).astype(np.float32)  # finds few of its known items
    cand_q = docs[:50] + 0.3 * rng.normal(size=(50, 16)).astype(np.float32)  # finds most: reads above the source
    found = KnownItem(known_item_ndcg(cand_q, docs, origins), known_item_ndcg(source_q, docs, origins))
    follows = followed(source_belief(source_q, docs), cand_q, docs)
    est = Estimate(found, follows)
    assert found.retention > 1 > follows.retention and est.retention == follows.retention
    (a, b), (c, d) = found.interval(), follows.interval()
    assert est.interval() == (min(a, c), min(b, d)) and est.to_dict()["found"] == round(found.retention, 4)
    same = Estimate(KnownItem(found.source, found.source), followed(source_belief(source_q, docs), source_q, docs))
    assert same.retention == pytest.approx(1.0)


def test_the_belief_on_your_queries_decides_where_it_reads_above_the_known_item_read():
    """With the user's queries, the estimate is the higher of the known-item read and the belief followed on those
    queries, with the deciding read's interval; a belief read below the known-item read changes nothing."""
    rng = np.random.default_rng(2)
    docs = rng.normal(size=(200, 16)).astype(np.float32)
    origins = list(range(50))
    source_q = docs[:50] + 0.5 * rng.normal(size=(50, 16)).astype(np.float32)
    cand_q = docs[:50] + 1.5 * rng.normal(size=(50, 16)).astype(np.float32)  # far from the source: a low read
    found = KnownItem(known_item_ndcg(cand_q, docs, origins), known_item_ndcg(source_q, docs, origins))
    follows = followed(source_belief(source_q, docs), cand_q, docs)
    asked_q = rng.normal(size=(30, 16)).astype(np.float32)
    asked = followed(source_belief(asked_q, docs), asked_q, docs)  # follows the source exactly: 1
    low = Estimate(found, follows)
    high = Estimate(found, follows, asked)
    assert low.retention < 0.9 and high.asked_decides and high.retention == pytest.approx(1.0)
    assert high.interval() == asked.interval() and high.to_dict()["asked"] == round(asked.retention, 4)
    assert high.to_dict()["queries"] == 30 and high.to_dict()["found"] == round(found.retention, 4)
    below = followed(source_belief(asked_q, docs), asked_q + 3 * rng.normal(size=(30, 16)).astype(np.float32), docs)
    same = Estimate(found, follows, below)
    assert below.retention < low.retention and not same.asked_decides
    assert same.retention == low.retention and same.interval() == low.interval()
    few = followed(source_belief(asked_q[:9], docs), asked_q[:9], docs)  # 9 queries followed exactly: reported only
    assert few.retention == pytest.approx(1.0) and not Estimate(found, follows, few).asked_decides
    assert Estimate(found, follows, few).retention == low.retention


def test_the_documents_belief_by_hand():
    """A query answered by three documents (cosines 0.95, 0.9, 0.85) and a second query answered by a fourth.
    Each document's gain for a query is its softmax over the pool (both queries) at scale 20. A candidate ranking
    the two the source is least sure of keeps 1, though it follows the query's own belief (mostly on the first)
    much less; one that ranks the other query's document loses its gain."""
    e = np.eye(4, dtype=np.float32)
    queries = np.stack([e[0], e[1]])
    a = np.array([0.95, 0.9, 0.85], dtype=np.float32)  # the first query's cosines to the three answering documents
    docs = np.vstack([a[:, None] * e[0] + np.sqrt(1 - a[:, None] ** 2) * e[2], [e[1] * 0.95 + e[3] * 0.312]])
    unit = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    dense = np.exp(20 * queries @ unit.T) / np.exp(20 * unit @ queries.T).sum(axis=1)[None, :]
    belief = document_belief(queries, None, docs, k=2, chunk=4)
    ideal = -np.sort(-dense, axis=1)[:, :2] @ (1 / np.log2([2, 3]))
    assert np.allclose(belief.ideal, ideal) and np.allclose(belief.gains(np.array([[2, 1], [3, 0]])),
                                                            dense[[[0, 0], [1, 1]], [[2, 1], [3, 0]]])
    assert belief.source == pytest.approx([1.0, 1.0], abs=1e-3)
    swapped = queries.copy()
    swapped[0] = e[2]  # its top 2: the third answering document, then the second; the first not at all
    kept = document_followed(belief, swapped, docs, k=2)
    assert kept.candidate[0] == pytest.approx(1.0, abs=1e-3)
    by_query = followed(source_belief(queries, docs), swapped, docs, k=2)
    assert by_query.candidate[0] < 0.9 * by_query.source[0]
    assert higher(by_query, kept) is kept and higher(kept, None) is kept
    wrong = np.stack([unit[3], unit[3]])  # both queries rank the second query's document first
    lost = document_followed(belief, wrong, docs, k=2)
    assert lost.candidate[0] < 0.5 and lost.candidate[1] == pytest.approx(1.0, abs=1e-3)


def test_a_stored_form_reads_the_documents_belief_at_most_as_its_float_search():
    rng = np.random.default_rng(3)
    docs = rng.normal(size=(300, 32)).astype(np.float32)
    queries = docs[:40] + 0.8 * rng.normal(size=(40, 32)).astype(np.float32)
    known = docs[100:160] + 0.8 * rng.normal(size=(60, 32)).astype(np.float32)
    belief = document_belief(queries, known, docs)
    cand = queries + 0.5 * rng.normal(size=queries.shape).astype(np.float32)
    plain = document_followed(belief, cand, docs)
    assert 0 < plain.retention < 1
    for precision, rescore in (("int8", 0), ("binary", 4)):
        got = document_followed(belief, cand, docs, precision=precision, rescore=rescore)
        assert np.all(got.candidate <= plain.candidate + 1e-12)


def test_the_pool_takes_the_first_known_item_queries_up_to_its_cap():
    """The search's sample and the final check ask different numbers of known-item queries; the pool takes the same
    number of them, so both read alike."""
    from espresso_export.verification.known_item import POOL_KNOWN_ITEMS

    rng = np.random.default_rng(4)
    docs = rng.normal(size=(120, 16)).astype(np.float32)
    queries = rng.normal(size=(12, 16)).astype(np.float32)
    known = rng.normal(size=(POOL_KNOWN_ITEMS + 50, 16)).astype(np.float32)
    capped = document_belief(queries, known, docs)
    assert np.allclose(capped.log_z, document_belief(queries, known[:POOL_KNOWN_ITEMS], docs).log_z)
    assert not np.allclose(capped.log_z, document_belief(queries, known[:20], docs).log_z)
