"""``auto --student``: a smaller pretrained model of another family beside the cuts. Scored as it comes in rung 0,
healed by HPD (the student and a projection taught by the source), and the recipe ``auto`` writes for a healed
student rebuilds the same model."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from small_search import SMALL_SEARCH

pytest.importorskip("faiss", reason="auto searches with faiss (pip install 'espresso-export[eval]')")

SMALL = {**SMALL_SEARCH, "static": False}


def test_a_student_is_healed_by_hpd_and_its_recipe_rebuilds_it(tmp_path, tiny_models, docs):
    """Rung 0 scores the student as it comes beside the cuts; one rung heals it alone (the cuts' heals are
    covered in test_auto.py), at a speed set fast (the one thing not measured: the budget never decides here)."""
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.pipeline.recipe_runner import run_recipe
    from espresso_export.pipeline.recipes import load_recipe
    from espresso_export.searching.answer import Answer
    from espresso_export.searching.auto import prepare
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.budget import Speed
    from espresso_export.searching.halving import Rung, run_rung
    from espresso_export.searching.plain_cuts import score_plain_cuts
    from espresso_export.searching.recipe_file import write_recipe
    from espresso_export.searching.work import Work, fingerprint

    source, student = tiny_models["bert"], tiny_models["distilbert"]
    s = AutoSettings(corpus=[str(docs)], min_retention=0.97, time_budget="10m", layers=[1], student=str(student),
                     **SMALL)
    work = Work.open(tmp_path / "out", fingerprint(str(source), s), overwrite=False)
    ctx = prepare(str(source), s, work, progress=False)
    cands = score_plain_cuts(ctx)
    assert [c.name for c in cands] == ["L1", "L1f", "student"]
    pupil = cands[-1]
    assert pupil.depth == 4 and pupil.params > 0 and pupil.latency_ratio > 0  # measured as it comes
    ctx.model.release()
    ctx.speed = Speed(seconds_per_text=1e-4, depth=ctx.speed.depth)
    assert run_rung(ctx, [pupil], Rung(1, 1, 64)) == {"student": pupil.scores["r1"].retention}, ctx.log
    healed = pupil.scores["r1"]
    assert healed.texts == 64 and healed.diverged is None
    assert healed.settings["student"] == str(student) and "student_layers" not in healed.settings
    record = load(healed.folder).provenance
    assert record["training"]["lr"] == pytest.approx(1e-4)  # distill's HPD rate: a pretrained student

    write_recipe(ctx, pupil, Answer("student", "r1", healed, healed.score), "float32", tmp_path)
    recipe = load_recipe(tmp_path / "recipe.yaml")
    assert recipe.steps[0].kind == "distill" and recipe.steps[0].config.student == str(student)
    assert [step.kind for step in recipe.steps] == ["distill", "export", "verify"]
    rebuilt = run_recipe(replace(recipe, steps=recipe.steps[:1], output=tmp_path / "rebuilt"))  # the model step
    texts = ["the dog runs", "a red car in the house"]
    built, again = (load(d) for d in (healed.folder, rebuilt.steps[0].folder))
    np.testing.assert_allclose(encode(built, texts), encode(again, texts), atol=1e-5)
