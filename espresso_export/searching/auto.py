"""``auto``: the smallest model that keeps what the user asks, searched within a time budget on their documents
and verified there.

The phases, each recorded in the work folder (:mod:`.work`) as it finishes, so a stopped search continues:

1. **Prepare** (:func:`prepare`): a seeded sample of the documents with known-item queries (:mod:`.scoring`),
   the source's vectors of it (timed: this machine's speed), and the healing texts (:mod:`.healing_texts`).
2. **Rung 0** (:mod:`.plain_cuts`): every plain cut (and the student as it comes) scored without training.
3. **Successive halving** (:mod:`.halving`): heal the candidates that may reach the target on more text at
   each rung, score, keep the cheapest; the teacher's targets are computed once and shared. A candidate keeping
   the target on the sample is scored again on all the documents (:mod:`.all_documents`).
4. **Finish** (:mod:`.finish`): the answer (:mod:`.answer`) exported, int8 where it keeps the target, verified
   against the source on the user's data, with a card, a recipe that rebuilds it, ``auto.json``/``auto.csv``
   and a plot.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from espresso_export.core.errors import ValidationError
from espresso_export.core.evidence import MIN_ITEMS
from espresso_export.core.extras import require
from espresso_export.core.files import check_output, check_outside, write_text_atomic
from espresso_export.core.settings import resolve
from espresso_export.core.types import AutoObjective
from espresso_export.model.window import WindowCut, window_cut
from espresso_export.searching.all_documents import settle
from espresso_export.searching.asked import with_asked
from espresso_export.searching.auto_result import AutoResult
from espresso_export.searching.auto_settings import DEFAULT_MAX_DIM, AutoSettings
from espresso_export.searching.budget import TRAIN_COST, Speed, finish_seconds, judged_seconds, minutes
from espresso_export.searching.context import Context, SourceModel
from espresso_export.searching.finish import finish
from espresso_export.searching.halving import earlier_heals, heal_static, search
from espresso_export.searching.healing_texts import healing_texts
from espresso_export.searching.judged_choice import judging_earlier_search
from espresso_export.searching.plain_cuts import (
    CALIBRATION_FILE,
    calibration_texts,
    plain_static,
    score_plain_cuts,
    source_step,
)
from espresso_export.searching.scoring import Scorer, Vectors, draw_sample, read_documents
from espresso_export.searching.work import WINDOW_STEP, WORK_SUFFIX, Work, fingerprint


def auto(source: str | os.PathLike, output: str | os.PathLike, settings: AutoSettings | None = None, /, *,
         overwrite: bool = False, progress: bool = False, **kwargs) -> AutoResult:
    """Search the smallest model of ``source`` that keeps ``min_retention`` on the user's documents, within
    ``time_budget``; write it, its export, its verification, card, recipe and the search's record to ``output``.

    :param source: the model to shrink: a folder, a Hub id or an alias.
    :param output: the folder to write; its work folder ``OUTPUT.auto-work`` sits beside it while the search runs.
    :param settings: an :class:`~espresso_export.searching.auto_settings.AutoSettings`, or its fields as keywords
        (``auto("minilm", "out", corpus=["docs.jsonl"], time_budget="30m")``).
    :param overwrite: replace an existing output (and continue or restart the work folder of other settings).
    :param progress: print the search's log and progress bars.
    :return: the result; its ``passed`` is False when nothing met the target (the command exits 3).
    """
    from espresso_export.model.threads import default_threads, fixed_threads

    start = time.perf_counter()
    s = resolve(AutoSettings, settings, kwargs, call="auto")
    source = os.fspath(source)
    inputs = [source, s.corpus, s.queries, s.sentences, s.retrieval, s.sts, s.student]
    out = check_output(output, overwrite=overwrite, inputs=inputs)
    check_outside(out, inputs, beside=out.with_name(out.name + WORK_SUFFIX))
    require("retrieval", "plot")
    work = Work.open(out, fingerprint(source, s), overwrite=overwrite)
    try:
        with fixed_threads(s.threads or default_threads()):
            ctx = prepare(source, s, work, progress, start)
            if (reused := work.reused()) is not None:
                ctx.say(reused)
            static = plain_static(ctx) if s.static else None
            if static is not None and s.objective is AutoObjective.LATENCY:
                heal_static(ctx, [static])  # by far the fastest candidate: its heal comes before the cuts' rung 0
            cands = score_plain_cuts(ctx) + ([static] if static is not None else [])
            settle(ctx, cands)
            ctx.model.release()
            heal_static(ctx, cands)
            if not judging_earlier_search(ctx):
                search(ctx, cands)
            earlier_heals(ctx, cands)
            settle(ctx, cands)
            result = finish(ctx, cands, out, overwrite=overwrite)
    except BaseException:
        work.discard_if_empty()  # refused or stopped before any step: no folder of nothing left behind
        raise
    if not (result.met and not ctx.stopped):  # a larger budget may do better: the work is what it continues
        result.hints.append(f"the work folder {work.folder} is kept: the same command with a larger --time-budget "
                            "and --overwrite continues this search")
    elif not s.keep_work:
        work.remove()
    return result


def prepare(source: str, s: AutoSettings, work: Work, progress: bool, start: float | None = None) -> Context:
    """The sample and its known-item queries, the source's pass over it (this machine's speed), the healing
    texts and the budget's plan: the context every later phase shares."""
    start = time.perf_counter() if start is None else start
    documents = read_documents(s.corpus, field=s.corpus_field)
    # at most half the documents queried: a query's document is never healed on, and a small corpus must leave
    # the heals documents of its own (the default query count would otherwise take every document of one)
    queries = min(s.sample_queries, max(MIN_ITEMS, len(documents.texts) // 2))
    sample = draw_sample(documents, size=s.sample_documents, queries=queries, seed=s.seed, method=s.known_items)
    if len(sample.queries) < MIN_ITEMS:  # before any model work: no score over so few queries could decide a target
        raise ValidationError(
            f"the search's sample of {len(sample.documents):,} documents gives {len(sample.queries)} known-item "
            f"queries ({sample.queries.method}), fewer than the {MIN_ITEMS} a score needs: give more documents "
            "(--corpus) or a larger sample (--sample-documents)")
    model = SourceModel(source, s.device)
    sample = with_asked(sample, s, model, work)
    src = source_step(model, work, sample, s)
    window = _window(model, work, sample.documents)
    dim = s.dim or min(src["width"], DEFAULT_MAX_DIM)
    if dim > src["width"]:
        raise ValidationError(f"--dim {dim} exceeds the source's width {src['width']}")
    heal = healing_texts(documents, sample, s, src["seconds_per_text"], work)
    calibration = work.path(CALIBRATION_FILE)
    if not calibration.exists():  # atomic: a search stopped while writing it must not keep half of it
        write_text_atomic(calibration, "\n".join(calibration_texts(sample)[0]) + "\n")
    scorer = Scorer(sample, Vectors.load(work.path("source-vectors.npz")))
    speed = Speed(src["seconds_per_text"], src["depth"], work.state.get("train_cost", TRAIN_COST))
    ctx = Context(source, s, work, scorer, speed, dim, src["width"], Path(heal["file"]), heal["texts"], progress,
                  model, start=start, reserve=finish_seconds(s, len(documents.texts), speed)
                  + judged_seconds(s, len(documents.texts), speed))
    if window is not None and window.worth_saying:
        ctx.say(window.line("the searched documents"))
    yours = f", {len(sample.asked)} of your queries" if sample.asked else ""
    if 0 < len(sample.asked) < MIN_ITEMS:
        yours += f" (fewer than the {MIN_ITEMS} a score needs: their belief read is reported, never deciding)"
    repeats = f"{documents.duplicates:,} repeats dropped, " if documents.duplicates else ""
    ctx.say(f"documents: {len(documents.texts):,} ({repeats}{len(sample.documents):,} searched, "
            f"{len(sample.queries)} known-item queries by {sample.queries.method}{yours}); healing texts: "
            f"{heal['texts']:,}; source: {src['depth']} layers, {src['width']} dims, "
            f"{1 / src['seconds_per_text']:.0f} texts/s here")
    spent = time.perf_counter() - start
    line = (f"budget {minutes(s.budget_seconds)}: {minutes(spent)} spent, the export and final check ~"
            f"{minutes(ctx.reserve)} kept aside, {minutes(max(ctx.left(), 0))} for rung 0 and the heals")
    if ctx.left() <= 0:
        line += (f"; expected total ~{minutes(spent + ctx.reserve)} at least (the source's pass, one depth's plain "
                 "cuts and the finish are always done)")
    ctx.say(line)
    return ctx


def _window(model: SourceModel, work: Work, documents: list[str]) -> WindowCut | None:
    """How many of the sample's documents the source's window cuts, counted once per work folder."""
    found = work.done(WINDOW_STEP)
    if found is None:
        ckpt = model.get()
        cut = window_cut(ckpt.tokenizer, ckpt.max_seq_length, documents, lower=ckpt.do_lower_case)
        found = work.put(WINDOW_STEP, cut.to_dict() if cut is not None else {})
    return WindowCut.of(found)
