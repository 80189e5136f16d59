"""``auto`` end to end on the tiny BERT: the proxy prunes, the rungs halve, a continued search recomputes nothing,
the budget holds, the outputs are complete, and the recipe it writes rebuilds the same model.

Every assertion runs on every machine. The tiny BERT's scores on these documents are known, in float32 (``amp``
off: a CPU with bf16 would otherwise score in it): its plain cuts keep 0.895 of its known-item score, L3 1.014
and L4 (its own depth, a PCA head) 0.881; its heals keep less (0.80 to 0.89). So a target of 0.97 asks L1, L1f, L2
and L2f for a heal and L3 answers plain, and 0.85 is kept by every plain cut. What a machine's speed decides (how
many rungs, how long each heal) is set where a test depends on it: a search continued in a work folder plans with
the speed its first run recorded there, and :func:`_set_speed` records one slower than any machine that runs them.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from espresso_export.searching.auto import auto
from espresso_export.searching.auto_result import AutoResult
from espresso_export.searching.candidates import PLAIN
from espresso_export.searching.work import STATE, WORK_SUFFIX

from small_search import SMALL_SEARCH

pytest.importorskip("faiss", reason="auto searches with faiss (pip install 'espresso-export[eval]')")

# titles: a known-item query is a document's title. The tiny random model's source finds few known items, so its
# scores' intervals are wide: these tests check the search's mechanics, not its estimate (max_noise;
# tests/searching/test_undecided.py checks that such scores decide nothing by default)
SMALL = {**SMALL_SEARCH, "static": False}  # static: test_auto_static.py
# texts per second the halved search plans with: at this speed a 10-minute budget keeps ~2.6 min for the finish
# and plans two rungs for the four cuts a heal may lift to 0.97 (4 x 300 texts, then the 2 best on 700: two passes
# over the 400 healing texts, rounded down the ladder); what the real heals leave of it heals the best again
SLOW = 32


def _set_speed(work: Path, texts_per_second: float, train_cost: float = 3.0) -> None:
    """The speed a search continued in ``work`` plans with (what its first run measured, and the heals since),
    set: the one thing not measured. Slower than any machine that runs these tests, so each plans the same rungs
    and no heal outruns its estimate."""
    path = work / STATE
    state = json.loads(path.read_text(encoding="utf-8"))
    state["steps"]["source"]["seconds_per_text"] = 1 / texts_per_second
    state["train_cost"] = train_cost
    path.write_text(json.dumps(state), encoding="utf-8")


def _steps(work: Path) -> dict:
    return json.loads((work / STATE).read_text(encoding="utf-8"))["steps"]


@dataclass(frozen=True)
class Search:
    out: Path
    result: AutoResult

    @property
    def work(self) -> Path:
        return self.out.with_name(self.out.name + WORK_SUFFIX)

    def candidate(self, name: str) -> dict:
        return next(c for c in self.result.candidates if c["name"] == name)

    def heals(self, heal: str) -> dict[str, dict]:
        """Each candidate's heal ``heal`` (``r1``, ...), by candidate."""
        return {c["name"]: c["scores"][heal] for c in self.result.candidates if heal in c["scores"]}


@pytest.fixture(scope="module")
def searched(tmp_path_factory, tiny_bert, docs) -> Search:
    """A search for the fewest bytes per vector keeping 0.85, continued from a first run whose one-second budget
    scored only the deepest cut: every plain cut keeps 0.85, so nothing is healed and the plain cuts answer. The
    user's queries are given: the final check reports their belief retention."""
    out = tmp_path_factory.mktemp("auto") / "out"
    queries = out.with_name("queries.txt")
    queries.write_text("".join(json.loads(line)["title"] + "\n" for line in docs.read_text().splitlines()[:30]))
    common = {"corpus": [str(docs)], "queries": [str(queries)], "objective": "bytes-per-vector", "keep_work": True,
              **SMALL}
    auto(tiny_bert, out, min_retention=1.4, time_budget="1s", **common)
    return Search(out, auto(tiny_bert, out, min_retention=0.85, time_budget="5m", overwrite=True, **common))


