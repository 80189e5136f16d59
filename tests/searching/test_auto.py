"""``auto`` end to end on the tiny BERT: the proxy prunes, the rungs halve, a stopped search resumes without
recomputing, the budget holds, the outputs are complete, and the recipe it writes rebuilds the same model."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from espresso_export.searching.search import auto
from espresso_export.searching.work import STATE

pytest.importorskip("faiss", reason="auto searches with faiss (pip install 'espresso-export[eval]')")

# titles: the tiny random model's cuts then score below its source, so a target can ask for a heal; its source finds
# few known items, so its scores' intervals are wide: these tests check the search's mechanics, not its estimate
# (max_noise; tests/searching/test_undecided.py checks that such scores decide nothing by default)
SMALL = dict(eval_passages=80, eval_queries=24, max_texts=400, batch_size=16, threads=1, keep_work=True,
             known_items="title",
             max_noise=10.0)


@pytest.fixture(scope="module")
def searched(tmp_path_factory, tiny_bert, docs):
    """One whole search: rung 0, an answer from it (a random tiny model's cuts keep all of its known-item score),
    the finish; a second run continues the first's work folder."""
    out = tmp_path_factory.mktemp("auto") / "out"
    auto(tiny_bert, out, corpus=[str(docs)], min_retention=0.9, time_budget="1s", **SMALL)
    start = time.perf_counter()
    result = auto(tiny_bert, out, corpus=[str(docs)], min_retention=0.9, time_budget="60s",
                  objective="bytes-per-vector", overwrite=True, **SMALL)
    return out, result, time.perf_counter() - start


def test_outputs_are_complete(searched):
    out, result, _ = searched
    record = json.loads((out / "auto.json").read_text())
    assert record["candidates"] and record["objective"] == "bytes-per-vector"
    header = (out / "auto.csv").read_text().splitlines()[0]
    assert header.startswith("candidate,stage,texts,retention")
    assert (out / "auto.png").stat().st_size > 0
    assert result.met, result.log
    for name in ("model/config.json", "export/export.json", "verify.json", "README.md", "recipe.yaml"):
        assert (out / name).is_file(), name
    # each depth spread and first (bytes: the full depth competes, once)
    assert {c["name"] for c in result.candidates} == {"L1", "L2", "L3", "L4", "L1f", "L2f", "L3f"}
    first = next(c for c in result.candidates if c["name"] == "L2f")
    assert first["layers"] == [0, 1] and first["params"] == next(c for c in result.candidates
                                                                 if c["name"] == "L2")["params"]
    assert all("plain" in c["scores"] and c["scores"]["plain"]["variants"] for c in result.candidates)
    # the stored form is chosen again on all the documents: the fewest bytes whose known-item retention keeps it
    report = json.loads((out / "verify.json").read_text())
    kept = sorted(v["bytes_per_vector"] for row in report["agreement"] for v in row["variants"]
                  if v["known_item"]["retention"] >= 0.9 and (v["precision"] != "binary" or v["rescore"] == 4))
    assert len({(v["precision"], v["dim"]) for v in report["agreement"][0]["variants"]}) > 2
    moved = [h for h in result.hints if h.startswith("stored form chosen again")]
    if kept:  # how the tiny model's heals fall depends on the machine's speed: the rule holds either way
        assert record["winner"]["vectors"]["bytes_per_vector"] == kept[0]
    else:  # no form keeps it on all the documents: the search's form stays, and the recheck says so
        checked = record["verify"]["failed"] + record["verify"]["within_noise"]
        assert not moved and any(line.startswith("known-item retention on all of") for line in checked)


def test_the_search_halves_by_score_within_its_budget(tmp_path, tiny_bert, docs):
    """The tiny random model's cuts score at or above its source, so no target asks for a heal; here their rung-0
    scores are set below the target (the only thing not measured), and the rungs heal for real."""
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.rung0 import rung0
    from espresso_export.searching.search import Work, _prepare, _search, fingerprint

    s = AutoSettings(corpus=[str(docs)], min_retention=0.97, time_budget="150s", layers=[1, 2, 3],
                     **{k: v for k, v in SMALL.items() if k != "keep_work"})
    work = Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False)
    ctx = _prepare(str(tiny_bert), s, work, progress=False)
    cands = [c for c in rung0(ctx) if c.name in ("L1", "L2", "L3")]  # the spread cuts: the halving's subject
    for c, plain in zip(cands, (0.80, 0.85, 0.90)):
        c.scores["plain"]["retention"] = plain
    start = time.perf_counter()
    _search(ctx, cands)
    assert time.perf_counter() - start <= s.budget_seconds * 1.5  # scoring the last heal comes on top
    heals = {k: v for k, v in work.state["steps"].items() if k.startswith("heal-")}
    assert heals, ctx.log
    rung1 = [c for c in cands if "r1" in c.scores]
    rung2 = [c for c in cands if "r2" in c.scores]
    assert rung1 and len(rung2) < len(rung1) or not rung2
    if rung2:  # the survivors were healed on more text
        assert rung2[0].scores["r2"]["texts"] > rung2[0].scores["r1"]["texts"]
    assert any(line.startswith("plan:") for line in ctx.log)


