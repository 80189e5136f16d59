"""``recipe.yaml`` in ``auto``'s output: the winner's steps as a recipe, so that ``espresso-export run recipe.yaml``
rebuilds it (its healing texts beside it as ``healing-texts.txt``, a plain cut's calibration texts as
``calibration-texts.txt``, and with a pruned vocabulary the texts it keeps the tokens of as ``vocab-texts.txt``;
paths in a recipe are relative to its file)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from espresso_export.core.files import write_text_atomic
from espresso_export.searching import candidates as C
from espresso_export.searching.vocab import VOCAB_FILE, vocab_texts

HEAL_FILE = "healing-texts.txt"
NOT_IN_RECIPE = ("cache_dir",)  # the search's private teacher cache: a rebuild uses the default one


def _source(spec: str) -> str:
    p = Path(spec).expanduser()
    return str(p.resolve()) if p.exists() else spec


def _paths(specs) -> list[str]:
    return [_source(os.fspath(s)) for s in specs]


def plain_calibration(ctx, cand) -> tuple[Path, int]:
    """The texts a plain cut's PCA head was fitted on in rung 0, and how many: the searched documents (all of
    them), or :data:`.candidates.CALIBRATION` of the healing texts."""
    if cand.calibration is None:
        return ctx.heal_file, C.CALIBRATION
    path = ctx.work.path(cand.calibration)
    return path, len(path.read_text(encoding="utf-8").splitlines())


def rebuild_plain(ctx, cand, folder: Path | None = None):
    """The plain cut as its recipe rebuilds it (shrink, its head fitted on the texts rung 0 fitted it on): into
    ``folder``, or in memory when None; shrink's result."""
    from espresso_export.shrinking.shrink import shrink

    calibration, samples = plain_calibration(ctx, cand)
    return shrink(ctx.source, folder, layers=cand.layers, dim=ctx.dim, calibration=str(calibration),
                  calibration_samples=samples, seed=ctx.settings.seed, progress=False)


def steps_of(ctx, cand, pick, weights: str) -> list[dict] | None:
    """The recipe's steps: the heal (distill) or the plain cut (shrink), the export, and the check."""
    s = ctx.settings
    stage = pick.stage
    if "settings" in stage:
        distill = {k: v for k, v in stage["settings"].items() if k not in NOT_IN_RECIPE}
        distill["corpus"] = [HEAL_FILE]
        model_step = {"distill": distill}
    elif cand.student is None:
        calibration, samples = plain_calibration(ctx, cand)
        model_step = {"shrink": {"layers": list(cand.layers or []), "dim": ctx.dim, "calibration": calibration.name,
                                 "calibration_samples": samples, "seed": s.seed}}
    else:
        return None  # the student as it comes: nothing to rebuild
    if s.pruning:
        model_step[next(iter(model_step))]["prune_corpus"] = [VOCAB_FILE]
    export = {"quantize": "int8"} if weights == "int8" else {}
    verify = {"corpus": _paths(s.corpus), "queries": _paths(s.queries), "retrieval": _paths(s.retrieval),
              "sts": _paths(s.sts) or ["builtin"], "agreement_queries": s.check_queries,
              "known_items": s.known_items}  # the final check's queries, as auto made them
    if s.corpus_field is not None:
        verify["corpus_field"] = s.corpus_field
    if s.sts:
        verify["min_retention"] = s.min_retention
    if s.retrieval:
        verify["min_retrieval_retention"] = s.min_retention
    if s.max_latency_ratio is not None:
        verify["max_latency_ratio"] = s.max_latency_ratio
    return [model_step, {"export": export}, {"verify": {k: v for k, v in verify.items() if v != []}}]


def write_recipe(ctx, cand, pick, weights: str, folder: Path) -> Path | None:
    import yaml

    steps = steps_of(ctx, cand, pick, weights)
    if steps is None:
        return None
    shutil.copyfile(ctx.heal_file, folder / HEAL_FILE)
    if "shrink" in steps[0] and cand.calibration is not None:
        shutil.copyfile(ctx.work.path(cand.calibration), folder / cand.calibration)
    if ctx.settings.pruning:
        shutil.copyfile(vocab_texts(ctx), folder / VOCAB_FILE)
    recipe = {"name": f"auto-{cand.name}", "description": f"found by espresso-export auto ({ctx.settings.objective.value}, "
                                                          f"min retention {ctx.settings.min_retention:g})",
              "source": _source(ctx.source), "steps": steps}
    header = ("# Written by `espresso-export auto`: rebuilds its winner. Run from anywhere:\n"
              "#   espresso-export run recipe.yaml -o rebuilt/\n")
    text = header + yaml.safe_dump(recipe, sort_keys=False, allow_unicode=True)
    return write_text_atomic(folder / "recipe.yaml", text)
