"""A candidate that keeps the target on the search's sample, scored again on all the documents before the search
trusts it.

Known-item retention falls as the index grows: the more documents, the more can stand before a query's own, and
a cut loses more of them than its source. The search scores candidates on a sample of the documents
(:mod:`.evaluation`), so a score there reads higher than the same candidate's over all of them, which is what
the final check and the user's index search. So the cheapest candidate keeping the target on the sample is
scored again with the same queries over every document (the sample's, then the others), and that score decides
from then on; the sample's is kept beside it. When it misses, the next cheapest is, until one keeps the target
there, :data:`AT_ONCE` at most per call. The source's vectors of the other documents come from one pass, saved
in the work folder.
"""

from __future__ import annotations

import numpy as np

from espresso_export.searching import candidates as C
from espresso_export.searching.auto_settings import OUTPUT_PRECISIONS
from espresso_export.searching.evaluation import EvalSet, Scorer, Vectors

OTHERS_FILE = "source-other-documents.npy"  # the source's unit vectors of the documents not in the sample
AT_ONCE = 3  # stages scored again per call, at most
SAMPLE_KEYS = ("retention", "ci95", "agreement_at_10", "variants")


def settle(ctx, cands: list[C.Candidate]) -> None:
    """Score again on all the documents the cheapest stage keeping the target on the sample, until the cheapest
    keeping it has been scored there (or :data:`AT_ONCE` were, or the budget would not cover one more)."""
    from espresso_export.searching.finish import pick

    if not ctx.scorer.ev.others:
        return  # the sample is all the documents
    for _ in range(AT_ONCE):
        chosen = pick(cands, ctx.settings, len(ctx.scorer.ev.cloze))
        if chosen is None or "sample" in chosen.stage:
            return
        cand = next(c for c in cands if c.name == chosen.name)
        every = len(ctx.scorer.ev.passages) + len(ctx.scorer.ev.others)
        need = ctx.speed.encode(every, C.work_depth(cand, ctx.speed.depth))
        if need > max(ctx.left(), 0.0):
            ctx.say(f"{cand.name} ({chosen.stage_name}): no budget left to score it on all the documents (~"
                    f"{need / 60:.1f} min); the final check scores it there", once=True)
            return
        _rescore(ctx, cand, chosen.stage_name)


def _rescore(ctx, cand: C.Candidate, stage_name: str) -> None:
    stage = cand.scores[stage_name]
    ev: EvalSet = ctx.scorer.ev
    model = _model(ctx, cand, stage)
    every = EvalSet(ev.passages + ev.others, ev.cloze, ev.held_out)  # the queries' own documents come first
    vectors = C.timed_vectors(model, every, ctx.settings.scoring)[0]
    scorer = _scorer(ctx, every)
    main = scorer.score(vectors).to_dict()
    sample = {k: stage[k] for k in SAMPLE_KEYS}
    stage.update(main, variants=C.variants(scorer, vectors, C.nested_widths(ctx.dim), list(OUTPUT_PRECISIONS)),
                 sample=sample, documents=len(every.passages))
    ctx.work.put(_step(cand, stage_name, stage), _plain_record(cand) if stage_name == "plain" else stage)
    ctx.say(f"{cand.name} ({stage_name}): known-item retention {sample['retention']:.3f} on the sample, "
            f"{main['retention']:.3f} on all {len(every.passages):,} documents: that decides from here")


def _plain_record(cand: C.Candidate) -> dict:
    """The ``plain-`` step as rung 0 records it: the candidate with its plain stage alone (its heals are steps of
    their own)."""
    return {**cand.to_dict(), "scores": {"plain": cand.to_dict()["scores"]["plain"]}}


def _step(cand: C.Candidate, stage_name: str, stage: dict) -> str:
    from espresso_export.searching.rungs import stage_key

    return f"plain-{cand.name}" if stage_name == "plain" else stage_key(cand, stage["texts"])


def _model(ctx, cand: C.Candidate, stage: dict):
    """The stage's model, in memory: a heal's folder, the student, or the plain cut rebuilt as the recipe
    rebuilds it (shrink, its head fitted on the texts rung 0 fitted it on)."""
    from espresso_export.model.checkpoint import load

    if "folder" in stage:
        return C.placed(load(stage["folder"]), ctx.settings.device)
    if cand.student is not None:
        return C.placed(load(cand.student), ctx.settings.device)
    from espresso_export.searching.recipe_file import rebuild_plain

    return C.placed(rebuild_plain(ctx, cand).checkpoint, ctx.settings.device)


def _scorer(ctx, every: EvalSet) -> Scorer:
    """The source's vectors of every document (the sample's from its pass, the others' from one more, saved)."""
    from espresso_export.model.cache import atomic_file

    path = ctx.work.path(OTHERS_FILE)
    if not path.is_file():
        others = C.documents_vectors(ctx.model.get(), ctx.scorer.ev.others, ctx.settings.scoring)

        def write(tmp) -> None:
            with open(tmp, "wb") as fh:  # a file object: np.save would append ".npy" to a temp name
                np.save(fh, others)

        atomic_file(path, write)
    source = ctx.scorer.source
    return Scorer(every, Vectors(source.queries, np.concatenate([source.passages, np.load(path)]), source.targets))
