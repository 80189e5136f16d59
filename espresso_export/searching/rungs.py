"""One rung of ``auto``'s successive halving: heal each active candidate on the rung's texts (or reuse the heal a
stopped or earlier search finished), score it, and record both; stop when the next heal would not fit, or when
the budget ends inside one (its checkpoint is kept: a search with a larger budget continues it)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from espresso_export.core.signals import interrupt_after
from espresso_export.searching import candidates as C
from espresso_export.searching.all_documents import settle
from espresso_export.searching.auto_settings import OUTPUT_PRECISIONS
from espresso_export.searching.evaluation import Vectors
from espresso_export.training.interrupt import TrainingInterrupted


def stage_key(cand: C.Candidate, texts: int) -> str:
    return f"heal-{cand.name}-{texts}"


def run_rung(ctx, active: list[C.Candidate], rung) -> dict[str, float]:
    """Known-item retention of each candidate healed at this rung (those the budget reached)."""
    found: dict[str, float] = {}
    n_eval = ctx.scorer.ev.encoded
    for cand in active:
        key = stage_key(cand, rung.texts)
        done = ctx.work.done(key)
        if done is None:
            depth = C.work_depth(cand, ctx.speed.depth)
            need = ctx.speed.train(rung.texts, depth) + ctx.speed.encode(n_eval, depth)
            if need > ctx.left():
                cand.dropped = cand.dropped or f"rung {rung.index}: not healed, the budget ran out"
                ctx.say(f"rung {rung.index}: {cand.name} needs ~{need / 60:.1f} min, {max(ctx.left(), 0) / 60:.1f} "
                        "left: stopping the search here")
                ctx.stopped = True
                return found
            ctx.say(f"rung {rung.index}: healing {cand.name} on {rung.texts:,} texts (~{need / 60:.1f} min)")
            score = _heal_and_score(ctx, cand, rung)
            if score is None:
                cand.dropped = cand.dropped or f"rung {rung.index}: heal stopped, the budget ran out"
                ctx.say(f"rung {rung.index}: the budget ran out while healing {cand.name}: stopping the search here "
                        "(its checkpoint is kept: the same command with a larger budget continues it)")
                ctx.stopped = True
                return found
            done = ctx.work.put(key, score)
            ctx.work.state["train_cost"] = ctx.speed.train_cost
            ctx.work.save()
        cand.scores[f"r{rung.index}"] = done
        found[cand.name] = done["retention"]
        ctx.say(f"rung {rung.index}: {cand.name} known-item retention {done['retention']:.3f}, agreement@10 "
                f"{done['agreement_at_10']:.3f}")
    settle(ctx, active)  # one keeping the target on the sample is scored on all the documents before it is trusted
    return {name: next(c for c in active if c.name == name).scores[f"r{rung.index}"]["retention"] for name in found}


DIVERGED = 0.5  # a heal scoring below this share of its candidate's best earlier score diverged
RETRY_LR = 1 / 3  # its second try's learning rate, as a share of the first's


def _heal_and_score(ctx, cand: C.Candidate, rung) -> dict | None:
    """The heal's score, or None when the budget ended inside the heal. A heal starts from the cut as rung 0
    scored it (the head aligned with the source's), so one ending far below its candidate's earlier scores has
    diverged (seen at distill's default rate on a deep cut): it is tried again once at a third of that rate,
    budget permitting, and both tries are recorded."""
    s = ctx.settings
    kwargs = C.heal_settings(cand, texts=rung.texts, heal_texts=ctx.heal_texts, heal_file=ctx.heal_file,
                             dim=ctx.dim, settings=s, cache_dir=ctx.work.path("teacher-cache"))
    before = max((sc["retention"] for sc in cand.scores.values()), default=0.0)
    first = _heal_once(ctx, cand, rung, kwargs, f"{cand.name}-{rung.texts}")
    if first is None or first["retention"] >= DIVERGED * before:
        return first
    lr = RETRY_LR * _used_lr(Path(first["folder"]))
    need = ctx.speed.train(rung.texts, C.work_depth(cand, ctx.speed.depth))
    ctx.say(f"rung {rung.index}: {cand.name} scored {first['retention']:.3f} after {before:.3f} before: the heal "
            f"diverged" + (f"; healing it again at lr {lr:.2g} (~{need / 60:.1f} min)" if need < ctx.left() else
                           "; no time left to heal it again"))
    if need >= ctx.left():
        return first
    diverged = {k: first[k] for k in ("retention", "settings", "seconds")}
    second = _heal_once(ctx, cand, rung, {**kwargs, "lr": lr}, f"{cand.name}-{rung.texts}-lr{lr:.2g}")
    if second is None:
        return None
    second["diverged"] = diverged
    return second


def _used_lr(folder: Path) -> float:
    """The learning rate a heal trained at (distill's default when auto set none), from its record."""
    return float(json.loads((folder / "espresso.json").read_text(encoding="utf-8"))["training"]["lr"])


def _heal_once(ctx, cand: C.Candidate, rung, kwargs: dict, name: str) -> dict | None:
    s = ctx.settings
    folder = ctx.work.path("heals", name)
    start = time.perf_counter()
    try:
        with interrupt_after(ctx.left()) as deadline:
            result = C.heal(ctx.source, cand, folder, ctx.work.path("runs", name), kwargs, progress=ctx.progress)
    except (TrainingInterrupted, KeyboardInterrupt):
        if not deadline["fired"]:
            raise
        return None
    seconds = time.perf_counter() - start
    if ctx.work.done("teacher") is None:  # the first heal ran the shared teacher pass; later ones read its cache
        ctx.work.put("teacher", {"seconds": result.teacher_seconds})
    # the whole heal but the teacher pass (shared): the student's PCA sample and the writing count too
    ctx.speed.observe(result.train.get("steps", rung.steps(s.batch_size)) * s.batch_size,
                      C.work_depth(cand, ctx.speed.depth),
                      max(seconds - result.teacher_seconds, 1e-3))
    vectors = C.healed_vectors(folder, ctx.scorer.ev, ctx.settings.scoring)
    stage = f"r{rung.index}"
    extra = {"texts": rung.texts, "folder": str(folder), "settings": kwargs, "seconds": round(seconds, 1)}
    if result.train.get("resumed_from"):  # the step a stopped heal of these settings had reached
        extra["resumed_from"] = result.train["resumed_from"]
    return score_stage(ctx, cand, stage, vectors, extra)


def score_stage(ctx, cand: C.Candidate, stage: str, vectors: Vectors, extra: dict) -> dict:
    main = ctx.scorer.score(vectors).to_dict()
    # every stored form, whatever the objective: a later search of the same work folder may minimise bytes
    main["variants"] = C.variants(ctx.scorer, vectors, C.nested_widths(ctx.dim), list(OUTPUT_PRECISIONS))
    cand.scores[stage] = {**main, **extra}
    return cand.scores[stage]