@pytest.fixture(scope="module")
def halved(tmp_path_factory, tiny_bert, docs) -> Search:
    """A search for the smallest model keeping 0.97, continued from a first run of rung 0 alone (no cut keeps 1.4,
    nor could a heal lift one to it) at the speed :data:`SLOW`. Its first run's work is kept beside it
    (``rung0``)."""
    out = tmp_path_factory.mktemp("halved") / "out"
    work = out.with_name(out.name + WORK_SUFFIX)
    common = {"corpus": [str(docs)], "objective": "size", "keep_work": True, **SMALL}
    auto(tiny_bert, out, min_retention=1.4, time_budget="5m", **common)
    shutil.copytree(work, out.with_name("rung0"))
    _set_speed(work, SLOW)
    return Search(out, auto(tiny_bert, out, min_retention=0.97, time_budget="10m", overwrite=True, **common))


def test_outputs_are_complete(searched):
    out, result = searched.out, searched.result
    assert any(line.endswith("rung 0 (1 plain cut) reused") for line in result.log), result.log
    record = json.loads((out / "auto.json").read_text())
    assert record["candidates"] and record["objective"] == "bytes-per-vector"
    header = (out / "auto.csv").read_text().splitlines()[0]
    assert header.startswith("candidate,heal,texts,retention")
    assert (out / "auto.png").stat().st_size > 0
    assert result.met, result.log
    for name in ("model/config.json", "export/export.json", "verify.json", "README.md", "recipe.yaml"):
        assert (out / name).is_file(), name
    # each depth spread and first (bytes: the full depth competes, once), each kept plain
    assert {c["name"] for c in result.candidates} == {"L1", "L2", "L3", "L4", "L1f", "L2f", "L3f"}
    assert all(c["dropped"] == "meets the target untrained" for c in result.candidates)
    first = searched.candidate("L2f")
    assert first["layers"] == [0, 1] and first["params"] == searched.candidate("L2")["params"]
    assert all(set(c["scores"]) == {PLAIN} and c["scores"][PLAIN]["variants"] for c in result.candidates)
    # the stored form is chosen again on all the documents: the fewest bytes whose known-item retention keeps it
    report = json.loads((out / "verify.json").read_text())
    kept = sorted(v["bytes_per_vector"] for row in report["agreement"] for v in row["variants"]
                  if v["known_item"]["retention"] >= 0.85 and (v["precision"] != "binary" or v["rescore"] == 4))
    assert len({(v["precision"], v["dim"]) for v in report["agreement"][0]["variants"]}) > 2
    assert kept and record["answer"]["vectors"]["bytes_per_vector"] == kept[0] == result.answer.form.bytes_per_vector
    assert record["answer"]["heal"] == PLAIN and record["verify"]["passed"]
    # the estimate's measured error for the answer's kind: a plain cut's float vectors were measured, its stored
    # int8 or binary vectors were not, and the hint says which
    error = record["estimate_error"]
    assert error["kind"] == ("plain" if result.answer.form.precision == "float32" else None)
    assert bool(error["collections"]) == (error["kind"] is not None)
    assert any(h.startswith("the estimate's (with your queries)") for h in result.hints), result.hints
    assert record["chosen_on"] == "estimate with your queries"
    belief = record["verify"]["belief"][report["agreement"][0]["name"]]
    assert 0 < belief["by_queries"] <= 1 and belief["queries"] == 30  # the documents' side may read above 1
    assert belief["retention"] == max(belief["by_queries"], belief["by_documents"])
    assert any(h.startswith("belief retention on your 30 queries") for h in result.hints), result.hints
    # every candidate was scored on the user's queries too (the sample gained the documents they need)
    assert all(c["scores"][PLAIN]["asked"] is not None for c in result.candidates)
    assert any("30 of your queries" in line for line in result.log), result.log