def test_budget_the_plan_left_heals_the_best_candidate_longer(tmp_path, tiny_bert, docs):
    """The planned rungs ended early (here: a last rung of 100 texts scored below the target, the one thing not
    measured): the time left heals its best candidate again, on a longer ladder length that fits."""
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.plan import Rung
    from espresso_export.searching.rung0 import rung0
    from espresso_export.searching.search import Work, _extend, _prepare, fingerprint

    s = AutoSettings(corpus=[str(docs)], min_retention=0.97, time_budget="120s", layers=[1, 2],
                     **{k: v for k, v in SMALL.items() if k != "keep_work"})
    work = Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False)
    ctx = _prepare(str(tiny_bert), s, work, progress=False)
    cands = [c for c in rung0(ctx) if c.name in ("L1", "L2")]
    for c, score in zip(cands, (0.5, 0.6)):
        c.scores["r1"] = {"retention": score, "texts": 100}
    _extend(ctx, cands, Rung(1, 2, 100))
    longer = [line for line in ctx.log if "longer, on" in line]
    assert longer and cands[1].name in longer[0]  # the best of the last rung
    assert cands[1].scores["r2"]["texts"] > 100 and "r2" not in cands[0].scores


def test_budget_left_after_two_passes_over_the_healing_texts_heals_on_more_passes(tmp_path, tiny_bert, docs):
    """The plan's heals stop at two passes over the healing texts (sized by the teacher pass's share of the
    budget); a fast heal reaches that with budget left, which then heals the best again, up to four passes."""
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.plan import Rung
    from espresso_export.searching.rung0 import rung0
    from espresso_export.searching.search import (
        EXTEND_EPOCHS,
        Work,
        _extend,
        _prepare,
        fingerprint,
    )

    s = AutoSettings(corpus=[str(docs)], min_retention=0.97, time_budget="120s", layers=[1],
                     **{k: v for k, v in SMALL.items() if k != "keep_work"})
    work = Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False)
    ctx = _prepare(str(tiny_bert), s, work, progress=False)
    cand = next(c for c in rung0(ctx) if c.name == "L1")
    two_passes = 2 * ctx.heal_texts
    cand.scores["r1"] = {"retention": 0.5, "texts": two_passes}
    _extend(ctx, [cand], Rung(1, 1, two_passes))
    assert two_passes < cand.scores["r2"]["texts"] <= EXTEND_EPOCHS * ctx.heal_texts, ctx.log


def test_a_heal_the_budget_ends_inside_stops_there_and_a_larger_budget_continues_it(tmp_path, tiny_bert, docs):
    """The plan expects the heal to fit (its speed set optimistic: the one thing not measured); the heal runs
    past the budget, is stopped at its next step with its checkpoint kept, and a later search resumes it."""
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.plan import Rung, Speed
    from espresso_export.searching.rung0 import rung0
    from espresso_export.searching.rungs import run_rung
    from espresso_export.searching.search import Work, _prepare, fingerprint
    from espresso_export.training.resume import read_checkpoint_meta

    s = AutoSettings(corpus=[str(docs)], min_retention=0.97, time_budget="600s", layers=[2],
                     **{k: v for k, v in SMALL.items() if k != "keep_work"})
    work = Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False)
    ctx = _prepare(str(tiny_bert), s, work, progress=False)
    cand = rung0(ctx)[0]
    ctx.speed = Speed(1e-6, ctx.speed.depth, 1e-9)
    ctx.reserve = 0.0  # the clock below is set to leave `left` seconds for the heal itself, no finish after it
    rung = Rung(1, 1, 16 * 400)
    run_dir = work.path("runs", f"{cand.name}-{rung.texts}")
    # loading and the teacher pass come first: a second more each time until training (up to half a minute of
    # them on a slow machine)
    for left in range(1, 31):
        ctx.start, ctx.stopped = time.perf_counter() - s.budget_seconds + left, False
        assert run_rung(ctx, [cand], rung) == {}
        assert ctx.stopped and "budget ran out while healing" in ctx.log[-1]
        if read_checkpoint_meta(run_dir) is not None:
            break
    assert work.done(f"heal-{cand.name}-{rung.texts}") is None
    meta = read_checkpoint_meta(run_dir)
    assert meta is not None and 0 < meta["step"] < rung.steps(s.batch_size), meta
    ctx.start, ctx.stopped = time.perf_counter(), False  # the same search, a larger budget
    assert cand.name in run_rung(ctx, [cand], rung)
    assert cand.scores["r1"]["resumed_from"] == meta["step"]


