"""Retrieval: BEIR reading, STS-built sets, faiss flat/IVF search and nDCG@10 / recall@100 / MRR@10 / recall@10
with known answers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from espresso_export.data import RetrievalSet, StsPairs, read_retrieval, retrieval_from_sts
from espresso_export.core.errors import GateFailedError, NotFoundError, ValidationError
from espresso_export.core.types import IndexKind, WithinNoise
from espresso_export.verification.embedders import EncodeCache, Embedder
from espresso_export.verification.latency_report import LatencySetup
from espresso_export.core.metrics import (
    ndcg_at_k, rankdata, ranking_scores, ratio_interval, recall_at_k, spearman, spearman_ratio_interval,
    top_k_by_cosine,
)
from espresso_export.verification.report import RetrievalRow, Thresholds, VerifyReport
from espresso_export.verification.retrieval import IndexOptions, RetrievalScores, evaluate, load_retrieval, search

DIM = 12


class TableEmbedder(Embedder):
    """Fixed vectors per text: the test's ground truth, so every rank is known in advance."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        super().__init__(spec="table", kind="table", dim=DIM, n_params=0, disk_bytes=0, load_seconds=0.0)
        self.table = table
        self.calls = 0

    def encode(self, texts, batch_size=32):
        self.calls += 1
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


def _ranked_query(order: list[int]) -> np.ndarray:
    """A query vector whose inner products rank the one-hot documents exactly in ``order``."""
    q = np.zeros(DIM)
    for rank, doc in enumerate(order):
        q[doc] = DIM - rank
    return q


def _write_beir(folder: Path, *, qrels: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": f"T{i}", "text": f"doc {i}"}) + "\n" for i in range(DIM)))
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(4)))
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text(qrels if qrels is not None else (
        "query-id\tcorpus-id\tscore\n"
        "q0\td0\t1\nq0\td5\t0\n"      # q0: relevant d0, ranked 2nd
        "q1\td3\t2\nq1\td11\t1\n"     # q1: d3 ranked 1st, d11 ranked 12th (outside the top 10)
        "q2\td7\t1\n"                 # q2: d7 ranked 11th
        "q3\td2\t0\n"                 # q3: nothing relevant -> not evaluated
    ))
    return folder


@pytest.fixture()
def beir(tmp_path) -> tuple[RetrievalSet, TableEmbedder]:
    data = read_retrieval(_write_beir(tmp_path / "tiny"))
    eye = np.eye(DIM)
    table = {text: eye[i] for i, text in enumerate(data.docs)}
    others = [d for d in range(DIM) if d not in (1, 0)]
    table["query 0"] = _ranked_query([1, 0, *others])
    table["query 1"] = _ranked_query([3, *[d for d in range(DIM) if d not in (3, 11)], 11])
    table["query 2"] = _ranked_query([*[d for d in range(DIM) if d not in (7, 10)], 7, 10])
    table["query 3"] = _ranked_query(list(range(DIM)))
    return data, TableEmbedder(table)


def test_read_beir_folder(beir):
    data, _ = beir
    assert data.docs[0] == "T0 doc 0"  # title joined to text, as BEIR does
    assert data.relevant == {"q0": frozenset({"d0"}), "q1": frozenset({"d3", "d11"}), "q2": frozenset({"d7"})}
    assert data.judgements("q1") == {"d3": 2.0, "d11": 1.0}  # the graded scores, as BEIR gives them
    assert data.evaluated_queries == [0, 1, 2]


def test_known_mrr_and_recall_flat(beir):
    data, emb = beir
    scores = evaluate(EncodeCache(emb), data, IndexOptions(kind=IndexKind.FLAT))
    # reciprocal ranks 1/2, 1, 0 -> 0.5; recall@10 1, 1/2, 0 -> 0.5
    assert scores.mrr_at_10 == pytest.approx(0.5)
    assert scores.recall_at_10 == pytest.approx(0.5)
    # nDCG@10 on the graded qrels: q0 grade-1 doc at rank 2 -> 1/log2(3); q1 grade 2 at rank 1, grade 1 at rank 12
    # (outside the cut) -> 2 / (2 + 1/log2(3)); q2 nothing in the top 10 -> 0. Twelve docs: recall@100 is 1.
    expected = (1 / np.log2(3) + 2 / (2 + 1 / np.log2(3)) + 0) / 3
    assert scores.ndcg_at_10 == pytest.approx(expected)
    assert scores.recall_at_100 == pytest.approx(1.0)
    assert (scores.queries, scores.docs, scores.dim) == (3, DIM, DIM)
    assert scores.index_bytes >= DIM * DIM * 4  # the flat index holds every float32 vector
    assert scores.query_ms_per_query > 0