def test_the_search_halves_by_score_within_its_budget(halved):
    """Four cuts a heal may lift to 0.97 (L3 keeps it untrained, L3f is as large): rung 1 heals all four on 300
    texts, none comes within the slack of the target, so the two best scored go on to 700 texts."""
    result = halved.result
    assert result.met and result.answer.describe() == "L3 (plain)"
    assert halved.candidate("L3")["dropped"] == "meets the target untrained"
    assert halved.candidate("L3f")["dropped"] == "L3, as fast and as large, meets the target untrained"
    plan = [line for line in result.log if line.startswith("plan:")]
    assert len(plan) == 1 and plan[0].startswith("plan: rungs 4 x 300 texts, 2 x 700 texts;"), result.log
    estimated, left = map(float, re.search(r"estimated ([\d.]+) min of ([\d.]+) left", plan[0]).groups())
    assert estimated <= left  # at the speed it planned with
    rung1, rung2 = halved.heals("r1"), halved.heals("r2")
    assert sorted(rung1) == ["L1", "L1f", "L2", "L2f"] and {h["texts"] for h in rung1.values()} == {300}
    assert len(rung2) == 2 and {h["texts"] for h in rung2.values()} == {700}
    dropped = [name for name in rung1 if name not in rung2]
    reasons = [halved.candidate(name)["dropped"] for name in dropped]
    assert all(reason.startswith("rung 1: halved") for reason in reasons), reasons
    margin = float(re.search(r"margin ([\d.]+)", reasons[0]).group(1))
    assert all(h["retention"] + margin < 0.97 for h in rung1.values())  # none may still reach it: the best go on
    assert min(rung1[name]["retention"] for name in rung2) >= max(rung1[name]["retention"] for name in dropped)
    assert result.timing["seconds"] < result.budget_seconds


def test_budget_the_plan_left_heals_the_best_again_up_to_four_passes(halved):
    """The planned heals end at two passes over the healing texts (the last rung's 700 of 400); none kept the
    target, so the budget left heals the best of the last rung again, longer, within four passes."""
    rung2, rung3 = halved.heals("r2"), halved.heals("r3")
    longer = [line for line in halved.result.log if "longer, on" in line]
    assert len(longer) == 1 and len(rung3) == 1, halved.result.log
    (best,) = rung3
    assert best in longer[0] and rung2[best]["retention"] == max(h["retention"] for h in rung2.values())
    texts = _steps(halved.work)["healing_texts"]["texts"]
    assert 2 * texts < rung3[best]["texts"] <= 4 * texts and f"on {rung3[best]['texts']:,} texts" in longer[0]


def test_a_search_continued_heals_nothing_again(halved, tiny_bert, docs, tmp_path):
    """The same command again, on a copy of the halved search's folders at the same speed: every step is read
    back, no heal runs again, and the search records the same candidates."""
    out = tmp_path / "out"
    shutil.copytree(halved.out, out)
    shutil.copytree(halved.work, tmp_path / f"out{WORK_SUFFIX}")
    work = tmp_path / f"out{WORK_SUFFIX}"
    _set_speed(work, SLOW)  # the heals recorded what they measured: the first plan's speed again
    before = _steps(work)
    result = auto(tiny_bert, out, corpus=[str(docs)], min_retention=0.97, time_budget="10m", objective="size",
                  keep_work=True, overwrite=True, **SMALL)
    assert _steps(work) == before
    assert any(line.endswith("rung 0 (6 plain cuts) and 7 heals reused") for line in result.log), result.log
    assert not [line for line in result.log if re.match(r"rung \d+: healing ", line)]  # each heal read back
    assert result.candidates == halved.result.candidates and result.answer == halved.result.answer


def test_a_budget_too_small_for_any_heal_answers_from_plain_cuts(halved, tiny_bert, docs, tmp_path):
    """Rung 0 done (the halved search's first run) with four cuts a heal may lift to 0.97: a budget of a second,
    spent before any heal, answers from the plain cuts."""
    shutil.copytree(halved.out.with_name("rung0"), tmp_path / f"out{WORK_SUFFIX}")
    result = auto(tiny_bert, tmp_path / "out", corpus=[str(docs)], min_retention=0.97, time_budget="1s",
                  objective="size", **SMALL)
    assert any("no heal fits the budget" in line for line in result.log), result.log
    assert all(set(c["scores"]) == {PLAIN} for c in result.candidates)
    waiting = [c["name"] for c in result.candidates if c["dropped"] is None]
    assert waiting == ["L1", "L1f", "L2", "L2f"]  # not dropped: a heal was wanted, none fitted
    assert result.met and result.answer.describe() == "L3 (plain)"