def _as_sampled(record):
    """A step's record as the sample measured it: a later run may also score a stage on all the documents
    (:mod:`espresso_export.searching.all_documents`, within its own budget), which keeps the sample's numbers."""
    if not isinstance(record, dict):
        return record
    stages = record.get("scores", {"": record})
    out = {k: v for k, v in record.items() if k != "scores"}
    sampled = {k: {**{f: v for f, v in st.items() if f not in ("sample", "documents")}, **st.get("sample", {})}
               if isinstance(st, dict) and "retention" in st else st for k, st in stages.items()}
    return {**out, "scores": sampled} if "scores" in record else sampled[""]


def _kept(before, after) -> bool:
    """Whether a step's record ``after`` a resumed search holds what the step measured ``before``, unchanged. A plain
    cut's record is its candidate, whose later stages (``r1``, ``r2``, ...) name the heals of the last search that
    ran; how far a search heals, and on which ladder, depends on the machine's speed and the budget left, so only
    the step's own stage, ``plain``, is compared there (each heal is a step of its own, compared whole)."""
    before, after = _as_sampled(before), _as_sampled(after)
    if isinstance(before, dict) and isinstance(after, dict) and "scores" in before:
        def own(record):
            return {**{k: v for k, v in record.items() if k != "scores"}, "plain": record["scores"].get("plain")}

        return own(before) == own(after)
    return before == after


def test_resume_recomputes_nothing(searched, tiny_bert, docs, tmp_path):
    searched_out, first, _ = searched
    out = tmp_path / "out"  # a copy: the shared search's folders stay as the other tests read them
    shutil.copytree(searched_out, out)
    shutil.copytree(searched_out.with_name(searched_out.name + ".auto-work"), tmp_path / "out.auto-work")
    work = tmp_path / "out.auto-work"
    before = json.loads((work / STATE).read_text())["steps"]
    # the same command on the same output resumes from its work folder
    result = auto(tiny_bert, out, corpus=[str(docs)], min_retention=0.9, time_budget="60s",
                  objective="bytes-per-vector", overwrite=True, **SMALL)
    after = json.loads((work / STATE).read_text())["steps"]
    assert before.keys() <= after.keys()
    for key, value in before.items():
        assert _kept(value, after[key]), (key, value, after[key])  # nothing finished was measured again
    assert {c["name"] for c in result.candidates} == {c["name"] for c in first.candidates}


def test_a_budget_too_small_for_any_heal_answers_from_plain_cuts(tmp_path, tiny_bert, docs):
    result = auto(tiny_bert, tmp_path / "out", corpus=[str(docs)], min_retention=0.5, time_budget="1s", **SMALL)
    assert any("no heal fits the budget" in line for line in result.log)
    assert all(set(c["scores"]) == {"plain"} for c in result.candidates)
    assert result.met and result.winner.stage_name == "plain"


