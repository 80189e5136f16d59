"""``auto --judged-choice``: the user's judgments choose the answer, cheapest first, where the known-item estimate
would not let the candidate answer; the pairs of every candidate searched are written to judge first; the report
says what chose. The tiny BERT on the tiny words: these check the mechanics, not the estimate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from espresso_export.cli.app import main
from espresso_export.core.errors import ValidationError
from espresso_export.searching.auto import auto
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.judged_choice import SOURCE_FILE, judged_order
from espresso_export.searching.work import WORK_SUFFIX

from small_search import SMALL_SEARCH, SMALL_SEARCH_CLI

pytest.importorskip("faiss", reason="auto searches with faiss (pip install 'espresso-export[eval]')")

SMALL = {**SMALL_SEARCH, "static": False, "layers": [1], "objective": "size", "time_budget": "10m"}


def _fill(pairs: Path, out: Path, relevant) -> None:
    """The pairs file filled in: relevance 1 where ``relevant(pair)``, else 0."""
    lines = [json.loads(line) for line in pairs.read_text(encoding="utf-8").splitlines()]
    out.write_text("".join(json.dumps({**p, "relevance": 1 if relevant(p) else 0}) + "\n" for p in lines),
                   encoding="utf-8")


@pytest.fixture(scope="module")
def first(tmp_path_factory, tiny_bert, docs):
    """A search asking for its pairs to judge before any judging: it chooses nothing and keeps its work."""
    root = tmp_path_factory.mktemp("judged")
    queries = root / "queries.txt"
    queries.write_text("".join(json.loads(line)["title"] + "\n" for line in docs.read_text().splitlines()[100:130]))
    common = {"corpus": [str(docs)], "queries": [str(queries)], "judged_choice": True, "keep_work": True, **SMALL}
    result = auto(tiny_bert, root / "out", min_retention=0.9999, write_judging=str(root / "pairs.jsonl"), **common)
    return root, common, result


def test_without_judgments_every_candidate_is_searched_and_its_pairs_written(first):
    root, common, result = first
    assert not result.met and not result.passed and result.chosen_on == "your judgments"
    # every candidate that may answer, cheapest first, was searched over all the documents with the 30 queries
    assert [(c.answer.name, c.answer.heal) for c in result.judged] == \
        [(a.name, a.heal) for a in judged_order(result.measured, AutoSettings(**common, min_retention=0.9999,
                                                                               write_judging="unused.jsonl"))]
    assert len(result.judged) == 2 and all(not c.rows for c in result.judged)
    assert any(h.startswith("no judgments yet: fill the pairs in") for h in result.hints), result.hints
    pairs = [json.loads(line) for line in (root / "pairs.jsonl").read_text().splitlines()]
    by_query: dict[str, set] = {}
    for p in pairs:
        by_query.setdefault(p["query_id"], set()).add(int(p["doc_id"]))
    assert len(by_query) == 30 and all(p["relevance"] is None for p in pairs)
    # each query's pool is the union of every searched model's top 10: the source's whole, the candidates' too
    with np.load(root / ("out" + WORK_SUFFIX) / SOURCE_FILE.format(0)) as saved:
        source = saved["top"]
    for q, top in enumerate(source):
        assert set(map(int, top)) <= by_query[str(q)]
    for q, check_tops in enumerate(zip(*(c.tops[0] for c in result.judged))):
        assert by_query[str(q)] == set(map(int, source[q])).union(*(set(map(int, t)) for t in check_tops))
    record = json.loads((root / "out" / "auto.json").read_text())
    assert record["chosen_on"] == "your judgments" and len(record["judged_choice"]) == 2


def test_judgments_every_pair_relevant_choose_the_cheapest_the_estimate_would_not(first, tiny_bert):
    root, common, _ = first
    _fill(root / "pairs.jsonl", root / "all.jsonl", lambda p: True)
    out = root / "out"
    result = auto(tiny_bert, out, min_retention=0.9999, judgments=str(root / "all.jsonl"), overwrite=True, **common)
    cheapest = result.judged[0].answer
    assert result.met and result.passed and (result.answer.name, result.answer.heal) == (cheapest.name, cheapest.heal)
    # the heals whose pairs the first run wrote are judged, and no heal is added (its pairs would not be judged)
    assert any(line.startswith("judged choice: judging the heals whose pairs an earlier run") for line in result.log)
    assert not any(line.startswith(("rung 1: healing", "plan: rungs")) for line in result.log), result.log
    first_heals = {(c.answer.name, c.answer.measured.texts) for c in first[2].judged}
    assert (cheapest.name, cheapest.measured.texts) in first_heals
    assert len(result.judged) == 1  # the first keeps it: none searched after it
    (row,) = result.judged[0].rows
    assert row.retention == pytest.approx(1.0) and row.judged == 30
    # the known-item read would not have answered it (below 0.9999); the final check reports the estimate's reads
    # (a read below the target with a hint saying it does not gate) and gates the judged retention alone (below)
    assert min(cheapest.measured.score.found, cheapest.measured.score.follows) < 0.9999
    assert result.verify["known_item"] and result.verify["belief"]
    assert all(h.endswith("reported, not gating (your judgments chose)") for h in result.hints if "gating" in h)
    assert any(h.startswith("chosen on your judgments") and "reaches below" not in h for h in result.hints)
    report = json.loads((out / "verify.json").read_text())
    assert report["judged"][0]["retention"] == pytest.approx(1.0) and report["gate"]["passed"]
    assert [c["name"] for c in report["gate"]["checks"]] == ["judged retention on docs.jsonl"]  # the export's, gated
    card = (out / "README.md").read_text()
    judged = report["judged"][0]["queries_judged"]  # the export's top 10s: a pair the search did not pool skips one
    assert f"judged nDCG@10 (the publisher's relevance judgments, {judged} queries), docs.jsonl" in card
    assert "| judged retention on docs.jsonl | >= 0.9999 | 1.0000 | pass |" in card


def test_judgments_with_more_pairs_to_write_check_every_candidate_and_name_one_answer(first, tiny_bert):
    """--judgments with --write-judging: every pooled candidate is checked (for its pairs), and only the first that
    keeps the target is called the answer."""
    root, common, _ = first
    _fill(root / "pairs.jsonl", root / "every.jsonl", lambda p: True)
    result = auto(tiny_bert, root / "out", min_retention=0.9999, judgments=str(root / "every.jsonl"),
                  write_judging=str(root / "more.jsonl"), overwrite=True, **common)
    assert len(result.judged) == 2 and all(c.keeps(0.9999) for c in result.judged)
    said = [line for line in result.log if line.startswith("judged choice, ")]
    assert len(said) == 2 and said[0].endswith("keeps 0.9999, the answer") and said[1].endswith("keeps 0.9999")
    assert (result.answer.name, result.answer.heal) == (result.judged[0].answer.name, result.judged[0].answer.heal)


def test_judgments_no_candidate_keeps_exit_3_naming_the_judgments(first, tiny_bert, capsys):
    """Only the source's own top 10 judged relevant: a candidate keeps 0.9999 only by finding exactly those; the
    command exits 3 and says no candidate kept it by the judgments."""
    root, common, _ = first
    with np.load(root / ("out" + WORK_SUFFIX) / SOURCE_FILE.format(0)) as saved:
        source = saved["top"]
    _fill(root / "pairs.jsonl", root / "source.jsonl", lambda p: int(p["doc_id"]) in set(source[int(p["query_id"])]))
    small = [*SMALL_SEARCH_CLI, "--no-static", "--keep-work", "--layers", "1", "--objective", "size",
             "--time-budget", "10m"]
    code = main(["auto", str(tiny_bert), "--corpus", common["corpus"][0], "--queries", common["queries"][0],
                 "--judged-choice", "--judgments", str(root / "source.jsonl"), "--min-retention", "1.0",
                 "-o", str(root / "out"), "--overwrite", *small])
    assert code == 3
    err = capsys.readouterr().err
    assert "by your judgments" in err
    record = json.loads((root / "out" / "auto.json").read_text())
    judged = {(c["candidate"], c["heal"]): c["judged"][0]["retention"] for c in record["judged_choice"]}
    best = max(judged, key=judged.get)  # what the search reached: the best by the judgments, not by the estimate
    assert (record["answer"]["candidate"], record["answer"]["heal"]) == best and not record["met"]


def test_a_judge_command_fills_the_pairs_and_chooses_in_the_same_run(first, tiny_bert):
    """--judge-command: the pairs written are filled by the program (here: every pair relevant, per query) and the
    cheapest candidate answers on them in one run; the final check judges the export on the same file. A program
    that fails stops the run (exit 1) keeping what it judged and the search's work."""
    import sys

    from espresso_export.core.errors import RuntimeFailure

    root, common, _ = first
    script = root / "all_relevant.py"
    script.write_text("import json, sys\nq = json.load(sys.stdin)\nprint('\\n'.join('1' for _ in q['documents']))\n",
                      encoding="utf-8")
    pairs = root / "by-command.jsonl"
    result = auto(tiny_bert, root / "out", min_retention=0.9999, write_judging=str(pairs), overwrite=True,
                  judge_command=f"{sys.executable} {script}", judge_per_query=True, **common)
    assert result.met and result.passed and result.chosen_on == "your judgments"
    cheapest = result.judged[0]
    assert (result.answer.name, result.answer.heal) == (cheapest.answer.name, cheapest.answer.heal)
    assert cheapest.rows[0].retention == pytest.approx(1.0) and cheapest.rows[0].judged == 30
    assert any(line.startswith("judged choice: ") and f"pairs judged by {sys.executable}" in line
               for line in result.log), result.log
    filled = [json.loads(line)["relevance"] for line in pairs.read_text().splitlines()]
    assert filled and set(filled) == {1}
    report = json.loads((root / "out" / "verify.json").read_text())
    assert report["judged"][0]["retention"] == pytest.approx(1.0) and report["gate"]["passed"]
    script.write_text("import sys\nsys.exit('the endpoint is down')\n", encoding="utf-8")
    with pytest.raises(RuntimeFailure, match="the endpoint is down"):
        auto(tiny_bert, root / "out", min_retention=0.9999, write_judging=str(root / "failing.jsonl"),
             overwrite=True, judge_command=f"{sys.executable} {script}", judge_per_query=True, **common)
    assert (root / ("out" + WORK_SUFFIX)).is_dir() and (root / "failing.jsonl").is_file()
    with pytest.raises(ValidationError, match="--judge-command fills the pairs"):
        AutoSettings(**common, judge_command="judge.py", judgments=str(pairs))
    with pytest.raises(ValidationError, match="give --judged-choice too"):  # the final check alone would not choose
        AutoSettings(**{**common, "judged_choice": False}, judge_command="judge.py",
                     write_judging=str(root / "unused.jsonl"))