def test_the_healing_texts_hold_sentences_of_the_documents_but_no_query_of_either_check(tmp_path, tiny_bert, docs):
    from espresso_export.data.pseudo_queries import (
        known_item_queries,
        pseudo_queries,
        read_documents_of,
        split_sentences,
    )
    from espresso_export.searching.scoring import draw_sample, read_documents

    small = {**SMALL, "known_items": "sentence", "corpus_queries": 60}
    # a budget whose teacher share affords the 400 texts on a slow or busy machine too (the count is sized by the
    # measured speed); the plain cuts keep 0.5, so nothing is healed
    out = tmp_path / "out"
    auto(tiny_bert, out, corpus=[str(docs)], min_retention=0.5, time_budget="2m", layers=[1], keep_work=True,
         **small)
    record = _steps(out.with_name(out.name + WORK_SUFFIX))["healing_texts"]
    texts = (out / "healing-texts.txt").read_text(encoding="utf-8").splitlines()  # the recipe's, beside it
    documents = read_documents_of(str(docs))
    bodies = {i: documents.texts[i][len(documents.titles[i]) + 1:] for i in range(len(documents.texts))}
    sentence_of = {x: i for i, b in bodies.items() for x in split_sentences(b)}
    cut = [t for t in texts if t in sentence_of]
    assert record["document_sentences"] == len(cut) > 50 and record["documents"] + len(cut) == len(texts)
    # none from a document the search's own known-item queries come from, none the final check asks
    held_out = draw_sample(read_documents([str(docs)]), size=small["sample_documents"],
                           queries=small["sample_queries"], seed=0, method="sentence").held_out
    assert held_out and not {sentence_of[t] for t in cut} & held_out
    asked = set(known_item_queries(documents, "sentence", limit=60, seed=0).texts)
    asked |= set(pseudo_queries(documents, "title", limit=60, seed=0).texts)
    assert len(asked & set(sentence_of)) >= 50 and not asked & set(cut)


def _rebuilt(out: Path, folder: Path):
    """The recipe in ``out`` run into ``folder``: its result, and the model it built beside the answer's."""
    from espresso_export.model.checkpoint import load
    from espresso_export.pipeline.recipe_runner import run_recipe
    from espresso_export.pipeline.recipes import load_recipe

    recipe = load_recipe(out / "recipe.yaml")
    assert [step.kind for step in recipe.steps] == [recipe.steps[0].kind, "export", "verify"]
    check = recipe.steps[-1]  # its latency timed at the least (verify's default times up to 20 s per batch size)
    steps = [*recipe.steps[:-1], replace(check, config=replace(check.config, latency_budget=0.0))]
    rebuilt = run_recipe(replace(recipe, steps=steps, output=folder, threads=1))  # one thread, as the search
    assert rebuilt.passed and rebuilt.steps[0].kind in ("distill", "shrink")
    return rebuilt, load(out / "model"), load(rebuilt.steps[0].folder)


def _same_vectors(built, again) -> None:
    from espresso_export.model.embed import encode

    texts = ["the dog runs", "a red car in the house"]
    np.testing.assert_allclose(encode(built, texts), encode(again, texts), atol=1e-5)


def test_the_recipe_rebuilds_the_answer_with_its_vocabulary_pruned(halved, tmp_path):
    """For the size objective the answer's vocabulary is pruned to the documents' and healing texts' tokens, and
    the recipe prunes the same way."""
    out, result = halved.out, halved.result
    rebuilt, built, again = _rebuilt(out, tmp_path / "rebuilt")
    assert rebuilt.steps[0].kind == "shrink"  # the answer is L3 plain
    _same_vectors(built, again)
    vocab = json.loads((out / "auto.json").read_text())["vocabulary"]
    assert vocab["vocab_after"] < vocab["vocab_before"] and vocab["params_after"] < vocab["params_before"]
    assert built.n_params == again.n_params == vocab["params_after"]
    assert (out / "vocab-texts.txt").is_file() and any("vocabulary pruned" in h for h in result.hints)


