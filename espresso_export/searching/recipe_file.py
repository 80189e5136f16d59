"""``recipe.yaml`` in ``auto``'s output: the answer's steps as a recipe, so that ``espresso-export run recipe.yaml``
rebuilds it (its healing texts beside it as ``healing-texts.txt``, a plain cut's calibration texts as
``calibration-texts.txt``, and with a pruned vocabulary the texts it keeps the tokens of as ``vocab-texts.txt``;
paths in a recipe are relative to its file)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from espresso_export.core.files import write_text_atomic
from espresso_export.searching.answer import Answer
from espresso_export.searching.candidates import Candidate
from espresso_export.searching.context import Context
from espresso_export.searching.healing_texts import HEAL_FILE
from espresso_export.searching.plain_cuts import plain_calibration
from espresso_export.searching.vocab import VOCAB_FILE, vocab_texts

NOT_IN_RECIPE = ("cache_dir",)  # the search's private teacher cache: a rebuild uses the default one


def _source(spec: str) -> str:
    p = Path(spec).expanduser()
    return str(p.resolve()) if p.exists() else spec


def _paths(specs) -> list[str]:
    return [_source(os.fspath(s)) for s in specs]


def steps_of(ctx: Context, cand: Candidate, answer: Answer, weights: str) -> list[dict] | None:
    """The recipe's steps: the heal (distill) or the plain cut (shrink), the export, and the check."""
    s = ctx.settings
    heal = answer.measured
    if heal.settings is not None:
        distill = {k: v for k, v in heal.settings.items() if k not in NOT_IN_RECIPE}
        if "corpus" in distill:  # else the static candidate untrained: model2vec's distillation alone
            distill["corpus"] = [HEAL_FILE]
        model_step = {"distill": distill}
    elif cand.is_cut:
        calibration, samples = plain_calibration(ctx, cand)
        model_step = {"shrink": {"layers": list(cand.layers or []), "dim": ctx.dim, "calibration": calibration.name,
                                 "calibration_samples": samples, "seed": s.seed}}
    else:
        return None  # the student as it comes: nothing to rebuild
    if s.pruning and not cand.is_static:
        model_step[next(iter(model_step))]["prune_corpus"] = [VOCAB_FILE]
    export = {"quantize": "int8"} if weights == "int8" else {}
    verify = {"corpus": _paths(s.corpus), "queries": _paths(s.queries), "retrieval": _paths(s.retrieval),
              "sts": _paths(s.sts) or ["builtin"], "corpus_queries": s.corpus_queries,
              "known_items": s.known_items}  # the final check's queries, as auto made them
    if s.corpus_field is not None:
        verify["corpus_field"] = s.corpus_field
    if s.sts:
        verify["min_sts_retention"] = s.min_retention
    if s.retrieval:
        verify["min_retrieval_retention"] = s.min_retention
    if s.max_latency_ratio is not None:
        verify["max_latency_ratio"] = s.max_latency_ratio
    return [model_step, {"export": export}, {"verify": {k: v for k, v in verify.items() if v != []}}]


def write_recipe(ctx: Context, cand: Candidate, answer: Answer, weights: str, folder: Path) -> Path | None:
    import yaml

    steps = steps_of(ctx, cand, answer, weights)
    if steps is None:
        return None
    shutil.copyfile(ctx.heal_file, folder / HEAL_FILE)
    if "shrink" in steps[0] and cand.calibration is not None:
        shutil.copyfile(ctx.work.path(cand.calibration), folder / cand.calibration)
    if ctx.settings.pruning and not cand.is_static:
        shutil.copyfile(vocab_texts(ctx), folder / VOCAB_FILE)
    recipe = {"name": f"auto-{cand.name}", "description": f"found by espresso-export auto ({ctx.settings.objective.value}, "
                                                          f"min retention {ctx.settings.min_retention:g})",
              "source": _source(ctx.source), "steps": steps}
    header = ("# Written by `espresso-export auto`: rebuilds its answer. Run from anywhere:\n"
              "#   espresso-export run recipe.yaml -o rebuilt/\n")
    text = header + yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True)
    return write_text_atomic(folder / "recipe.yaml", text)
