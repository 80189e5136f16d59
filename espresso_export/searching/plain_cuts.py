"""``auto``'s rung 0, the proxy: every plain cut (each depth, its layers spread over the source and its first
layers) and the student as it comes, scored on the sample without training; and a plain cut rebuilt as its
recipe rebuilds it. The first-layers cuts are prefixes of the source: the source's own pass over the sample
(:func:`source_step`) gives all of them."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.types import AutoObjective
from espresso_export.core.vectors import l2_normalised
from espresso_export.data.files import text_lines
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.budget import cut_seconds, minutes
from espresso_export.searching.candidates import PLAIN, STATIC, Candidate, head_width
from espresso_export.searching.context import Context, SourceModel
from espresso_export.searching.encoding import (
    TIMED_ROUNDS,
    TIMED_TEXTS,
    load_candidate,
    placed,
    source_pass,
    time_ratio,
    timed_vectors,
)
from espresso_export.searching.scoring import NESTED_WIDTHS, Sample, Vectors
from espresso_export.searching.work import Work, plain_step

FIRST_FILE = "first-cuts.npz"  # the unit vectors of the source's first-layers cuts, from its own pass
CALIBRATION = 2000  # healing texts a plain cut's PCA head is fitted on when the searched documents are too few
CALIBRATION_FILE = "calibration-texts.txt"  # the searched documents, one per line: what a plain cut's head is fitted on


def depths(s: AutoSettings, depth: int) -> list[int]:
    """The depths rung 0 cuts the source to: every depth below the source's (``--layers`` restricts them); for
    bytes per vector the source's own depth competes too (its head narrowed, its vectors stored smaller)."""
    deepest = depth + 1 if s.objective is AutoObjective.BYTES_PER_VECTOR else depth
    return sorted(d for d in (s.layers or range(1, deepest)) if d < deepest)


def source_step(model: SourceModel, work: Work, sample: Sample, s: AutoSettings) -> dict:
    """The source's vectors of the sample (saved), its speed, depth and width; from the same pass, the unit
    vectors of its first-layers cuts (:func:`_first_vectors`)."""
    found = work.done("source")
    if found is None:
        ckpt = model.get()
        vectors, per_text, first = source_pass(ckpt, sample, depths(s, ckpt.depth), s.scoring)
        vectors.save(work.path("source-vectors.npz"))
        _save_first(work, first)
        found = work.put("source", {"seconds_per_text": per_text, "depth": ckpt.depth, "width": ckpt.output_dim,
                                    "params": int(ckpt.n_params)})
    return found


def _save_first(work: Work, first: dict[int, Vectors]) -> None:
    """Whole or absent (:func:`~espresso_export.model.cache.atomic_file`): a search stopped while writing it
    computes it again."""
    from espresso_export.model.cache import atomic_file

    arrays = {f"{k}{d}": x for d, v in first.items() for k, x in zip("qdta", (*v.triple(), v.asked)) if x is not None}

    def write(tmp) -> None:
        with open(tmp, "wb") as fh:  # a file object: np.savez would append ".npz" to a temp name
            np.savez(fh, **arrays)

    atomic_file(work.path(FIRST_FILE), write)


def _first_vectors(ctx: Context, wanted: list[int]) -> dict[int, Vectors]:
    """``{d: Vectors}``: each first-``d``-layers cut's unit vectors of the sample, saved by the source's pass (a
    work folder from before they were computed gets them from one more pass)."""
    path = ctx.work.path(FIRST_FILE)
    if path.is_file():
        with np.load(path) as z:
            if all(f"d{d}" in z for d in wanted):
                return {d: Vectors(z[f"q{d}"], z[f"d{d}"], z[f"t{d}"], z[f"a{d}"] if f"a{d}" in z else None)
                        for d in wanted}
    first = source_pass(ctx.model.get(), ctx.sample, wanted, ctx.settings.scoring)[2]
    _save_first(ctx.work, first)
    return first


def score_plain_cuts(ctx: Context) -> list[Candidate]:
    """Every plain cut, at every depth its layers spread over the source (``L3``) and its first layers (``L3f``),
    and the student as it comes, scored without training (the static candidate: :func:`plain_static`)."""
    s = ctx.settings
    wanted = depths(s, ctx.speed.depth)
    if not wanted and s.student is None:
        raise ValidationError(f"--layers {s.layers}: the source has {ctx.speed.depth} layers; give depths below it")
    _fit_width(ctx)
    out = []
    if s.student is not None:  # the user named it: always scored
        out.append(_plain(ctx, Candidate("student", 0, student=s.student), None))
    n_eval = ctx.sample.encoded
    # time_ratio's rounds (a warm-up and the timed ones, each model once), until one cut's overhead is measured
    overhead = ctx.speed.encode((TIMED_ROUNDS + 1) * TIMED_TEXTS, ctx.speed.depth)
    for i, d in enumerate(sorted(wanted, reverse=True)):  # deepest first: the likeliest to keep a target untrained
        need = cut_seconds(ctx.speed, d, n_eval, overhead)
        if i and ctx.work.done(plain_step(f"L{d}")) is None and need > ctx.left():
            ctx.say(f"rung 0: the budget left ({minutes(max(ctx.left(), 0))}) does not cover the cuts of "
                    f"{d} layers or fewer (~{minutes(need)} each): not scored; a larger --time-budget scores them")
            break
        started, fresh = time.perf_counter(), ctx.work.done(plain_step(f"L{d}")) is None
        out.append(_plain(ctx, Candidate(f"L{d}", d), None))
        spread = out[-1]
        if fresh:  # measured here, not read back: what building, heading and timing a cut costs beyond encoding
            overhead = max(0.0, time.perf_counter() - started - ctx.speed.encode(n_eval, d))
        if d < ctx.speed.depth and spread.layers != list(range(d)):  # shrink keeps the first ones for ESE models
            out.append(_plain(ctx, Candidate(f"L{d}f", d, layers=list(range(d))), spread))
    return sorted(out, key=lambda c: (not c.is_cut, c.depth, c.name))