@pytest.mark.slow
def test_the_recipe_rebuilds_the_fastest_answer(tmp_path, tiny_bert, docs):
    """For the latency objective the vocabulary is kept."""
    out = tmp_path / "out"
    result = auto(tiny_bert, out, corpus=[str(docs)], min_retention=0.85, time_budget="2m", layers=[2],
                  objective="latency", **SMALL)
    assert result.met and result.answer.heal == PLAIN  # L2 and L2f keep 0.895 untrained
    _, built, again = _rebuilt(out, tmp_path / "rebuilt")
    _same_vectors(built, again)
    assert json.loads((out / "auto.json").read_text())["vocabulary"] is None
    assert not (out / "vocab-texts.txt").exists()


def test_a_heal_the_budget_ends_inside_stops_there_and_a_larger_budget_continues_it(tmp_path, tiny_bert, docs):
    """The plan expects the heal to fit (its speed set optimistic: the one thing not measured); the heal runs
    past the budget, is stopped at its next step with its checkpoint kept, and a later search resumes it."""
    from espresso_export.searching.auto import prepare
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.budget import Speed
    from espresso_export.searching.halving import Rung, run_rung
    from espresso_export.searching.heals import heal_and_score
    from espresso_export.searching.plain_cuts import score_plain_cuts
    from espresso_export.searching.work import Work, fingerprint, heal_step
    from espresso_export.training.resume import read_checkpoint_meta

    s = AutoSettings(corpus=[str(docs)], min_retention=0.97, time_budget="600s", layers=[2], **SMALL)
    work = Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False)
    ctx = prepare(str(tiny_bert), s, work, progress=False)
    cand = score_plain_cuts(ctx)[0]
    # the teacher's targets are computed once per search and kept: a short heal first, so that the budgets below
    # cover loading and training only
    assert heal_and_score(ctx, cand, s.batch_size, "a short heal") is not None
    ctx.speed = Speed(1e-6, ctx.speed.depth, 1e-9)
    ctx.reserve = 0.0  # the clock below is set to leave `left` seconds for the heal itself, no finish after it
    rung = Rung(1, 1, 16 * 400)
    run_dir = work.path("runs", f"{cand.name}-{rung.texts}")
    # loading comes first: a second more each time until training
    for left in range(1, 31):
        ctx.start, ctx.stopped = time.perf_counter() - s.budget_seconds + left, False
        assert run_rung(ctx, [cand], rung) == {}
        assert ctx.stopped and "budget ran out while healing" in ctx.log[-1]
        if read_checkpoint_meta(run_dir) is not None:
            break
    assert work.done(heal_step(cand.name, rung.texts)) is None
    meta = read_checkpoint_meta(run_dir)
    assert meta is not None and 0 < meta["step"] < rung.texts // s.batch_size, meta
    ctx.start, ctx.stopped = time.perf_counter(), False  # the same search, a larger budget
    assert cand.name in run_rung(ctx, [cand], rung)
    assert cand.scores["r1"].resumed_from == meta["step"]


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
                 "--sample-documents", "80", "--sample-queries", "24", "--threads", "1", "--layers", "1,2",
                 "--known-items", "title", "--latency-budget", "0", "-o", str(out)])
    assert code == 3
    err = capsys.readouterr()
    record = json.loads((out / "auto.json").read_text())
    assert record["passed"] is False and record["met"] is False
    assert out.with_name("out.auto-work").is_dir()  # kept without --keep-work: a larger budget continues it
    assert "no candidate kept 1.4" in err.err and "best reached" in err.out and "--overwrite continues" in err.err
    assert record["answer"]["heal"] == PLAIN and not (out / "model").exists()


def _prepared(tmp_path, tiny_bert, docs, **settings):
    """The search's context and its rung 0, as ``auto`` has them before halving, every cut scored: the budget is
    more than rung 0 takes on any machine (the tests below set by hand what they test)."""
    from espresso_export.searching.auto import prepare
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.plain_cuts import score_plain_cuts
    from espresso_export.searching.work import Work, fingerprint

    s = AutoSettings(corpus=[str(docs)], time_budget="10m", **SMALL, **settings)
    ctx = prepare(str(tiny_bert), s, Work.open(tmp_path / "out", fingerprint(str(tiny_bert), s), overwrite=False),
                  progress=False)
    return ctx, score_plain_cuts(ctx)


def _flattered(heal, **score):
    """``heal`` with its float vectors' score changed (the one thing not measured: a sample that flatters)."""
    return replace(heal, score=replace(heal.score, **score))


