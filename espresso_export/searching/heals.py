"""A candidate healed: distill on the healing texts (the teacher's targets shared through one cache), scored on the
sample; a heal that diverged is tried again once at a lower learning rate. What the search runs is what the
recipe it writes rebuilds (:func:`heal_settings`)."""

from __future__ import annotations

import json
import math
import signal
import time
from pathlib import Path
from typing import Any

from espresso_export.core.signals import Terminated, interrupt_after, received
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.candidates import Candidate, Heal, work_depth
from espresso_export.searching.context import Context
from espresso_export.searching.encoding import load_candidate, timed_vectors
from espresso_export.training.interrupt import TrainingInterrupted

DIVERGED = 0.5  # a heal scoring below this share of its candidate's best earlier score diverged
RETRY_LR = 1 / 3  # its second try's learning rate, as a share of the first's


def heal_settings(cand: Candidate, *, texts: int, heal_texts: int, heal_file: Path, dim: int,
                  settings: AutoSettings, cache_dir: Path) -> dict[str, Any]:
    """distill's settings for healing ``cand`` on ``texts`` training texts (steps x batch size) of the
    ``heal_texts`` in ``heal_file``: what the search runs and what the recipe it writes rebuilds. A static
    candidate trains on all of them with a static table's own epochs and batch (``texts`` unused)."""
    if cand.is_static:
        kw = {"student": cand.student, "dim": dim, "corpus": [str(heal_file)], "seed": settings.seed, "heldout": 0,
              "device": settings.device, "cache_dir": str(cache_dir)}
        return kw if settings.amp == "auto" else {**kw, "amp": settings.amp}  # the cuts' teacher cache, shared
    kw: dict[str, Any] = {"dim": dim, "corpus": [str(heal_file)], "batch_size": settings.batch_size,
                          "epochs": max(1, math.ceil(texts / max(heal_texts, 1))),
                          "max_steps": max(1, texts // settings.batch_size), "seed": settings.seed,
                          "heldout": 0, "device": settings.device, "cache_dir": str(cache_dir)}
    if settings.max_seq_len is not None:
        kw["max_seq_len"] = settings.max_seq_len
    if settings.amp != "auto":
        kw["amp"] = settings.amp
    if cand.is_cut:
        kw["student_layers"] = list(cand.layers or [])
    else:
        kw["student"] = cand.student
    return kw


def heal_and_score(ctx: Context, cand: Candidate, texts: int, label: str) -> Heal | None:
    """``cand`` healed on ``texts`` texts and scored, or None when the budget ended inside the heal (``label``:
    how the log names the rung). A heal starts from the cut as rung 0 scored it (the head aligned with the
    source's), so one ending far below its candidate's earlier scores has diverged (seen at distill's default
    rate on a deep cut): it is tried again once at :data:`RETRY_LR` of that rate, budget permitting, and both
    tries are recorded."""
    kwargs = heal_settings(cand, texts=texts, heal_texts=ctx.heal_texts, heal_file=ctx.heal_file, dim=ctx.dim,
                           settings=ctx.settings, cache_dir=ctx.work.path("teacher-cache"))
    before = max((h.retention for h in cand.scores.values()), default=0.0)
    first = _heal_once(ctx, cand, texts, kwargs, f"{cand.name}-{texts}")
    if first is None or first.retention >= DIVERGED * before or cand.is_static:
        return first
    lr = RETRY_LR * _used_lr(Path(first.folder))
    need = ctx.speed.train(texts, work_depth(cand, ctx.speed.depth))
    ctx.say(f"{label}: {cand.name} scored {first.retention:.3f} after {before:.3f} before: the heal diverged"
            + (f"; healing it again at lr {lr:.2g} (~{need / 60:.1f} min)" if need < ctx.left() else
               "; no time left to heal it again"))
    if need >= ctx.left():
        return first
    diverged = {"retention": first.retention, "settings": first.settings, "seconds": first.seconds}
    second = _heal_once(ctx, cand, texts, {**kwargs, "lr": lr}, f"{cand.name}-{texts}-lr{lr:.2g}")
    if second is None:
        return None
    return Heal(second.score, second.forms, second.texts, second.folder, second.settings, second.seconds,
                second.resumed_from, diverged)


def _used_lr(folder: Path) -> float:
    """The learning rate a heal trained at (distill's default when auto set none), from its record."""
    return float(json.loads((folder / "espresso.json").read_text(encoding="utf-8"))["training"]["lr"])


def _heal_once(ctx: Context, cand: Candidate, texts: int, kwargs: dict, name: str) -> Heal | None:
    from espresso_export.distilling.run import distill
    from espresso_export.training.resume import read_checkpoint_meta
    from espresso_export.training.run_files import stopped_early

    s = ctx.settings
    folder, run_dir = ctx.work.path("heals", name), ctx.work.path("runs", name)
    # a stopped heal of the same settings resumes from its run folder
    resume = run_dir.is_dir() and (read_checkpoint_meta(run_dir) is not None or stopped_early(run_dir))
    start = time.perf_counter()
    try:
        with interrupt_after(ctx.left()) as deadline:
            result = distill(ctx.source, folder, resume=resume, run_dir=run_dir, overwrite=True,
                             progress=ctx.progress, **kwargs)
    except (TrainingInterrupted, KeyboardInterrupt) as e:
        if not deadline["fired"]:  # the user's stop: auto's own (its work folder named, the same command continues
            # it), not distill's, whose "run again or --resume" names a run folder and an option auto does not take
            raise (Terminated() if received() == signal.SIGTERM else KeyboardInterrupt()) from e
        return None
    seconds = time.perf_counter() - start
    if ctx.work.done("teacher") is None:  # the first heal ran the shared teacher pass; later ones read its cache
        ctx.work.put("teacher", {"seconds": result.teacher_seconds})
    if not cand.is_static:  # a static heal's time says nothing of a transformer's per text and layer
        # the whole heal but the teacher pass (shared): the student's PCA sample and the writing count too
        steps = result.train.get("steps", max(1, texts // s.batch_size))
        ctx.speed.observe(steps * s.batch_size, work_depth(cand, ctx.speed.depth),
                          max(seconds - result.teacher_seconds, 1e-3))
    vectors = timed_vectors(load_candidate(folder, s.device), ctx.sample, s.scoring)[0]
    return ctx.measure(vectors, texts=texts, folder=str(folder), settings=kwargs, seconds=round(seconds, 1),
                       resumed_from=result.train.get("resumed_from") or None)