def static_settings(ctx: Context) -> dict:
    """distill's settings for the static candidate untrained: model2vec's distillation of the source at the
    search's width (what the recipe rebuilds)."""
    return {"student": STATIC, "dim": ctx.dim, "seed": ctx.settings.seed, "device": ctx.settings.device}


def plain_static(ctx: Context) -> Candidate | None:
    """The static candidate untrained (rung 0): the source distilled by model2vec into the work folder, scored,
    timed against the source. None, said, without the static extra or when model2vec cannot distil the source."""
    from espresso_export.core.errors import EspressoError
    from espresso_export.core.extras import missing_modules
    from espresso_export.distilling.run import distill

    found = ctx.work.done(plain_step(STATIC))
    if found is None:
        if ctx.left() <= 0:
            ctx.say("static: not tried, no budget left (a larger --time-budget tries it)")
            return None
        if missing_modules("static"):
            ctx.say("static: not tried, the static extra is not installed (pip install \"espresso-export[static]\")")
            return None
        cand, folder, kwargs = Candidate(STATIC, 0, student=STATIC), ctx.work.path("heals", STATIC), static_settings(ctx)
        start = time.perf_counter()
        try:
            distill(ctx.source, folder, overwrite=True, progress=False, **kwargs)
        except EspressoError as e:
            ctx.say(f"static: not tried, model2vec could not distil the source ({e})")
            return None
        seconds = time.perf_counter() - start
        model = load_candidate(folder, "cpu")
        vectors = timed_vectors(model, ctx.sample)[0]
        cand.params, cand.latency_ratio = model.n_params, time_ratio(ctx.model.get(), model, ctx.sample.documents)
        cand.scores[PLAIN] = ctx.measure(vectors, folder=str(folder), settings=kwargs, seconds=round(seconds, 1))
        found = ctx.work.put(plain_step(STATIC), cand.to_dict())
    cand = Candidate.from_dict(found)
    ctx.say(f"rung 0 (plain, no training): {STATIC} (model2vec) {ctx.score_name} "
            f"{cand.scores[PLAIN].retention:.3f}, time x{cand.latency_ratio:.3f}")
    return cand


def _fit_width(ctx: Context) -> None:
    """The candidates' width narrowed to what the healing texts can fit (:func:`.candidates.head_width`), said in
    the log: a PCA head needs more texts than dims, and a small corpus has fewer than the default width."""
    fitted = head_width(ctx.dim, ctx.heal_texts)
    if fitted == ctx.dim:
        return
    if not fitted:
        raise ValidationError(f"only {ctx.heal_texts} healing texts: a PCA head of {NESTED_WIDTHS[0]} dims needs "
                              f"{NESTED_WIDTHS[0] + 1}; give more documents (--corpus) or --sentences")
    ctx.say(f"width: {fitted} dims, not {ctx.dim}: a PCA head needs more texts than dims, and there are "
            f"{ctx.heal_texts:,} healing texts (more documents, or --sentences, allow a wider one)")
    ctx.dim = fitted


def _plain(ctx: Context, cand: Candidate, same_depth: Candidate | None) -> Candidate:
    """``cand`` scored untrained (once: a resumed search reads it back). A first-layers cut takes its vectors
    from the source's pass, and its parameters and speed from the spread cut of its depth (``same_depth``: the
    same layers, counted and timed)."""
    work = ctx.work
    found = work.done(plain_step(cand.name))
    if found is None:
        texts, rows = calibration_texts(ctx.sample)
        calibration = work.path(CALIBRATION_FILE)
        if same_depth is not None and len(texts) > ctx.dim:
            unit = _first_vectors(ctx, [cand.depth])[cand.depth]
            vectors = headed(cand, unit, rows, ctx.dim, calibration)[0]
            cand.params, cand.latency_ratio = same_depth.params, same_depth.latency_ratio
        else:
            vectors = plain_cut(ctx, cand, calibration=calibration)
        cand.scores[PLAIN] = ctx.measure(vectors)
        found = work.put(plain_step(cand.name), cand.to_dict())
    cand = Candidate.from_dict(found)
    plain = cand.scores[PLAIN]
    ctx.say(f"rung 0 (plain, no training): {cand.name} {ctx.score_name} {plain.retention:.3f}, agreement@10 "
            f"{plain.score.agreement_at_10:.3f}, time x{cand.latency_ratio:.2f}")
    return cand


