"""``auto --student``: a smaller pretrained model of another family beside the cuts. Scored as it comes in rung 0,
healed by HPD (the student and a projection taught by the source), and the recipe ``auto`` writes for a healed
student rebuilds the same model."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("faiss", reason="auto searches with faiss (pip install 'espresso-export[eval]')")

SMALL = dict(eval_passages=80, eval_queries=24, max_texts=400, batch_size=16, threads=1, known_items="title",
             max_noise=10.0)


def test_a_student_is_healed_by_hpd_and_its_recipe_rebuilds_it(tmp_path, tiny_models, docs):
    """The tiny random models score at or above their source untrained, so no target asks for a heal; here the
    rung-0 scores are set below the target (the one thing not measured), and the heals run for real."""
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.pipeline.recipe_runner import run_recipe
    from espresso_export.pipeline.recipes import load_recipe
    from espresso_export.searching.auto_result import Pick
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.recipe_file import write_recipe
    from espresso_export.searching.rung0 import rung0
    from espresso_export.searching.search import Work, _prepare, _search, fingerprint

    source, student = tiny_models["bert"], tiny_models["distilbert"]
    s = AutoSettings(corpus=[str(docs)], min_retention=0.97, time_budget="60s", layers=[1], student=str(student),
                     **SMALL)
    work = Work.open(tmp_path / "out", fingerprint(str(source), s), overwrite=False)
    ctx = _prepare(str(source), s, work, progress=False)
    cands = rung0(ctx)
    assert [c.name for c in cands] == ["L1", "L1f", "student"]
    pupil = cands[-1]
    assert pupil.depth == 4 and pupil.params > 0 and pupil.latency_ratio > 0  # measured as it comes
    pupil.scores["plain"]["retention"] = 0.85
    _search(ctx, [pupil])  # the student alone: the cuts' heals are covered in test_auto.py
    healed = pupil.scores.get("r1")
    assert healed is not None, ctx.log
    assert healed["settings"]["student"] == str(student) and "student_layers" not in healed["settings"]
    record = load(healed["folder"]).provenance
    assert record["training"]["lr"] == pytest.approx(1e-4)  # distill's HPD rate: a pretrained student

    pick = Pick("student", "r1", healed, healed)
    write_recipe(ctx, pupil, pick, "float32", tmp_path)
    recipe = load_recipe(tmp_path / "recipe.yaml")
    assert recipe.steps[0].kind == "distill" and recipe.steps[0].config.student == str(student)
    assert [step.kind for step in recipe.steps] == ["distill", "export", "verify"]
    rebuilt = run_recipe(replace(recipe, steps=recipe.steps[:1], output=tmp_path / "rebuilt"))  # the model step
    texts = ["the dog runs", "a red car in the house"]
    built, again = (load(d) for d in (healed["folder"], rebuilt.steps[0].folder))
    np.testing.assert_allclose(encode(built, texts), encode(again, texts), atol=1e-5)