def test_judged_choice_needs_judgments_and_a_float_objective(docs):
    with pytest.raises(ValidationError, match="--judged-choice chooses on your judgments"):
        AutoSettings(corpus=[str(docs)], judged_choice=True)
    with pytest.raises(ValidationError, match="by latency or size"):
        AutoSettings(corpus=[str(docs)], judged_choice=True, write_judging="pairs.jsonl",
                     objective="bytes-per-vector")


def test_without_judgments_the_pairs_stop_at_the_estimates_own_answer(first):
    """A costlier candidate than the one the estimate answers with is no better an answer: its pairs are not
    written to judge (every candidate's are when the estimate answers none)."""
    from types import SimpleNamespace

    from espresso_export.searching.candidates import cost, find
    from espresso_export.searching.judged_choice import _to_pool

    root, common, result = first
    cands = result.measured
    best = {c.name: max(h.retention for h in c.scores.values()) for c in cands}
    s = AutoSettings(**{**common, "objective": "latency"}, min_retention=min(best.values()),
                     write_judging=str(root / "unused.jsonl"))
    said: list[str] = []
    ctx = SimpleNamespace(settings=s, queries=24, say=lambda line, **_: said.append(line))
    order = judged_order(cands, s)
    pooled = _to_pool(ctx, cands, order)

    def price(a):
        return cost(find(cands, a.name), s.objective, a.measured, s.min_retention, s.precision)

    assert pooled == [a for a in order if price(a) <= price(order[0])] and pooled[0] == order[0]
    assert (len(pooled) < len(order)) == bool(said)
    unreachable = AutoSettings(**{**common, "objective": "latency"}, min_retention=1.4,
                               write_judging=str(root / "unused.jsonl"))
    assert _to_pool(SimpleNamespace(settings=unreachable, queries=24, say=said.append), cands,
                    judged_order(cands, unreachable)) == judged_order(cands, unreachable)