def test_ivf_probing_every_cell_equals_flat(beir):
    data, emb = beir
    cache = EncodeCache(emb)
    flat = evaluate(cache, data, IndexOptions(kind=IndexKind.FLAT))
    ivf = evaluate(cache, data, IndexOptions(kind=IndexKind.IVF, nlist=3, nprobe=3))
    assert ivf.mrr_at_10 == pytest.approx(flat.mrr_at_10)
    assert ivf.recall_at_10 == pytest.approx(flat.recall_at_10)
    assert emb.calls == 2  # queries and corpus were encoded once, then served from the cache


def test_ivf_rejects_impossible_cells(beir):
    data, emb = beir
    with pytest.raises(ValidationError, match="--nlist must be between 1 and the corpus size 12"):
        evaluate(EncodeCache(emb), data, IndexOptions(kind=IndexKind.IVF, nlist=50, nprobe=1))
    with pytest.raises(ValidationError, match="--nprobe"):
        evaluate(EncodeCache(emb), data, IndexOptions(kind=IndexKind.IVF, nlist=4, nprobe=5))


def test_ndcg_and_recall_at_100_hand_computed():
    """One query, graded judgements a=2, b=1, c=1; 120 retrieved ids with a at rank 2, c at 50, b at 101."""
    grades = {"a": 2.0, "b": 1.0, "c": 1.0}
    ranked = [f"x{i}" for i in range(120)]
    ranked[1], ranked[49], ranked[100] = "a", "c", "b"
    # DCG@10 = 2 / log2(1 + 2); ideal: 2, 1, 1 at ranks 1-3 -> 2/log2(2) + 1/log2(3) + 1/log2(4) = 2 + 0.6309 + 0.5
    assert ndcg_at_k(ranked, grades, 10) == pytest.approx((2 / np.log2(3)) / (2 + 1 / np.log2(3) + 0.5))
    assert ndcg_at_k(ranked, grades, 10) == pytest.approx(0.40303, abs=1e-5)
    assert recall_at_k(ranked, grades, 10) == pytest.approx(1 / 3)
    assert recall_at_k(ranked, grades, 100) == pytest.approx(2 / 3)  # b at 101 is just outside
    assert recall_at_k(ranked, grades, 101) == pytest.approx(1.0)
    perfect = ["a", "c", "b"]
    assert ndcg_at_k(perfect, grades, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["b", "c", "a"], grades, 10) < 1.0  # the grade-2 document last: order of grades counts
    scores = ranking_scores([ranked, perfect], [grades, grades])
    assert scores["mrr_at_10"] == pytest.approx((1 / 2 + 1) / 2)
    assert scores["recall_at_100"] == pytest.approx((2 / 3 + 1) / 2)
    assert scores["ndcg_at_10"] == pytest.approx((0.40303 + 1) / 2, abs=1e-5)


def test_rank_scores_of_a_set_without_grades():
    """STS-built sets have no grades: every relevant document counts 1."""
    data = RetrievalSet("t", ["a", "b"], ["qa", "qb"], ["x", "y", "z"], ["X", "Y", "Z"],
                        {"a": frozenset({"z"}), "b": frozenset({"x", "y"})})
    scores = data.scores(np.array([[0, 1, 2], [1, 2, 0]]), [0, 1])
    assert scores["mrr_at_10"] == pytest.approx((1 / 3 + 1) / 2)
    assert scores["recall_at_10"] == pytest.approx(1.0)
    idcg_b = 1 + 1 / np.log2(3)
    assert scores["ndcg_at_10"] == pytest.approx((1 / np.log2(4) + (1 + 1 / np.log2(4)) / idcg_b) / 2)


def test_top_k_by_cosine_matches_faiss():
    rng = np.random.default_rng(0)
    q, d = rng.normal(size=(5, 8)).astype(np.float32), rng.normal(size=(40, 8)).astype(np.float32)
    ranked, _, _, _ = search(q, d, IndexOptions(repeats=1), k=7)
    assert top_k_by_cosine(q, d, 7).tolist() == ranked.tolist()