def test_an_answer_the_sample_flattered_gives_way_to_the_next_cheapest(tmp_path, tiny_bert, docs):
    """The sample's scores of the plain cuts are set to 1.0 (the one thing not measured: a sample that flatters);
    on all the documents each keeps what it keeps, and the finish checks the smallest, then the next smallest
    while the one checked keeps less than the target there, MAX_ANSWERS at most, the last one checked being the
    answer. No labels are given: they play no part in the choice."""
    from espresso_export.searching.finish import MAX_ANSWERS, finish

    ctx, cands = _prepared(tmp_path, tiny_bert, docs, min_retention=0.99, objective="size")
    for c in cands:
        c.scores[PLAIN] = _flattered(c.scores[PLAIN], retention=1.0)
    result = finish(ctx, cands, tmp_path / "out", overwrite=False)

    assert result.met and result.answer is not None
    gave_way = [h for h in result.hints if "on the search's sample but " in h and "less than 0.99" in h]
    checked = [h.split(" (")[0] for h in gave_way] + [result.answer.name]
    by_size = [c.name for c in sorted(cands, key=lambda c: c.params)]
    assert checked == by_size[:len(checked)], (checked, by_size)  # the smallest first, then the next smallest
    full = result.verify["known_item"]["docs.jsonl"]["retention"]
    assert full >= 0.99 or len(checked) == MAX_ANSWERS
    assert all(f"on all of docs.jsonl, less than 0.99: checked the next cheapest, {nxt} (plain)" in h
               for h, nxt in zip(gave_way, checked[1:]))
    record = json.loads((tmp_path / "out" / "auto.json").read_text())
    assert record["answer"]["candidate"] == result.answer.name
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == ["export", "model"]


def test_bytes_per_vector_checks_the_next_answer_when_the_answer_stores_more_on_all_documents(tmp_path, tiny_bert,
                                                                                            docs):
    """Each plain cut's binary form is set to keep the target on the sample at 16 dims, 1 byte (the one thing not
    measured: a sample that flatters, here with a form the finish does not measure); on all the documents the
    answer's form is chosen again among those measured, at more bytes, so the next answer, 1 byte on the sample,
    is built and checked too, and the one storing fewer bytes on all the documents is the answer, alone in the
    output."""
    from espresso_export.searching.finish import finish

    ctx, cands = _prepared(tmp_path, tiny_bert, docs, min_retention=0.9, objective="bytes-per-vector")
    for c in cands:
        heal = c.scores[PLAIN]
        forms = tuple(replace(f, retention=1.0, bytes_per_vector=1, dim=16) if f.precision == "binary"
                      else replace(f, retention=min(f.retention, 0.5)) for f in heal.forms)
        c.scores[PLAIN] = replace(heal, forms=forms)
    result = finish(ctx, cands, tmp_path / "out", overwrite=False)

    second = [h for h in result.hints if "checked it too" in h]
    assert len(second) == 1, result.hints
    checked, first = second[0].split(" (")[0], second[0].split("fewer than ")[1].split(" (")[0]
    assert {checked, first} <= {c.name for c in cands} and checked != first
    assert result.answer.name == (first if second[0].endswith(f"{first} stays the answer") else checked)
    stored = result.answer.form
    # a form the final check measured on all the documents (its full width), not the sample's 16 dims
    assert stored.dim == 32 and stored.retention >= 0.9 and stored.bytes_per_vector > 1
    record = json.loads((tmp_path / "out" / "auto.json").read_text())
    assert record["answer"]["candidate"] == result.answer.name
    config = json.loads((tmp_path / "out" / "model" / "config.json").read_text())
    depth = next(c.depth for c in cands if c.name == result.answer.name)
    assert config["num_hidden_layers"] == depth  # the kept answer's model, not the other's
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == ["export", "model"]