def test_an_answer_chosen_on_a_judged_interval_reaching_below_the_target_says_so(tmp_path):
    """Ten judged queries whose retention reads 0.96 with an interval reaching below 0.95: the hint gives the
    interval and says more judged queries narrow it; judged alike on every query, it says nothing of the kind."""
    from espresso_export.searching.answer import Answer
    from espresso_export.searching.auto_result import judged_hint
    from espresso_export.searching.candidates import Heal
    from espresso_export.searching.judged_choice import JudgedCheck
    from espresso_export.searching.scoring import Score
    from espresso_export.verification.judging import JudgedRow

    docs = tmp_path / "docs.txt"
    docs.write_text("a b c d e f\n")
    (tmp_path / "j.jsonl").write_text(json.dumps({"query_id": "0", "doc_id": "0", "relevance": 1}) + "\n")
    s = AutoSettings(corpus=[str(docs)], min_retention=0.95, judged_choice=True, judgments=str(tmp_path / "j.jsonl"))
    score = Score(384, "float32", 0.9, (0.89, 0.91), 0.9, 1536)
    answer = Answer("static", "r1", Heal(score, (score,)), score)
    source = np.array([0.8, 0.6, 1.0, 0.5, 0.9, 0.7, 0.4, 1.0, 0.6, 0.5])
    noisy = JudgedRow("docs.txt", candidate=source * np.array([1.3, 0.6, 1.0, 1.2, 0.8, 1.0, 1.5, 0.9, 1.0, 0.8]),
                      source=source)
    assert noisy.retention >= 0.95 and noisy.ci95[0] < 0.95
    hint = judged_hint(s, [JudgedCheck(answer, (noisy,), 0.0)], met=True)
    lo, hi = noisy.ci95
    assert f"its judged retention {noisy.retention:.3f} [{lo:.2f}-{hi:.2f}] over 10 queries on docs.txt reaches " \
           "below 0.95" in hint and "judging more of your queries narrows it" in hint
    alike = JudgedRow("docs.txt", candidate=source, source=source)
    assert "reaches below" not in judged_hint(s, [JudgedCheck(answer, (alike,), 0.0)], met=True)
