"""A candidate that keeps the target on the search's sample, scored again on all the documents before the search
trusts it.

Known-item retention falls as the index grows: the more documents, the more can stand before a query's own, and
a cut loses more of them than its source. The search scores candidates on a sample of the documents
(:mod:`.scoring`), so a score there reads higher than the same candidate's over all of them, which is what
the final check and the user's index search. So the cheapest candidate keeping the target on the sample is
scored again with the same queries over every document (the sample's, then the others), and that score decides
from then on; the sample's is kept beside it. When it misses, the next cheapest is, until one keeps the target
there, :data:`AT_ONCE` at most per call. The source's vectors of the other documents come from one pass, saved
in the work folder.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from espresso_export.searching.answer import choose
from espresso_export.searching.asked import OTHERS_FILE, save_others
from espresso_export.searching.auto_settings import OUTPUT_PRECISIONS
from espresso_export.searching.candidates import PLAIN, Candidate, SampleScore, find, work_depth
from espresso_export.searching.context import Context
from espresso_export.searching.encoding import documents_vectors, load_candidate, timed_vectors
from espresso_export.searching.plain_cuts import plain_model
from espresso_export.searching.scoring import Sample, Scorer, Vectors, nested_widths
from espresso_export.searching.work import heal_step, plain_step

AT_ONCE = 3  # heals scored again per call, at most


def settle(ctx: Context, cands: list[Candidate]) -> None:
    """Score again on all the documents the cheapest heal keeping the target on the sample, until the cheapest
    keeping it has been scored there (or :data:`AT_ONCE` were, or the budget would not cover one more)."""
    if not ctx.sample.others:
        return  # the sample is all the documents
    for _ in range(AT_ONCE):
        answer = choose(cands, ctx.settings, ctx.queries)
        if answer is None or answer.measured.on_all_documents:
            return
        cand = find(cands, answer.name)
        every = len(ctx.sample.documents) + len(ctx.sample.others)
        need = ctx.speed.encode(every, work_depth(cand, ctx.speed.depth))
        if need > max(ctx.left(), 0.0):
            ctx.say(f"{answer.describe()}: no budget left to score it on all the documents (~{need / 60:.1f} min); "
                    "the final check scores it there", once=True)
            return
        _rescore(ctx, cand, answer.heal)


def _rescore(ctx: Context, cand: Candidate, name: str) -> None:
    heal = cand.scores[name]
    every = ctx.sample.with_others()
    vectors = timed_vectors(heal_model(ctx, cand, heal.folder), every, ctx.settings.scoring)[0]
    scorer = _scorer(ctx, every)
    cand.scores[name] = replace(heal, score=scorer.score(vectors),
                                forms=scorer.forms(vectors, nested_widths(ctx.dim), list(OUTPUT_PRECISIONS)),
                                sample=SampleScore(heal.score, heal.forms), documents=len(every.documents))
    if name == PLAIN:  # the step as rung 0 records it: the candidate with its plain heal alone
        ctx.work.put(plain_step(cand.name), {**cand.to_dict(), "scores": {PLAIN: cand.scores[PLAIN].to_dict()}})
    else:
        ctx.work.put(heal_step(cand.name, heal.texts), cand.scores[name].to_dict())
    ctx.say(f"{cand.name} ({name}): {ctx.score_name} {heal.retention:.3f} on the sample, "
            f"{cand.scores[name].retention:.3f} on all {len(every.documents):,} documents: that decides from here")


def heal_model(ctx: Context, cand: Candidate, folder: str | None):
    """The heal's model, in memory: its folder, or the candidate plain (the student, or the cut rebuilt as the
    recipe rebuilds it)."""
    if folder is not None:
        return load_candidate(folder, ctx.settings.device)
    return plain_model(ctx, cand)


def _scorer(ctx: Context, every: Sample) -> Scorer:
    """The source's vectors of every document (the sample's from its pass, the others' from one more, saved)."""
    path = ctx.work.path(OTHERS_FILE)
    if not path.is_file():
        save_others(ctx.work, documents_vectors(ctx.model.get(), ctx.sample.others, ctx.settings.scoring))
    source = ctx.scorer.source
    return Scorer(every, Vectors(source.queries, np.concatenate([source.documents, np.load(path)]), source.targets,
                                 source.asked))