def test_a_heal_that_diverged_is_healed_again_at_a_third_of_the_learning_rate(tmp_path, tiny_bert, docs):
    """A heal starts from the cut rung 0 scored, so one ending far below its candidate's earlier score diverged.
    That earlier score is set out of reach (the one thing not measured: the tiny model does not diverge), so the
    first heal reads as diverged; the second try trains at a third of the first's learning rate, its score is the
    heal's, the first try is recorded beside it, and the recipe's settings carry the rate it used."""
    from espresso_export.searching.halving import Rung, run_rung
    from espresso_export.searching.heals import RETRY_LR

    ctx, cands = _prepared(tmp_path, tiny_bert, docs, min_retention=0.97, layers=[1])
    cand = next(c for c in cands if c.name == "L1")
    ctx.model.release()
    cand.scores[PLAIN] = _flattered(cand.scores[PLAIN], retention=10.0)
    found = run_rung(ctx, [cand], Rung(1, 1, 64))

    heal = cand.scores["r1"]
    assert found == {"L1": heal.retention} and heal.diverged is not None
    first_lr = json.loads((tmp_path / f"out{WORK_SUFFIX}" / "heals" / "L1-64" / "espresso.json").read_text())
    second = json.loads((Path(heal.folder) / "espresso.json").read_text())
    assert Path(heal.folder).name != "L1-64"
    assert second["training"]["lr"] == pytest.approx(RETRY_LR * first_lr["training"]["lr"])
    assert heal.settings["lr"] == pytest.approx(second["training"]["lr"])
    assert "lr" not in heal.diverged["settings"]  # the first try ran at distill's own default
    assert any("the heal diverged; healing it again at lr" in line for line in ctx.log)


def test_the_cheapest_keeping_the_target_on_the_sample_is_scored_again_on_all_documents(tmp_path, tiny_bert, docs):
    """Known-item retention falls as the index grows, so the search's sample (80 of the 240 documents) flatters.
    The cheapest candidate keeping the target there is scored again with the same queries over all 240: the
    model the recipe rebuilds, searched over every document, gives that score; the sample's is kept beside it;
    the work folder keeps it, so the search continued scores nothing again."""
    from espresso_export.model.checkpoint import load
    from espresso_export.searching.all_documents import settle
    from espresso_export.searching.answer import choose
    from espresso_export.searching.encoding import timed_vectors
    from espresso_export.searching.plain_cuts import plain_calibration
    from espresso_export.shrinking.shrink import shrink
    from espresso_export.verification.known_item import (
        Estimate,
        followed,
        known_item,
        known_item_index,
        source_belief,
    )

    settings = {"min_retention": 0.5, "layers": [1, 2]}
    ctx, cands = _prepared(tmp_path, tiny_bert, docs, **settings)
    chosen = choose(cands, ctx.settings, ctx.queries)
    on_sample = chosen.measured.retention
    settle(ctx, cands)

    cand = next(c for c in cands if c.name == chosen.name)
    heal = cand.scores[PLAIN]
    assert heal.documents == 240 and heal.sample.score.retention == on_sample
    assert len(ctx.sample.documents) == 80 and len(ctx.sample.others) == 160
    every = ctx.sample.with_others()
    calibration, samples = plain_calibration(ctx, cand)  # as the recipe rebuilds it
    shrink(tiny_bert, tmp_path / "rebuilt", layers=cand.layers, dim=ctx.dim, calibration=str(calibration),
           calibration_samples=samples, seed=ctx.settings.seed, progress=False)
    theirs = timed_vectors(load(tmp_path / "rebuilt"), every, ctx.settings.scoring)[0]
    source = timed_vectors(load(tiny_bert), every, ctx.settings.scoring)[0]
    origins = every.queries.origins
    index = lambda v: known_item_index(v.documents, origins, v.targets)  # noqa: E731
    expected = Estimate(known_item(source.triple(), theirs.triple(), origins),
                        followed(source_belief(source.queries, index(source)), theirs.queries, index(theirs))).retention
    assert heal.retention == pytest.approx(expected, abs=1e-3)
    assert {f.dim for f in heal.forms} == {f.dim for f in heal.sample.forms}
    assert any(f"{cand.name} (plain): known-item retention" in line and "on all 240 documents" in line
               for line in ctx.log)

    ctx, again = _prepared(tmp_path, tiny_bert, docs, **settings)  # the same work folder, continued
    settle(ctx, again)
    assert next(c for c in again if c.name == cand.name).scores[PLAIN] == heal
    assert not any("on all 240 documents" in line for line in ctx.log)