def test_the_healing_texts_hold_sentences_of_the_documents_but_no_query_of_either_check(tmp_path, tiny_bert, docs):
    from espresso_export.data.pseudo_queries import cloze_queries, pseudo_queries, read_passages, split_sentences
    from espresso_export.searching.evaluation import eval_set, read_documents

    small = {**SMALL, "known_items": "sentence", "check_queries": 60}
    # a budget whose teacher share affords the 400 texts on a slow or busy machine too (the count is sized by the
    # measured speed); the plain cuts keep 0.5, so nothing is healed and the search ends as quickly
    auto(tiny_bert, tmp_path / "out", corpus=[str(docs)], min_retention=0.5, time_budget="120s", **small)
    work = tmp_path / "out.auto-work"
    record = json.loads((work / STATE).read_text())["steps"]["healing_texts"]
    texts = (work / "healing-texts.txt").read_text(encoding="utf-8").splitlines()
    passages = read_passages(str(docs))
    bodies = {i: passages.texts[i][len(passages.titles[i]) + 1:] for i in range(len(passages.texts))}
    sentence_of = {x: i for i, b in bodies.items() for x in split_sentences(b)}
    cut = [t for t in texts if t in sentence_of]
    assert record["document_sentences"] == len(cut) > 50 and record["documents"] + len(cut) == len(texts)
    # none from a document the search's own known-item queries come from, none the final check asks
    held_out = eval_set(read_documents([str(docs)]), passages=small["eval_passages"], queries=small["eval_queries"],
                        seed=0, method="sentence").held_out
    assert held_out and not {sentence_of[t] for t in cut} & held_out
    asked = set(cloze_queries(passages, "sentence", limit=60, seed=0).texts)
    asked |= set(pseudo_queries(passages, "title", limit=60, seed=0).texts)
    assert len(asked & set(sentence_of)) >= 50 and not asked & set(cut)


@pytest.mark.parametrize("objective", [pytest.param("latency", marks=pytest.mark.slow), "size"])  # size: a superset
def test_the_recipe_rebuilds_the_winner(tmp_path, tiny_bert, docs, objective):
    """For the size objective the answer's vocabulary is pruned to the documents' and healing texts' tokens, and
    the recipe prunes the same way."""
    from dataclasses import replace

    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.pipeline.recipe_runner import run_recipe
    from espresso_export.pipeline.recipes import load_recipe

    out = tmp_path / "out"
    result = auto(tiny_bert, out, corpus=[str(docs)], min_retention=0.5, time_budget="60s", layers=[2],
                  objective=objective, **SMALL)
    assert result.winner is not None
    if not result.met:
        pytest.skip("the tiny model met no target here: nothing was built to rebuild")
    recipe = replace(load_recipe(out / "recipe.yaml"), output=tmp_path / "rebuilt")
    rebuilt = run_recipe(recipe)
    assert rebuilt.passed and rebuilt.steps[0].kind in ("distill", "shrink")
    texts = ["the dog runs", "a red car in the house"]
    built, again = (load(d) for d in (out / "model", rebuilt.steps[0].folder))
    np.testing.assert_allclose(encode(built, texts), encode(again, texts), atol=1e-5)
    vocab = json.loads((out / "auto.json").read_text())["vocabulary"]
    if objective == "size":
        assert vocab["vocab_after"] < vocab["vocab_before"] and vocab["params_after"] < vocab["params_before"]
        assert built.n_params == again.n_params == vocab["params_after"]
        assert (out / "vocab-texts.txt").is_file() and any("vocabulary pruned" in h for h in result.hints)
    else:
        assert vocab is None and not (out / "vocab-texts.txt").exists()


def test_a_recipe_step_takes_the_same_settings(tmp_path, docs):
    from espresso_export.pipeline.recipes import parse_recipe

    text = (f"source: minilm\nsteps:\n  - auto:\n      corpus: [{docs}]\n      objective: bytes-per-vector\n"
            f"      time_budget: 45m\n      min_retention: 0.95\n  - push: {{repo_id: me/x, dry_run: true}}\n")
    recipe = parse_recipe(text, base=tmp_path)
    step = recipe.steps[0]
    assert step.kind == "auto" and step.config.objective.value == "bytes-per-vector"
    assert step.config.budget_seconds == 45 * 60 and step.config.corpus == [str(docs)]


def test_nothing_meets_the_target_exit_3_with_the_best_reached(tmp_path, tiny_bert, docs, capsys):
    from espresso_export.cli.app import main

    out = tmp_path / "out"
    code = main(["auto", str(tiny_bert), "--corpus", str(docs), "--min-retention", "1.4", "--time-budget", "1s",
                 "--eval-passages", "80", "--eval-queries", "24", "--threads", "1", "--layers", "1,2",
                 "--known-items", "title", "-o", str(out)])
    assert code == 3
    err = capsys.readouterr()
    record = json.loads((out / "auto.json").read_text())
    assert record["passed"] is False and record["met"] is False
    assert out.with_name("out.auto-work").is_dir()  # kept without --keep-work: a larger budget continues it
    assert "no candidate kept 1.4" in err.err and "best reached" in err.out and "--overwrite continues" in err.err
    assert record["winner"]["stage"] == "plain" and not (out / "model").exists()