def _retrieval_scores(mrr: float, ndcg: float) -> RetrievalScores:
    return RetrievalScores(mrr_at_10=mrr, recall_at_10=0.5, ndcg_at_10=ndcg, recall_at_100=0.9, index_bytes=1,
                           build_seconds=0.0, query_ms_per_query=0.1, queries=1, docs=1, dim=1)


def test_retrieval_gate_is_on_ndcg_at_10():
    """MRR@10 retention 1.0 but nDCG@10 retention 0.5: the gate at 0.9 fails, naming nDCG@10."""
    row = RetrievalRow("set", "spec", "flat", _retrieval_scores(0.8, 0.3), _retrieval_scores(0.8, 0.6))
    report = VerifyReport(candidate={}, source={}, threads=1, sts=[], latency=[], latency_setup=LatencySetup(threads=1),
                          retrieval=[row], thresholds=Thresholds(min_retrieval_retention=0.9))
    (check,) = report.checks
    assert check.name == "nDCG@10 retention on set" and check.value == pytest.approx(0.5) and not check.passed
    assert report.to_dict()["retrieval"][0]["ndcg_retention"] == 0.5


def test_retention_interval_by_the_paired_bootstrap():
    """Constructed per-query scores: a candidate equal to the source, or half of it on every query, has no
    spread (each resample keeps a query's pair together); noisy scores give an interval around the point
    estimate that narrows with ten times the queries; too few items or a source of zeros give none."""
    rng = np.random.default_rng(1)
    source = rng.uniform(0.2, 1.0, size=40)
    assert ratio_interval(source, source) == pytest.approx((1.0, 1.0))
    assert ratio_interval(0.5 * source, source) == pytest.approx((0.5, 0.5))
    widths = []
    for n in (40, 400):
        s = rng.uniform(0.0, 1.0, size=n)
        c = np.clip(s * 0.9 + rng.normal(0, 0.15, size=n), 0, 1)
        low, high = ratio_interval(c, s)
        assert low < c.sum() / s.sum() < high
        assert ratio_interval(c, s) == (low, high)  # seeded: the same scores, the same interval
        widths.append(high - low)
    assert widths[1] < widths[0] / 2  # ~1/sqrt(10) of the width
    assert ratio_interval([0.5], [0.5]) is None and ratio_interval([0.5, 0.1], [0.0, 0.0]) is None


def test_average_ranks_of_ties():
    assert rankdata(np.array([3.0, 1.0, 3.0, 2.0, 3.0])).tolist() == [4.0, 1.0, 4.0, 2.0, 4.0]
    assert rankdata(np.array([0.5, 0.5])).tolist() == [1.5, 1.5] and rankdata(np.array([])).tolist() == []


def test_sts_retention_interval_by_the_paired_bootstrap():
    """Spearman depends on ranks only: a candidate whose cosines are a monotone function of the source's has
    retention 1 in every resample; a noisy one gets an interval around its retention, narrower with more pairs."""
    rng = np.random.default_rng(2)
    gold = rng.integers(0, 6, size=60).astype(float)
    source = gold + rng.normal(0, 1.0, size=60)
    assert spearman_ratio_interval(np.tanh(source / 4), source, gold) == pytest.approx((1.0, 1.0))
    widths = []
    for n in (60, 600):
        gold = rng.integers(0, 6, size=n).astype(float)
        source = gold + rng.normal(0, 1.0, size=n)
        cand = source + rng.normal(0, 1.0, size=n)
        low, high = spearman_ratio_interval(cand, source, gold, resamples=500)
        assert low < spearman(cand, gold) / spearman(source, gold) < high
        widths.append(high - low)
    assert widths[1] < widths[0] / 2
    assert spearman_ratio_interval([1.0, 2.0], [1.0, 2.0], [1.0, 2.0]) is None


def test_sts_retention_interval_is_the_resample_by_resample_ratio_of_spearmans():
    """The resamples are ranked in blocks; each block's ratio is the one drawn and computed alone, ties included."""
    rng = np.random.default_rng(3)
    gold = rng.integers(0, 6, size=40).astype(float)
    source = np.round(gold + rng.normal(0, 1.0, size=40))  # ties in every array
    cand = np.round(source + rng.normal(0, 1.0, size=40))
    draws = np.random.default_rng(0)
    ratios = []
    for _ in range(300):
        idx = draws.integers(0, 40, size=40)
        den = spearman(source[idx], gold[idx])
        if den > 0:
            ratios.append(spearman(cand[idx], gold[idx]) / den)
    expected = np.percentile(ratios, [2.5, 97.5])
    assert spearman_ratio_interval(cand, source, gold, resamples=300) == pytest.approx(tuple(expected), abs=1e-12)