def calibration_texts(sample: Sample) -> tuple[list[str], list[int]]:
    """The searched documents as a calibration file holds them (whitespace collapsed, each distinct text once, as
    ``read_sentences`` reads them back) and the positions in ``sample.documents`` of those kept."""
    seen: dict[str, int] = {}
    for i, t in enumerate(sample.documents):
        text = " ".join(t.split())
        if text and text not in seen:
            seen[text] = i
    return list(seen), list(seen.values())


def plain_cut(ctx: Context, cand: Candidate, *, calibration: Path) -> Vectors:
    """Rung 0: the source cut to ``cand.layers`` (else ``cand.depth`` layers as shrink chooses them) with a PCA
    head, untrained (a student as it comes); fills in its layers, parameters and speed.

    The head is fitted on the searched documents' vectors the cut has just encoded (``calibration`` holds those
    texts, for the rebuild), so nothing is encoded twice: encoding is what rung 0 costs, and fitting the head on
    other texts would encode those too, at every depth. With no more documents than the width, shrink fits it on
    :data:`CALIBRATION` of the healing texts instead."""
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import model_device
    from espresso_export.model.post import renormalized, with_head
    from espresso_export.shrinking.shrink import shrink

    s, sample, source_ckpt = ctx.settings, ctx.sample, ctx.model.get()
    texts, rows = calibration_texts(sample)
    device = model_device(source_ckpt.model)
    if not cand.is_cut:
        ckpt = placed(load(cand.student), device)
        cand.depth = ckpt.depth
        vectors = timed_vectors(ckpt, sample, s.scoring)[0]
    elif len(texts) <= ctx.dim:
        cut = shrink(ctx.source, None, layers=cand.layers or cand.depth, dim=ctx.dim, calibration=str(ctx.heal_file),
                     seed=s.seed, calibration_samples=CALIBRATION, progress=False)
        ckpt, cand.layers = placed(cut.checkpoint, device), list(cut.layers)
        vectors = timed_vectors(ckpt, sample, s.scoring)[0]
    else:
        cut = shrink(ctx.source, None, layers=cand.layers or cand.depth, progress=False)
        ckpt, cand.layers = placed(cut.checkpoint, device), list(cut.layers)
        base = renormalized(ckpt.post)  # unit vectors: what shrink fits a PCA head on
        ckpt.post = base
        vectors, head = headed(cand, timed_vectors(ckpt, sample, s.scoring)[0], rows, ctx.dim, calibration)
        ckpt.post = with_head(base, head)  # the model shrink builds from ``calibration``
    cand.params = int(ckpt.n_params)
    cand.latency_ratio = time_ratio(source_ckpt, ckpt, sample.documents)
    return vectors


def headed(cand: Candidate, unit: Vectors, rows: list[int], dim: int, calibration: Path):
    """A plain cut's vectors through the PCA head fitted on its unit vectors of the searched documents (rows
    ``rows`` of the sample's documents), and that head (a Dense layer): the model shrink builds from
    ``calibration``."""
    from espresso_export.shrinking.heads import fit_pca

    pca = fit_pca(unit.documents[rows], dim)
    cand.calibration = calibration.name
    return unit.mapped(lambda x: l2_normalised(pca.transform(x).astype(np.float32))), pca.as_dense()


def plain_calibration(ctx: Context, cand: Candidate) -> tuple[Path, int]:
    """The texts a plain cut's PCA head was fitted on in rung 0, and how many: the searched documents (all of
    them), or :data:`CALIBRATION` of the healing texts."""
    if cand.calibration is None:
        return ctx.heal_file, CALIBRATION
    path = ctx.work.path(cand.calibration)
    return path, len(text_lines(path.read_text(encoding="utf-8")))


def rebuild_plain(ctx: Context, cand: Candidate, folder: Path | None = None):
    """The plain cut as its recipe rebuilds it (shrink, its head fitted on the texts rung 0 fitted it on): into
    ``folder``, or in memory when None; shrink's result."""
    from espresso_export.shrinking.shrink import shrink

    calibration, samples = plain_calibration(ctx, cand)
    return shrink(ctx.source, folder, layers=cand.layers, dim=ctx.dim, calibration=str(calibration),
                  calibration_samples=samples, seed=ctx.settings.seed, progress=False)


def plain_model(ctx: Context, cand: Candidate):
    """The candidate plain, in memory on ``--device``: the static model as rung 0 built it, the student as it
    comes, or the cut rebuilt."""
    from espresso_export.model.checkpoint import load

    if cand.is_static:
        return load_candidate(cand.scores[PLAIN].folder, ctx.settings.device)
    if not cand.is_cut:
        return placed(load(cand.student), ctx.settings.device)
    return placed(rebuild_plain(ctx, cand).checkpoint, ctx.settings.device)

