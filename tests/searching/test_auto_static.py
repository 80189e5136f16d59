"""The static candidate in ``auto`` on the tiny BERT: model2vec's distillation scored untrained in rung 0, healed
once on the healing texts, timed against the source; the answer where it keeps the target smallest, built, exported,
checked and rebuilt by its recipe. Known-item scores of the tiny random model are noisy (max_noise): these check the
mechanics, not the estimate."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from espresso_export.searching.auto import auto
from espresso_export.searching.candidates import PLAIN, STATIC

from small_search import SMALL_SEARCH

pytest.importorskip("faiss", reason="auto searches with faiss (pip install 'espresso-export[eval]')")
pytest.importorskip("model2vec", reason="the static candidate needs the static extra "
                                        "(pip install 'espresso-export[static]')")

SMALL = {**SMALL_SEARCH, "layers": [1], "objective": "size"}


def test_a_static_model_is_scored_healed_and_answers_when_it_keeps_the_target_smallest(tmp_path, tiny_bert, docs):
    # 80 documents, all of them the sample: a target read off the first search's scores holds on all of them
    few = tmp_path / "docs.jsonl"
    few.write_text("".join(docs.read_text(encoding="utf-8").splitlines(keepends=True)[:80]), encoding="utf-8")
    docs, out = few, tmp_path / "out"
    first = auto(tiny_bert, out, corpus=[str(docs)], min_retention=1.4, time_budget="10m", keep_work=True, **SMALL)
    static = next(c for c in first.candidates if c["name"] == STATIC)
    assert set(static["scores"]) == {PLAIN, "r1"} and static["dropped"] == "healed once, on every healing text"
    plain, healed = static["scores"][PLAIN], static["scores"]["r1"]
    assert healed["settings"]["student"] == STATIC and healed["settings"]["corpus"] and "corpus" not in plain["settings"]
    assert static["latency_ratio"] > 0 and static["params"] < min(c["params"] for c in first.candidates
                                                                   if c["name"] != STATIC)
    assert any(line.startswith("static: known-item retention") for line in first.log), first.log
    # a target the cuts keep too and the healed static model keeps (the tiny BERT's heal reads far below its
    # untrained distillation): the healed static model answers, the smallest; its table is kept whole (no
    # pruning), as its recipe rebuilds it
    target = 0.9 * healed["retention"]
    result = auto(tiny_bert, out, corpus=[str(docs)], min_retention=target, time_budget="10m", overwrite=True, **SMALL)
    assert result.met and result.answer.name == STATIC, (plain["retention"], healed["retention"], result.hints)
    # healed: untrained, a static model never answers (its estimate reads far off its labels), here too where
    # it reads above its heal
    assert result.answer.heal == "r1" and plain["retention"] > healed["retention"]
    # kept on all the documents before the cuts' rungs: no cut could be smaller, none is healed
    assert all(set(c["scores"]) == {PLAIN} for c in result.candidates if c["name"] != STATIC)
    error = json.loads((out / "auto.json").read_text())["estimate_error"]
    assert error["kind"] == "static-held-out" and error["collections"], error
    assert any(h.startswith("the known-item estimate's measured error for healed static models") for h in result.hints)
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["model_type"] == "model2vec" and (out / "export" / "export.json").is_file()
    assert json.loads((out / "auto.json").read_text())["verify"]["passed"]
    card = (out / "README.md").read_text()  # the card of a static model, as push writes it
    assert "library_name: model2vec" in card and "StaticModel.from_pretrained" in card and "OnnxEncoder" in card
    _rebuilds(out, tmp_path / "rebuilt")


def _rebuilds(out, folder) -> None:
    """The recipe rebuilds the static answer: the same vectors as the answer's folder, by model2vec."""
    from model2vec import StaticModel

    from espresso_export.pipeline.recipe_runner import run_recipe
    from espresso_export.pipeline.recipes import load_recipe

    recipe = load_recipe(out / "recipe.yaml")
    assert recipe.steps[0].kind == "distill" and recipe.steps[0].config.student == STATIC
    check = recipe.steps[-1]
    steps = [*recipe.steps[:-1], replace(check, config=replace(check.config, latency_budget=0.0))]
    rebuilt = run_recipe(replace(recipe, steps=steps, output=folder, threads=1))
    texts = ["the dog runs", "a red car in the house"]
    built, again = StaticModel.from_pretrained(out / "model"), StaticModel.from_pretrained(rebuilt.steps[0].folder)
    np.testing.assert_allclose(built.encode(texts), again.encode(texts), atol=1e-5)


def test_for_latency_the_static_model_is_healed_before_the_cuts_are_scored(tmp_path, tiny_bert, docs):
    """By far the fastest candidate: its heal is not left to what rung 0 leaves of the budget."""
    result = auto(tiny_bert, tmp_path / "out", corpus=[str(docs)], min_retention=1.4, time_budget="10m",
                  **{**SMALL, "objective": "latency"})
    log = result.log
    healed = next(i for i, line in enumerate(log) if line.startswith("static: known-item retention"))
    first_cut = next(i for i, line in enumerate(log) if line.startswith("rung 0 (plain, no training): L1"))
    assert healed < first_cut, log
    assert {c["name"] for c in result.candidates} == {"L1", "L1f", STATIC}