@pytest.mark.parametrize("policy", list(WithinNoise))
def test_gate_says_when_the_retrieval_retention_is_within_the_sets_noise(policy):
    """Per-query nDCG@10 of 40 queries: a retention of about 0.93 whose interval holds the 0.95 threshold is
    decided as ``--within-noise`` says (on the value: fails; pass; fail), and the gate says the set is too small
    to decide; against 0.5 the whole interval is above and every policy passes it on the value."""
    rng = np.random.default_rng(6)
    src = rng.uniform(0.1, 1.0, size=40)
    cand = np.clip(src * 0.93 + rng.normal(0, 0.2, size=40), 0, 1)

    def scores(per: np.ndarray) -> RetrievalScores:
        table = np.column_stack([per, per, per, per])  # the RANKING_SCORES columns
        return replace(_retrieval_scores(float(per.mean()), float(per.mean())), queries=40, per_query=table)

    row = RetrievalRow("set", "spec", "flat", scores(cand), scores(src))
    low, high = row.ndcg_retention_ci95
    assert low < row.ndcg_retention < 0.95 < high
    noisy_result = {WithinNoise.VALUE: False, WithinNoise.PASS: True, WithinNoise.FAIL: False}[policy]
    for bound, passed, noisy in ((0.95, noisy_result, True), (0.5, True, False)):
        info = {"spec": "m", "kind": "onnx", "n_params": 1, "disk_bytes": 1, "bytes_per_vector": 4, "dim": 1,
                "load_seconds": 0.1}
        report = VerifyReport(candidate=info, source=info, threads=1, sts=[], latency=[],
                              latency_setup=LatencySetup(threads=1), retrieval=[row],
                              thresholds=Thresholds(min_retrieval_retention=bound, within_noise=policy))
        (check,) = report.checks
        assert check.passed is passed and check.within_noise is noisy
        assert ("within the set's noise" in check.describe()) is noisy
        assert (f"--within-noise {policy.value}" in check.describe()) is (noisy and policy is not WithinNoise.VALUE)
        gate_json = report.to_dict()["gate"]
        assert gate_json["checks"][0]["ci95"] == [round(low, 4), round(high, 4)]
        assert gate_json["checks"][0]["decided_by"] == ("interval" if noisy and policy is not WithinNoise.VALUE
                                                        else "value")
        assert report.passed is passed
        gate = report.sections()[-1]
        assert gate.rows[0][2] == f"{row.ndcg_retention:.4f} [{low:.3f}-{high:.3f}]"
        assert gate.rows[0][3] == ("pass" if passed else "FAIL")
        assert bool(gate.footnotes) is noisy
        assert not noisy or f"--within-noise {policy.value}" in gate.footnotes[0]
        if not passed:
            with pytest.raises(GateFailedError, match="within the set's noise"):
                report.raise_for_gate()
    assert "40 queries (paired bootstrap)" in row.interval_note()


def test_search_orders_by_cosine():
    docs = np.array([[1, 0], [0.6, 0.8], [0, 1]], dtype=np.float32) * np.array([[5], [1], [0.1]], dtype=np.float32)
    ranked, nbytes, _, seconds = search(np.array([[0, 1]], dtype=np.float32), docs, IndexOptions())
    assert ranked[0].tolist() == [2, 1, 0]  # vectors are normalised: norms do not change the order
    assert nbytes > 0 and seconds >= 0


def test_retrieval_built_from_sts():
    pairs = StsPairs("pairs.tsv", ["a cat", "a cat", "a dog", "rain"], ["the cat", "a kitten", "a puppy", "sun"],
                     [4.5, 4.0, 3.9, 0.0])
    data = retrieval_from_sts(pairs)
    assert data.queries == ["a cat", "a dog", "rain"]
    assert data.docs == ["the cat", "a kitten", "a puppy", "sun"]
    cat = data.query_ids[0]
    assert {data.docs[data.doc_ids.index(d)] for d in data.relevant[cat]} == {"the cat", "a kitten"}
    assert data.evaluated_queries == [0]  # 3.9 < 4: "a dog" has no relevant document
    with pytest.raises(ValidationError, match="no pair scores >= 4.6"):
        retrieval_from_sts(pairs, min_score=4.6)


