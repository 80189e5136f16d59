"""A label-free score decides a target only with enough queries and a narrow enough interval: ``auto`` never
answers, and its final check never passes, on a ratio that a handful of queries (or a source that finds almost
none of its known items) blew up above the target."""

from __future__ import annotations

import json

import numpy as np
import pytest

from espresso_export.cli.app import main
from espresso_export.core.errors import ValidationError
from espresso_export.core.evidence import MIN_ITEMS, undecided
from espresso_export.searching.auto import auto
from espresso_export.searching.final_check import verdict
from espresso_export.searching.scoring import Score
from espresso_export.verification.agreement import Agreement
from espresso_export.verification.corpus_agreement import AgreementRow, VariantAgreement
from espresso_export.verification.gate import Thresholds
from espresso_export.verification.latency_report import LatencySetup
from espresso_export.verification.report import VerifyReport
from espresso_export.verification.vectors import Variant

pytest.importorskip("faiss", reason="auto searches with faiss (pip install 'espresso-export[eval]')")

TINY = dict(sample_documents=80, sample_queries=24, max_texts=400, batch_size=16, threads=1, known_items="title")


def test_the_rule_needs_ten_queries_and_an_interval_within_the_noise_allowed():
    assert "6 queries, fewer than the 10" in undecided(6, (0.9, 1.0))
    assert "+-1.451 wide" in undecided(20, (0.0, 2.9024))
    assert undecided(200, (0.93, 1.01)) is None
    assert undecided(200, (0.93, 1.01), max_noise=0.02) is not None
    assert undecided(MIN_ITEMS, None) is not None


def test_auto_does_not_answer_from_scores_too_noisy_to_decide_the_target(tmp_path, tiny_bert, docs):
    """Its one-layer cuts read below 1 here, every interval wider than +-0.001: before, the cheapest reading above the
    target was the answer whatever its interval (exit 0); now no score too wide to decide is an answer."""
    out = tmp_path / "out"
    result = auto(tiny_bert, out, corpus=[str(docs)], min_retention=0.5, time_budget="1s", max_noise=0.001, layers=[1], **TINY)
    assert not result.met and not result.passed
    assert any("cannot decide it" in h and "--sample-queries" in h for h in result.hints), result.hints
    record = json.loads((out / "auto.json").read_text())
    assert record["passed"] is False and not (out / "model").exists()


def test_a_sample_with_fewer_than_ten_known_item_queries_is_refused_before_any_model_work(tmp_path, tiny_bert,
                                                                                         capsys):
    docs = tmp_path / "few.jsonl"
    docs.write_text("".join(json.dumps({"_id": str(i), "title": f"title {i}", "text": f"the body of record {i}"})
                            + "\n" for i in range(6)), encoding="utf-8")
    with pytest.raises(ValidationError, match="gives 6 known-item queries"):
        auto(tiny_bert, tmp_path / "api", corpus=[str(docs)], time_budget="1m", sample_documents=20)
    code = main(["auto", str(tiny_bert), "--corpus", str(docs), "-o", str(tmp_path / "cli"), "--time-budget", "1m"])
    assert code == 2 and "fewer than the 10 a score needs" in capsys.readouterr().err


def _report_with_known_item(known: dict) -> VerifyReport:
    per_query = np.full((20, 3), 0.9)
    row = AgreementRow("docs.txt", "docs.txt", 600, 20, "queries.txt",
                       [VariantAgreement(Variant("float32", 64), Agreement(10, 100, per_query), 0, known)],
                       known_item=known)
    return VerifyReport(candidate={}, source={}, threads=1, sts=[], latency=[], latency_setup=LatencySetup(1),
                        retrieval=[], thresholds=Thresholds(), agreement=[row])


def test_the_final_check_fails_a_known_item_retention_it_cannot_decide():
    """The final check of the issue's case: 1.064 over 20 queries, interval 0.0-2.90, once passed 0.97."""
    stored = Score(64, "float32", 1.0)  # the form the answer stores, as the search scored it
    wide = {"retention": 1.0642, "ci95": [0.0, 2.9024], "queries": 20, "method": "known items by half"}
    judged = verdict(_report_with_known_item(wide), 0.97, stored, False, 0.1)
    assert not judged["passed"] and judged["known_item_below"] == ["docs.txt"]
    assert "undecided" in judged["failed"][0] and "--corpus-queries" in judged["failed"][0]
    narrow = {**wide, "ci95": [0.99, 1.12], "queries": 400}
    assert verdict(_report_with_known_item(narrow), 0.97, stored, False, 0.1)["passed"]


def test_when_judgments_chose_an_estimate_below_the_target_is_reported_never_failed():
    known = {"retention": 0.90, "ci95": [0.88, 0.92], "queries": 400, "method": "known items by sentence"}
    judged = verdict(_report_with_known_item(known), 0.97, Score(64, "float32", 1.0), False, 0.1,
                     known_item_gates=False)
    assert judged["passed"] and not judged["failed"] and judged["known_item_below"] == ["docs.txt"]
    assert judged["not_gating"] == ["known-item retention on all of docs.txt = 0.900, needs >= 0.97 (95% interval "
                                    "0.880-0.920)"]
    assert not verdict(_report_with_known_item(known), 0.97, Score(64, "float32", 1.0), False, 0.1)["passed"]


def test_the_final_check_reports_the_belief_retention_on_given_queries_beside_and_never_gates():
    """The user's own --queries give a belief retention: recorded as the answer stores its vectors, not judged."""
    known = {"retention": 0.99, "ci95": [0.98, 1.0], "queries": 400, "method": "known items by sentence"}
    report = _report_with_known_item(known)
    row = report.agreement[0]
    low = {"retention": 0.5, "ci95": [0.4, 0.6], "queries": 20}
    row.results[0] = VariantAgreement(row.results[0].variant, row.results[0].agreement, 0, known, low)
    report.agreement[0] = AgreementRow(**{**row.__dict__, "belief": low})
    judged = verdict(report, 0.97, Score(64, "float32", 1.0), False, 0.1)
    assert judged["passed"] and judged["belief"] == {"docs.txt": low}
    assert verdict(_report_with_known_item(known), 0.97, Score(64, "float32", 1.0), False, 0.1)["belief"] == {}


def test_the_final_check_says_when_a_labelled_set_misses_its_own_queries():
    """A labelled set where the source finds nothing for most queries (labels whose ids do not match): the final
    check's verdict carries verify's note, which auto prints as a hint."""
    from dataclasses import replace

    from espresso_export.verification.report import RetrievalRow
    from espresso_export.verification.retrieval import RetrievalScores

    known = {"retention": 0.99, "ci95": [0.98, 1.0], "queries": 400, "method": "known items by sentence"}
    per_query = np.zeros((11, 4))
    per_query[0] = 1.0  # one query of 11 finds its document
    scores = RetrievalScores(0.09, 0.09, 0.09, 0.2, 1000, 0.0, 0.01, 11, 671, 384, per_query=per_query)
    report = replace(_report_with_known_item(known), retrieval=[RetrievalRow("B", "B", "flat", scores, scores)])
    (line,) = verdict(report, 0.97, Score(64, "float32", 1.0), False, 0.1)["labels"]
    assert line.startswith("labelled set B: the source finds no relevant document in its top 10 for 10 of 11")
    assert verdict(_report_with_known_item(known), 0.97, Score(64, "float32", 1.0), False, 0.1)["labels"] == []
