"""auto's planning rules (searching/halving.py; the machine's speed, searching/budget.py): rungs within the budget,
the proxy's pruning, halving by score and cost."""

from __future__ import annotations

import pytest

from espresso_export.searching.budget import Speed
from espresso_export.searching.halving import (
    ETA,
    MIN_STEPS,
    SEARCH_SHARE,
    hopeless,
    plan_rungs,
    slack,
    survivors,
)


def _total(rungs, speed: Speed, depth: int) -> float:
    return sum(r.candidates * speed.train(r.texts, depth) for r in rungs)


@pytest.mark.parametrize("n, seconds", [(1, 600), (3, 600), (5, 1800), (9, 7200), (5, 120)])
def test_rungs_fit_the_budget_and_halve(n, seconds):
    speed = Speed(seconds_per_text=0.01, depth=6)
    rungs = plan_rungs(n, 3, seconds, speed, batch_size=32, max_texts=10**9)
    assert rungs, "a plan exists for these budgets"
    assert _total(rungs, speed, 3) <= SEARCH_SHARE * seconds * 1.001
    assert rungs[0].texts >= MIN_STEPS * 32
    for a, b in zip(rungs, rungs[1:]):
        assert b.candidates == -(-a.candidates // ETA) and b.texts > a.texts


def test_a_small_budget_heals_fewer_candidates_or_none():
    speed = Speed(seconds_per_text=0.01, depth=6)
    few = plan_rungs(9, 3, 30, speed, batch_size=32, max_texts=10**9)
    assert few and few[0].candidates < 9
    assert plan_rungs(9, 3, 1, speed, batch_size=32, max_texts=10**9) == []


def test_capped_texts_stop_the_halving():
    rungs = plan_rungs(5, 3, 10**6, Speed(0.01, 6), batch_size=32, max_texts=2000)
    assert [r.texts for r in rungs] == [2000]


def test_speed_learns_from_a_measured_heal():
    speed = Speed(seconds_per_text=0.01, depth=6)
    speed.observe(texts=600, depth=3, seconds=15.0)
    assert speed.train(600, 3) == pytest.approx(15.0)
    assert speed.train(600, 6) == pytest.approx(30.0)


def test_hopeless_and_slack():
    assert hopeless(0.2, 0.97) and not hopeless(0.8, 0.97)
    assert slack({"a": 0.5, "b": 0.6}, {"a": 0.9, "b": 0.7}) == pytest.approx(0.2)
    assert slack({"a": 0.5}, {"a": 0.4}) == pytest.approx(0.005)


def test_survivors_keep_the_cheapest_hopeful_and_the_cheapest_that_meets():
    scores = {"L1": 0.90, "L2": 0.95, "L3": 0.97, "L4": 0.99}
    costs = {"L1": 1, "L2": 2, "L3": 3, "L4": 4}
    # margin 0.03: L1 cannot reach 0.97 any more; the cheapest hopeful is L2, and L3 already meets it
    assert survivors(scores, costs, 0.97, keep=1, margin=0.03) == ["L2", "L3"]
    assert survivors(scores, costs, 0.97, keep=2, margin=0.1) == ["L1", "L2", "L3"]
    # none may reach it: the best scored go on
    assert survivors(scores, costs, 0.999, keep=2, margin=0.0) == ["L4", "L3"]


def test_judged_choice_keeps_the_source_and_candidates_passes_of_the_documents_and_queries_aside(tmp_path):
    """--judged-choice searches every document with the source and the candidates, cheapest first: the plan keeps
    the source's pass for it and the candidates' (every depth's two cuts, at most two source passes, for the pairs
    of --write-judging; about one with --judgments), and nothing without it."""
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.budget import JUDGED_PASSES, judged_seconds

    speed = Speed(seconds_per_text=0.01, depth=6)
    plain = AutoSettings(corpus=["docs.jsonl"], corpus_queries=100)
    judged = AutoSettings(corpus=["docs.jsonl"], corpus_queries=100, judged_choice=True,
                          write_judging=str(tmp_path / "pairs.jsonl"))
    assert judged_seconds(plain, 5000, speed) == 0.0
    assert judged_seconds(judged, 5000, speed) == pytest.approx((1 + JUDGED_PASSES) * 5100 * 0.01)
    shallow = AutoSettings(corpus=["docs.jsonl"], corpus_queries=100, judged_choice=True, layers=[1],
                           write_judging=str(tmp_path / "pairs.jsonl"))
    assert judged_seconds(shallow, 5000, speed) == pytest.approx((1 + 2 / 6) * 5100 * 0.01)
    filled = tmp_path / "judged.tsv"
    filled.write_text("q1\td1\t1\n", encoding="utf-8")
    judging = AutoSettings(corpus=["docs.jsonl"], corpus_queries=100, judged_choice=True, judgments=str(filled))
    assert judged_seconds(judging, 5000, speed) == pytest.approx(2 * 5100 * 0.01)