def test_load_retrieval_builtin_is_sts_built():
    data = load_retrieval("builtin")
    assert "smoke set" in data.name
    assert len(data.relevant) >= 20 and len(data.docs) > len(data.relevant)


@pytest.mark.parametrize("qrels, message", [
    ("query-id\tcorpus-id\tscore\nq0\td99\t1\n", r"test.tsv:2: corpus id 'd99' is not in the corpus"),
    ("query-id\tcorpus-id\tscore\nq9\td1\t1\n", r"test.tsv:2: query id 'q9' is not in the queries file"),
    ("query-id\tcorpus-id\tscore\nq0\td1\n", r"test.tsv:2: expected 3 tab-separated columns"),
    ("query-id\tcorpus-id\tscore\nq0\td1\thigh\n", r"test.tsv:2: score 'high' is not a number"),
    ("query-id\tcorpus-id\tscore\nq0\td1\t0\n", r"no query has a relevant document"),
], ids=["unknown-doc", "unknown-query", "two-columns", "bad-score", "nothing-relevant"])
def test_malformed_qrels_name_file_and_line(tmp_path, qrels, message):
    with pytest.raises(ValidationError, match=message):
        read_retrieval(_write_beir(tmp_path / "bad", qrels=qrels))


def test_malformed_corpus_names_file_and_line(tmp_path):
    folder = _write_beir(tmp_path / "bad")
    with open(folder / "corpus.jsonl", "a") as fh:
        fh.write('{"_id": "d99", "text": \n')
    with pytest.raises(ValidationError, match=r"corpus.jsonl:13: not valid JSON"):
        read_retrieval(folder)
    (folder / "queries.jsonl").unlink()
    (folder / "corpus.jsonl").write_text('{"_id": "d0", "text": "x"}\n')
    with pytest.raises(ValidationError, match="no queries.jsonl"):
        read_retrieval(folder)
    with pytest.raises(NotFoundError):
        read_retrieval(tmp_path / "missing")


def test_real_model_finds_the_obvious_answers(minilm_path):
    """all-MiniLM-L6-v2 on a hand-built corpus where each query has one unmistakable answer."""
    from espresso_export.verification.embedders import open_embedder

    facts = {
        "What is the capital of France?": "Paris is the capital and largest city of France.",
        "How many legs does a spider have?": "Spiders are arachnids with eight legs.",
        "Who wrote Romeo and Juliet?": "Romeo and Juliet is a tragedy written by William Shakespeare.",
        "At what temperature does water boil?": "At sea level water boils at 100 degrees Celsius.",
        "Which planet is known as the red planet?": "Mars is often called the Red Planet because of its colour.",
    }
    distractors = ["The stock market closed higher on Tuesday.", "She plays the violin in an orchestra.",
                   "Bananas are rich in potassium.", "The train to Berlin was delayed by an hour."]
    docs = list(facts.values()) + distractors
    data = RetrievalSet("facts", [f"q{i}" for i in range(5)], list(facts), [f"d{i}" for i in range(len(docs))], docs,
                        {f"q{i}": frozenset({f"d{i}"}) for i in range(5)})
    scores = evaluate(EncodeCache(open_embedder(str(minilm_path))), data)
    assert scores.mrr_at_10 == pytest.approx(1.0)
    assert scores.recall_at_10 == pytest.approx(1.0)
    assert scores.dim == 384


def test_labels_that_miss_their_queries_are_named(beir, tmp_path):
    """Labels whose ids point most queries at documents the source never ranks near the top (shifted or permuted
    query ids) get a note under the table; a set where the source finds most of its queries' documents does not."""
    from espresso_export.verification.retrieval import labels_note, missed

    data, emb = beir
    sound = evaluate(EncodeCache(emb), data)
    assert missed(sound) == 1 and labels_note(sound) is None  # q2 alone finds nothing: 1 of 3
    shifted = read_retrieval(_write_beir(tmp_path / "shifted", qrels=(
        "query-id\tcorpus-id\tscore\nq0\td11\t1\nq1\td3\t1\nq2\td7\t1\n")))  # q0's relevant document ranked 12th
    scores = evaluate(EncodeCache(emb), shifted)
    assert missed(scores) == 2
    assert labels_note(scores).startswith("the source finds no relevant document in its top 10 for 2 of 3 queries")
    row = RetrievalRow("shifted", "shifted", "flat", scores, scores)
    assert row.to_dict()["source_missed"] == 2 and "ids match" in row.to_dict()["labels_note"]
