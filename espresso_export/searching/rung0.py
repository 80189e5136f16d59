"""``auto``'s rung 0, the proxy: every plain cut (each depth, its layers spread over the source and its first
layers) and the student as it comes, scored on the evaluation sample without training. The first-layers cuts
are prefixes of the source: the source's own pass over the sample (:func:`source_step`) gives all of them."""

from __future__ import annotations

import time

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.searching import candidates as C
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.budget import cut_seconds, minutes
from espresso_export.searching.evaluation import Vectors
from espresso_export.searching.rungs import score_stage
from espresso_export.searching.work import Work

FIRST_FILE = "first-cuts.npz"  # the unit vectors of the source's first-layers cuts, from its own pass


def _depths(s: AutoSettings, depth: int) -> list[int]:
    """The depths rung 0 cuts the source to: every depth below the source's (``--layers`` restricts them); for
    bytes per vector the source's own depth competes too (its head narrowed, its vectors stored smaller)."""
    deepest = depth + 1 if s.objective.value == "bytes-per-vector" else depth
    return sorted(d for d in (s.layers or range(1, deepest)) if d < deepest)


def source_step(model, work: Work, ev, s: AutoSettings) -> dict:
    """The source's vectors of the evaluation set (saved), its speed, depth and width; from the same pass, the
    unit vectors of its first-layers cuts (:func:`_first_vectors`)."""
    found = work.done("source")
    if found is None:
        ckpt = model.get()
        vectors, per_text, first = C.source_pass(ckpt, ev, _depths(s, ckpt.depth), s.scoring)
        vectors.save(work.path("source-vectors.npz"))
        _save_first(work, first)
        found = work.put("source", {"seconds_per_text": per_text, "depth": ckpt.depth, "width": ckpt.output_dim,
                                    "params": int(ckpt.n_params)})
    return found


def _save_first(work: Work, first: dict) -> None:
    """Whole or absent (:func:`~espresso_export.model.cache.atomic_file`): a search stopped while writing it
    computes it again."""
    from espresso_export.model.cache import atomic_file

    arrays = {f"{k}{d}": x for d, v in first.items() for k, x in zip("qpt", v.triple())}

    def write(tmp) -> None:
        with open(tmp, "wb") as fh:  # a file object: np.savez would append ".npz" to a temp name
            np.savez(fh, **arrays)

    atomic_file(work.path(FIRST_FILE), write)


def _first_vectors(ctx, depths: list[int]) -> dict:
    """``{d: Vectors}``: each first-``d``-layers cut's unit vectors of the evaluation set, saved by the source's
    pass (a work folder from before they were computed gets them from one more pass)."""
    path = ctx.work.path(FIRST_FILE)
    if path.is_file():
        with np.load(path) as z:
            if all(f"p{d}" in z for d in depths):
                return {d: Vectors(z[f"q{d}"], z[f"p{d}"], z[f"t{d}"]) for d in depths}
    first = C.source_pass(ctx.model.get(), ctx.scorer.ev, depths, ctx.settings.scoring)[2]
    _save_first(ctx.work, first)
    return first


def rung0(ctx) -> list[C.Candidate]:
    """Every plain cut, at every depth its layers spread over the source (``L3``) and its first layers (``L3f``),
    and the student as it comes, scored without training."""
    s = ctx.settings
    depths = _depths(s, ctx.speed.depth)
    if not depths and s.student is None:
        raise ValidationError(f"--layers {s.layers}: the source has {ctx.speed.depth} layers; give depths below it")
    _fit_width(ctx)
    out = []
    if s.student is not None:  # the user named it: always scored
        out.append(_plain(ctx, C.Candidate("student", 0, student=s.student), None))
    n_eval = ctx.scorer.ev.encoded
    overhead = ctx.speed.encode(4 * C.TIMED_TEXTS, ctx.speed.depth)  # time_ratio's rounds, until one is measured
    for i, d in enumerate(sorted(depths, reverse=True)):  # deepest first: the likeliest to keep a target untrained
        need = cut_seconds(ctx.speed, d, n_eval, overhead)
        if i and ctx.work.done(f"plain-L{d}") is None and need > ctx.left():
            ctx.say(f"rung 0: the budget left ({minutes(max(ctx.left(), 0))}) does not cover the cuts of "
                    f"{d} layers or fewer (~{minutes(need)} each): not scored; a larger --time-budget scores them")
            break
        started, fresh = time.perf_counter(), ctx.work.done(f"plain-L{d}") is None
        out.append(_plain(ctx, C.Candidate(f"L{d}", d), None))
        spread = out[-1]
        if fresh:  # measured here, not read back: what building, heading and timing a cut costs beyond encoding
            overhead = max(0.0, time.perf_counter() - started - ctx.speed.encode(n_eval, d))
        if d < ctx.speed.depth and spread.layers != list(range(d)):  # shrink keeps the first ones for ESE models
            out.append(_plain(ctx, C.Candidate(f"L{d}f", d, layers=list(range(d))), spread))
    return sorted(out, key=lambda c: (c.student is not None, c.depth, c.name))


def _fit_width(ctx) -> None:
    """The candidates' width narrowed to what the healing texts can fit (:func:`.candidates.head_width`), said in
    the log: a PCA head needs more texts than dims, and a small corpus has fewer than the default 384."""
    fitted = C.head_width(ctx.dim, ctx.heal_texts)
    if fitted == ctx.dim:
        return
    if not fitted:
        raise ValidationError(f"only {ctx.heal_texts} healing texts: a PCA head of {C.NESTED_WIDTHS[0]} dims needs "
                              f"{C.NESTED_WIDTHS[0] + 1}; give more documents (--corpus) or --sentences")
    ctx.say(f"width: {fitted} dims, not {ctx.dim}: a PCA head needs more texts than dims, and there are "
            f"{ctx.heal_texts:,} healing texts (more documents, or --sentences, allow a wider one)")
    ctx.dim = fitted


def _plain(ctx, cand: C.Candidate, same_depth: C.Candidate | None) -> C.Candidate:
    """``cand`` scored untrained (once: a resumed search reads it back). A first-layers cut takes its vectors
    from the source's pass, and its parameters and speed from the spread cut of its depth (``same_depth``: the
    same layers, counted and timed)."""
    work = ctx.work
    found = work.done(f"plain-{cand.name}")
    if found is None:
        texts, rows = C.calibration_texts(ctx.scorer.ev)
        calibration = work.path(C.CALIBRATION_FILE)
        if same_depth is not None and len(texts) > ctx.dim:
            unit = _first_vectors(ctx, [cand.depth])[cand.depth]
            vectors = C.headed(cand, unit, rows, ctx.dim, calibration)[0]
            cand.params, cand.latency_ratio = same_depth.params, same_depth.latency_ratio
        else:
            vectors = C.plain_cut(ctx.source, cand, ctx.scorer.ev, dim=ctx.dim, calibration=calibration,
                              fallback=ctx.heal_file, seed=ctx.settings.seed, source_ckpt=ctx.model.get(),
                              scoring=ctx.settings.scoring)
        score_stage(ctx, cand, "plain", vectors, {"texts": 0})
        found = work.put(f"plain-{cand.name}", cand.to_dict())
    cand = C.Candidate.from_dict(found)
    ctx.say(f"rung 0 (plain, no training): {cand.name} known-item retention {cand.scores['plain']['retention']:.3f}"
            f", agreement@10 {cand.scores['plain']['agreement_at_10']:.3f}, time x{cand.latency_ratio:.2f}")
    return cand