def test_a_pick_the_sample_flattered_gives_way_to_the_next_cheapest(tmp_path, tiny_bert, docs):
    """The sample's scores of the plain cuts are set to 1.0 (the one thing not measured: a sample that flatters);
    on all the documents each keeps what it keeps, and the finish checks the smallest, then the next smallest
    while the one checked keeps less than the target there, MAX_ANSWERS at most, the last one checked being the
    answer. No labels are given: they play no part in the choice."""
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.finish import MAX_ANSWERS, finish
    from espresso_export.searching.rung0 import rung0
    from espresso_export.searching.search import Work, _prepare, fingerprint

    s = AutoSettings(corpus=[str(docs)], min_retention=0.99, time_budget="60s", objective="size",
                     **{k: v for k, v in SMALL.items() if k != "keep_work"})
    work = Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False)
    ctx = _prepare(str(tiny_bert), s, work, progress=False)
    cands = rung0(ctx)
    for c in cands:
        c.scores["plain"]["retention"] = 1.0
    result = finish(ctx, cands, tmp_path / "out", overwrite=False)

    assert result.met and result.winner is not None
    gave_way = [h for h in result.hints if "on the search's sample but " in h and "less than 0.99" in h]
    checked = [h.split(" (")[0] for h in gave_way] + [result.winner.name]
    by_size = [c.name for c in sorted(cands, key=lambda c: c.params)]
    assert checked == by_size[:len(checked)], (checked, by_size)  # the smallest first, then the next smallest
    full = result.verify["known_item"]["docs.jsonl"]["retention"]
    assert full >= 0.99 or len(checked) == MAX_ANSWERS
    assert all(f"on all of docs.jsonl, less than 0.99: checked the next cheapest, {nxt} (plain)" in h
               for h, nxt in zip(gave_way, checked[1:]))
    record = json.loads((tmp_path / "out" / "auto.json").read_text())
    assert record["winner"]["candidate"] == result.winner.name
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == ["export", "model"]


def test_bytes_per_vector_checks_the_next_pick_when_the_answer_stores_more_on_all_documents(tmp_path, tiny_bert,
                                                                                          docs):
    """Each plain cut's binary form is set to keep the target on the sample at 16 dims, 1 byte (the one thing not
    measured: a sample that flatters, here with a form the finish does not measure); on all the documents the
    answer's form is chosen again among those measured, at more bytes, so the next pick, 1 byte on the sample,
    is built and checked too, and the one storing fewer bytes on all the documents is the answer, alone in the
    output."""
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.finish import finish
    from espresso_export.searching.rung0 import rung0
    from espresso_export.searching.search import Work, _prepare, fingerprint

    s = AutoSettings(corpus=[str(docs)], min_retention=0.9, time_budget="60s", objective="bytes-per-vector",
                     **{k: v for k, v in SMALL.items() if k != "keep_work"})
    work = Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False)
    ctx = _prepare(str(tiny_bert), s, work, progress=False)
    cands = rung0(ctx)
    for c in cands:
        for v in c.scores["plain"]["variants"]:
            if v["precision"] == "binary":
                v.update(retention=1.0, bytes_per_vector=1, dim=16)
            else:
                v["retention"] = min(v["retention"], 0.5)
    result = finish(ctx, cands, tmp_path / "out", overwrite=False)

    second = [h for h in result.hints if "checked it too" in h]
    assert len(second) == 1, result.hints
    checked, first = second[0].split(" (")[0], second[0].split("fewer than ")[1].split(" (")[0]
    assert {checked, first} <= {c.name for c in cands} and checked != first
    assert result.winner.name == (first if second[0].endswith(f"{first} stays the answer") else checked)
    stored = result.winner.variant
    assert stored["measured_on"] == "all documents" and stored["retention"] >= 0.9 and stored["bytes_per_vector"] > 1
    record = json.loads((tmp_path / "out" / "auto.json").read_text())
    assert record["winner"]["candidate"] == result.winner.name
    config = json.loads((tmp_path / "out" / "model" / "config.json").read_text())
    depth = next(c.depth for c in cands if c.name == result.winner.name)
    assert config["num_hidden_layers"] == depth  # the kept answer's model, not the other's
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == ["export", "model"]


def test_a_heal_that_diverged_is_healed_again_at_a_third_of_the_learning_rate(tmp_path, tiny_bert, docs):
    """A heal starts from the cut rung 0 scored, so one ending far below its candidate's earlier score diverged.
    That earlier score is set out of reach (the one thing not measured: the tiny model does not diverge), so the
    first heal reads as diverged; the second try trains at a third of the first's learning rate, its score is the
    stage's, the first try is recorded beside it, and the recipe's settings carry the rate it used."""
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.plan import Rung
    from espresso_export.searching.rung0 import rung0
    from espresso_export.searching.rungs import RETRY_LR, run_rung
    from espresso_export.searching.search import Work, _prepare, fingerprint

    s = AutoSettings(corpus=[str(docs)], min_retention=0.97, time_budget="300s", layers=[1],
                     **{k: v for k, v in SMALL.items() if k != "keep_work"})
    work = Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False)
    ctx = _prepare(str(tiny_bert), s, work, progress=False)
    cand = next(c for c in rung0(ctx) if c.name == "L1")
    ctx.model.release()
    cand.scores["plain"]["retention"] = 10.0
    found = run_rung(ctx, [cand], Rung(1, 1, 64))

    stage = cand.scores["r1"]
    assert found == {"L1": stage["retention"]} and "diverged" in stage
    first_lr = json.loads((tmp_path / "out.auto-work" / "heals" / "L1-64" / "espresso.json").read_text())
    second = json.loads((Path(stage["folder"]) / "espresso.json").read_text())
    assert Path(stage["folder"]).name != "L1-64"
    assert second["training"]["lr"] == pytest.approx(RETRY_LR * first_lr["training"]["lr"])
    assert stage["settings"]["lr"] == pytest.approx(second["training"]["lr"])
    assert "lr" not in stage["diverged"]["settings"]  # the first try ran at distill's own default
    assert any("the heal diverged; healing it again at lr" in line for line in ctx.log)


def test_the_cheapest_keeping_the_target_on_the_sample_is_scored_again_on_all_documents(tmp_path, tiny_bert, docs):
    """Known-item retention falls as the index grows, so the search's sample (80 of the 240 documents) flatters.
    The cheapest candidate keeping the target there is scored again with the same queries over all 240: the
    model the recipe rebuilds, searched over every document, gives that score; the sample's is kept beside it;
    the work folder keeps it, so the search resumed scores nothing again."""
    from espresso_export.model.checkpoint import load
    from espresso_export.searching import candidates as C
    from espresso_export.searching.all_documents import settle
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.evaluation import EvalSet
    from espresso_export.searching.finish import pick
    from espresso_export.searching.recipe_file import plain_calibration
    from espresso_export.searching.rung0 import rung0
    from espresso_export.searching.search import Work, _prepare, fingerprint
    from espresso_export.shrinking.shrink import shrink
    from espresso_export.verification.known_item import known_item

    s = AutoSettings(corpus=[str(docs)], min_retention=0.5, time_budget="300s", layers=[1, 2],
                     **{k: v for k, v in SMALL.items() if k != "keep_work"})
    work = Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False)
    ctx = _prepare(str(tiny_bert), s, work, progress=False)
    cands = rung0(ctx)
    chosen = pick(cands, s, len(ctx.scorer.ev.cloze))
    on_sample = chosen.stage["retention"]
    settle(ctx, cands)

    cand = next(c for c in cands if c.name == chosen.name)
    stage = cand.scores["plain"]
    assert stage["documents"] == 240 and stage["sample"]["retention"] == on_sample
    assert len(ctx.scorer.ev.passages) == 80 and len(ctx.scorer.ev.others) == 160
    ev = ctx.scorer.ev
    every = EvalSet(ev.passages + ev.others, ev.cloze, ev.held_out)
    calibration, samples = plain_calibration(ctx, cand)
    shrink(tiny_bert, tmp_path / "rebuilt", layers=cand.layers, dim=ctx.dim, calibration=str(calibration),
           calibration_samples=samples, seed=s.seed, progress=False)
    theirs = C.timed_vectors(load(tmp_path / "rebuilt"), every, s.scoring)[0]
    source = C.timed_vectors(load(tiny_bert), every, s.scoring)[0]
    expected = known_item(source.triple(), theirs.triple(), ev.cloze.origins).retention
    assert stage["retention"] == pytest.approx(expected, abs=1e-3)
    assert {v["dim"] for v in stage["variants"]} == {v["dim"] for v in stage["sample"]["variants"]}
    assert any(f"{cand.name} (plain): known-item retention" in line and "on all 240 documents" in line
               for line in ctx.log)

    resumed = Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False)
    ctx = _prepare(str(tiny_bert), s, resumed, progress=False)
    again = rung0(ctx)
    settle(ctx, again)
    assert next(c for c in again if c.name == cand.name).scores["plain"] == stage
    assert not any("on all 240 documents" in line for line in ctx.log)
