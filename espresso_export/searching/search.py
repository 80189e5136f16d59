"""``auto``: the smallest model that keeps what the user asks, searched within a time budget on their documents
and verified there.

The phases, each recorded in the work folder (:mod:`.work`) as it finishes, so a stopped search continues:

1. **Prepare**: a seeded evaluation sample of the documents with known-item pseudo-queries
   (:mod:`.evaluation`), the source's vectors of it (timed: this machine's speed), and the healing texts (the
   documents not queried, their sentences and ``--sentences``), written once.
2. **Rung 0, the proxy** (:mod:`.rung0`): every plain cut (and the student as it comes) scored without
   training; hopeless ones dropped (:func:`.plan.hopeless`).
3. **Successive halving** (:mod:`.plan`): heal the survivors on more text at each rung, score, keep the
   cheapest that may still reach the target; the teacher's targets are computed once and shared.
4. **Finish** (:mod:`.finish`): the winner exported, int8 where it keeps the target, verified against the source
   on the user's data, with a card, a recipe that rebuilds it, ``auto.json``/``auto.csv`` and a plot.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from espresso_export.core.console import err_console
from espresso_export.core.errors import ValidationError
from espresso_export.core.evidence import MIN_ITEMS
from espresso_export.core.extras import require
from espresso_export.core.files import check_output, check_outside, write_text_atomic
from espresso_export.core.settings import resolve
from espresso_export.searching import candidates as C
from espresso_export.searching.all_documents import settle
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.budget import finish_seconds, minutes
from espresso_export.searching.evaluation import Scorer, Vectors, eval_set, read_documents
from espresso_export.searching.plan import (
    ETA,
    SEARCH_SHARE,
    TRAIN_COST,
    Rung,
    Speed,
    hopeless,
    on_ladder,
    plan_rungs,
    slack,
    survivors,
)
from espresso_export.searching.rung0 import rung0, source_step
from espresso_export.searching.rungs import run_rung
from espresso_export.searching.work import WORK_SUFFIX, Work, fingerprint

DEFAULT_TEXTS = 20_000  # healing texts at most by default
TEACHER_SHARE = 0.25  # of the budget, at most, for the teacher's pass over the healing texts
EXTEND_EPOCHS = 4  # passes over the healing texts a heal with the budget the plan left may make (the plan: 2)


class SourceModel:
    """The source checkpoint, loaded on first use and kept until :meth:`release`: the evaluation vectors and
    rung 0's timings share one load."""

    def __init__(self, spec: str, device: str = "cpu") -> None:
        self.spec, self.device, self._ckpt = spec, device, None

    def get(self):
        if self._ckpt is None:
            from espresso_export.model.checkpoint import load

            self._ckpt = C.placed(load(self.spec), self.device)
        return self._ckpt

    def release(self) -> None:
        self._ckpt = None  # the heals load their own teacher


@dataclass
class Context:
    source: str
    settings: AutoSettings
    work: Work
    scorer: Scorer
    speed: Speed
    dim: int
    width: int  # the source's output width
    heal_file: Path
    heal_texts: int
    progress: bool
    model: SourceModel
    start: float = field(default_factory=time.perf_counter)  # when the command began: the budget covers it all
    reserve: float = 0.0  # seconds of the budget kept for the finish (:func:`.budget.finish_seconds`)
    log: list[str] = field(default_factory=list)
    stopped: bool = False  # the budget ran out

    def left(self) -> float:
        """Seconds of the budget left for the search: the finish's estimate kept aside."""
        return self.settings.budget_seconds - self.reserve - (time.perf_counter() - self.start)

    def say(self, line: str, *, once: bool = False) -> None:
        """A line of the search's log, printed whole (the terminal wraps it, not rich); ``once``: not again when
        the log already holds it (a check each settle repeats)."""
        if once and line in self.log:
            return
        self.log.append(line)
        if self.progress:
            err_console().print(line, highlight=False, soft_wrap=True)


def _healing_texts(docs, ev, s: AutoSettings, seconds_per_text: float, work: Work) -> dict:
    """The texts every heal trains on (chosen once): the documents no query was made from, then short texts: the
    sentences of those documents in ``--doc-sentences`` and ``--sentences`` in the rest; the documents take at
    most ``--doc-share`` when ``--sentences`` are given. As many as a quarter of the budget's teacher pass
    allows, at most ``--max-texts`` (default 20,000)."""
    found = work.done("healing_texts")
    if found is not None:
        return found
    from espresso_export.data.corpus import read_corpus
    from espresso_export.data.pseudo_queries import passage_body

    rng = random.Random(s.seed)
    order = [i for i in range(len(docs.texts)) if i not in ev.held_out]
    rng.shuffle(order)
    own = [" ".join(docs.texts[i].split()) for i in order]
    affordable = int(TEACHER_SHARE * s.budget_seconds / max(seconds_per_text, 1e-6))
    total = max(100, min(s.max_texts or DEFAULT_TEXTS, affordable))
    general: list[str] = []
    if s.sentences:
        general = [" ".join(t.split()) for t in read_corpus(s.sentences).sentences]
        rng.shuffle(general)
    n_doc = min(len(own), total if not general else round(total * s.doc_share))
    short = total - n_doc
    # sentences of the documents not healed on whole come first (more of the user's domain); none that the final
    # check asks as a query, so it never asks for a text a heal was trained on
    bodies = [passage_body(docs, i) for i in order[n_doc:] + order[:n_doc]]  # the sentences queries come from
    cut = _document_sentences(bodies, short if not general else round(short * s.doc_sentences), rng,
                              skip=_checked_queries(s))
    texts = [t for t in dict.fromkeys(own[:n_doc] + cut + general[:short - len(cut)]) if t]
    if len(texts) < 20:
        raise ValidationError(f"only {len(texts)} healing texts: give more documents (--corpus) or --sentences")
    path = work.path("healing-texts.txt")
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return work.put("healing_texts", {"file": str(path), "texts": len(texts), "documents": n_doc,
                                      "document_sentences": len(cut),
                                      "sentences": max(0, len(texts) - n_doc - len(cut))})


def _checked_queries(s: AutoSettings) -> set[str]:
    """The queries the final check (verify on every ``--corpus``) asks: each corpus loaded as verify loads it,
    its agreement queries and its known-item queries, whitespace-normalised as the healing texts hold them."""
    from espresso_export.verification.corpus_agreement import load_corpus

    found: set[str] = set()
    for spec, queries in zip(s.corpus, s.queries or [None] * len(s.corpus)):
        corpus = load_corpus(spec, queries, method="auto", limit=s.check_queries, seed=s.seed,
                             known_items=s.known_items, field=s.corpus_field)
        found.update(corpus.queries, corpus.cloze.texts if corpus.cloze is not None else ())
    return {" ".join(t.split()) for t in found}


def _document_sentences(documents: list[str], count: int, rng: random.Random, *, skip: set[str]) -> list[str]:
    """Up to ``count`` sentences of ``documents`` (in their order) long enough to be a known-item query (the
    pseudo-queries' rule), shuffled: short texts of the user's own domain, as a search's queries are."""
    from espresso_export.data.pseudo_queries import MIN_WORDS, split_sentences

    found: dict[str, None] = {}
    for doc in documents:
        if len(found) >= count:
            break
        parts = [" ".join(x.split()) for x in split_sentences(doc)]
        found.update((x, None) for x in parts if len(parts) > 1 and len(x.split()) >= MIN_WORDS and x not in skip)
    cut = list(found)[:count]
    rng.shuffle(cut)
    return cut


def _prepare(source: str, s: AutoSettings, work: Work, progress: bool, start: float | None = None) -> Context:
    start = time.perf_counter() if start is None else start
    docs = read_documents(s.corpus, field=s.corpus_field)
    # at most half the documents queried: a query's document is never healed on, and a small corpus must leave
    # the heals documents of its own (the default query count would otherwise take every document of one)
    queries = min(s.eval_queries, max(MIN_ITEMS, len(docs.texts) // 2))
    ev = eval_set(docs, passages=s.eval_passages, queries=queries, seed=s.seed, method=s.known_items)
    if len(ev.cloze) < MIN_ITEMS:  # before any model work: no score over so few queries could decide a target
        raise ValidationError(
            f"the search's sample of {len(ev.passages):,} documents gives {len(ev.cloze)} known-item queries "
            f"({ev.cloze.method}), fewer than the {MIN_ITEMS} a score needs: give more documents (--corpus) or a "
            "larger sample (--eval-passages)")
    model = SourceModel(source, s.device)
    src = source_step(model, work, ev, s)
    dim = s.dim or min(src["width"], 384)
    if dim > src["width"]:
        raise ValidationError(f"--dim {dim} exceeds the source's width {src['width']}")
    heal = _healing_texts(docs, ev, s, src["seconds_per_text"], work)
    calibration = work.path(C.CALIBRATION_FILE)
    if not calibration.exists():  # atomic: a search stopped while writing it must not keep half of it
        write_text_atomic(calibration, "\n".join(C.calibration_texts(ev)[0]) + "\n")
    scorer = Scorer(ev, Vectors.load(work.path("source-vectors.npz")))
    speed = Speed(src["seconds_per_text"], src["depth"], work.state.get("train_cost", TRAIN_COST))
    ctx = Context(source, s, work, scorer, speed, dim, src["width"], Path(heal["file"]), heal["texts"], progress,
                  model, start=start, reserve=finish_seconds(s, len(docs.texts), speed))
    ctx.say(f"documents: {len(docs.texts):,} ({len(ev.passages):,} searched, {len(ev.cloze)} known-item queries "
            f"by {ev.cloze.method}); healing texts: {heal['texts']:,}; source: {src['depth']} layers, "
            f"{src['width']} dims, {1 / src['seconds_per_text']:.0f} texts/s here")
    spent = time.perf_counter() - start
    line = (f"budget {minutes(s.budget_seconds)}: {minutes(spent)} spent, the export and final check ~"
            f"{minutes(ctx.reserve)} kept aside, {minutes(max(ctx.left(), 0))} for rung 0 and the heals")
    if ctx.left() <= 0:
        line += (f"; expected total ~{minutes(spent + ctx.reserve)} at least (the source's pass, one depth's plain "
                 "cuts and the finish are always done)")
    ctx.say(line)
    return ctx


def auto(source: str | os.PathLike, output: str | os.PathLike, settings: AutoSettings | None = None, /, *,
         overwrite: bool = False, progress: bool = False, **kwargs):
    """Search the smallest model of ``source`` that keeps ``min_retention`` on the user's documents, within
    ``time_budget``; write it, its export, its verification, card, recipe and the search's record to ``output``.
    ``settings`` or its fields as keywords (``auto("minilm", "out", corpus=["docs.jsonl"], time_budget="30m")``).
    The result's ``passed`` is False when nothing met the target (the command exits 3)."""
    from espresso_export.searching.finish import finish
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
            ctx = _prepare(source, s, work, progress, start)
            if (reused := work.reused()) is not None:
                ctx.say(reused)
            cands = rung0(ctx)
            settle(ctx, cands)
            ctx.model.release()
            _search(ctx, cands)
            _earlier_heals(ctx, cands)
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


def _earlier_heals(ctx: Context, cands: list[C.Candidate]) -> None:
    """Heals an earlier search of the same work folder finished (another budget planned other lengths) join the
    candidates' stages: a longer budget answers at least as well as a shorter one did."""
    measured = {(c.name, sc.get("texts")) for c in cands for sc in c.scores.values()}
    for c in cands:
        for key, score in sorted(ctx.work.state["steps"].items()):
            if key.startswith(f"heal-{c.name}-") and (c.name, score.get("texts")) not in measured:
                c.scores[f"t{score['texts']}"] = score


def _sibling(c: C.Candidate) -> str | None:
    """The spread cut of a first-layers cut's depth (``L3`` for ``L3f``), else None."""
    return f"L{c.depth}" if c.name == f"L{c.depth}f" else None


def _starts(cands: list[C.Candidate]) -> dict[str, float]:
    """Each candidate's untrained score as a start for healing: its rung-0 retention; for a first-layers cut, the
    higher of its own and its spread sibling's. Untrained, a first-layers cut reads low (its last layer's output
    was never trained as an embedding), while a heal of the same layers count starts near where the spread cut
    does; its own score would drop it as hopeless, and its heal's gain over it would pass for what longer heals
    may still gain."""
    plain = {c.name: c.scores["plain"]["retention"] for c in cands}
    return {c.name: max(plain[c.name], plain.get(_sibling(c), 0.0)) for c in cands}


def _search(ctx: Context, cands: list[C.Candidate]) -> None:
    """Drop the hopeless, plan the rungs within the budget left, and halve."""
    s = ctx.settings
    target = s.min_retention
    starts = _starts(cands)
    kept = {c.name for c in cands if c.scores["plain"]["retention"] >= target and c.student is None}
    viable = []
    for c in cands:
        if hopeless(starts[c.name], target):
            c.dropped = "rung 0: too far from the target for a heal to close"
        elif c.name in kept:
            c.dropped = "meets the target untrained"
        elif _sibling(c) in kept and s.objective.value != "bytes-per-vector":
            c.dropped = f"{_sibling(c)}, as fast and as large, meets the target untrained"
        else:
            viable.append(c)
    viable.sort(key=lambda c: C.cost(c, s.objective.value, c.scores["plain"], target, s.precision))
    teacher = ctx.speed.encode(ctx.heal_texts, ctx.speed.depth) if ctx.work.done("teacher") is None else 0.0
    rungs = _fit_rungs(ctx, viable, ctx.left() - teacher)
    if not rungs:
        ctx.say("no heal fits the budget: answering from the plain cuts")
        return
    chosen = _spread(viable, rungs[0].candidates, starts)
    for _ in range(2):  # planned again for the depths chosen (deeper ones may fit fewer), and chosen again
        rungs = _fit_rungs(ctx, chosen, ctx.left() - teacher) or rungs
        if rungs[0].candidates >= len(chosen):
            break
        chosen = _spread(chosen, rungs[0].candidates, starts)
    for c in viable:
        if c not in chosen:
            c.dropped = "not healed: the budget allows fewer candidates"
    plan = ", ".join(f"{r.candidates} x {r.texts:,} texts" for r in rungs)
    ctx.say(f"plan: rungs {plan}; estimated {(_estimate(ctx, rungs, chosen) + teacher) / 60:.1f} min of "
            f"{ctx.left() / 60:.1f} left")
    _halve(ctx, chosen, rungs, starts)


def _fit_rungs(ctx: Context, viable: list[C.Candidate], seconds: float):
    if not viable or seconds <= 0:
        return []
    depth = sum(C.work_depth(c, ctx.speed.depth) for c in viable) / len(viable)
    n_eval = ctx.scorer.ev.encoded
    return plan_rungs(len(viable), depth, seconds, ctx.speed, batch_size=ctx.settings.batch_size,
                      max_texts=2 * ctx.heal_texts, score_texts=n_eval)


def _spread(ordered: list[C.Candidate], n: int, starts: dict[str, float]) -> list[C.Candidate]:
    """``n`` of the candidates (ordered cheapest first), depths before layer choices: depths spread from the
    cheapest to the best started, each by its better-scored cut (the spread one, unless the source is ESE-trained);
    only when ``n`` exceeds the depths do the other cuts of the chosen depths join: a short heal of a
    first-layers cut stays behind its spread sibling, while depth decides most. The student the user named is
    always one of them, apart from the depths (its layers are not the source's): a budget that heals one
    candidate would otherwise give it to the best-started cut and never try the student."""
    if n >= len(ordered):
        return list(ordered)
    named = [c for c in ordered if c.student is not None]
    if named:
        cuts = [c for c in ordered if c.student is None]
        return sorted(named + (_spread(cuts, n - len(named), starts) if n > len(named) else []), key=ordered.index)
    if n == 1:
        return [max(ordered, key=lambda c: (starts[c.name], c.scores["plain"]["retention"]))]
    depths = list(dict.fromkeys(c.depth for c in ordered))
    k = min(n, len(depths))
    chosen = [depths[round(i * (len(depths) - 1) / (k - 1))] for i in range(k)] if k > 1 else depths[-1:]
    tiers = [sorted((c for c in ordered if c.depth == d), key=lambda c: -c.scores["plain"]["retention"])
             for d in chosen]
    picked = [tier[i] for i in range(max(map(len, tiers))) for tier in tiers if i < len(tier)][:n]
    return sorted(picked, key=ordered.index)


def _estimate(ctx: Context, rungs, chosen: list[C.Candidate]) -> float:
    depth = sum(C.work_depth(c, ctx.speed.depth) for c in chosen) / max(len(chosen), 1)
    n_eval = ctx.scorer.ev.encoded
    return sum(r.candidates * (ctx.speed.train(r.texts, depth) + ctx.speed.encode(n_eval, depth)) for r in rungs)


def _halve(ctx: Context, active: list[C.Candidate], rungs, starts: dict[str, float]) -> None:
    s, target = ctx.settings, ctx.settings.min_retention
    before = {c.name: starts[c.name] for c in active}
    for i, rung in enumerate(rungs):
        after = run_rung(ctx, active, rung)
        if not after or ctx.stopped:
            return
        if i + 1 == len(rungs):
            _extend(ctx, [c for c in active if c.name in after], rung)
            return
        margin = slack(before, after)
        costs = {c.name: C.cost(c, s.objective.value, c.scores.get(f"r{rung.index}"), target, s.precision)
                 for c in active}
        keep = survivors(after, costs, target, rungs[i + 1].candidates, margin)
        for c in active:
            if c.name not in keep and c.dropped is None:
                c.dropped = f"rung {rung.index}: halved (score {after.get(c.name, 0):.3f}, margin {margin:.3f})"
        active = [c for c in active if c.name in keep]
        before = after


def _extend(ctx: Context, active: list[C.Candidate], rung) -> None:
    """The planned rungs ended with budget to spare (the heals ran faster than planned): while none of the last
    rung's candidates keeps the target, heal the best of them again on the longest ladder length that still
    fits, each at least :data:`.plan.ETA` times the last, or 1.5 times it when that is as many passes over
    the healing texts as :data:`EXTEND_EPOCHS` (the texts were sized by the teacher pass's share of the
    budget, so a fast heal reaches that cap while budget is left)."""
    target = ctx.settings.min_retention
    n_eval = ctx.scorer.ev.encoded
    cap = EXTEND_EPOCHS * ctx.heal_texts
    while active and not ctx.stopped:
        last = f"r{rung.index}"
        if any(c.scores[last]["retention"] >= target for c in active):
            return
        best = max(active, key=lambda c: c.scores[last]["retention"])
        depth = C.work_depth(best, ctx.speed.depth)
        lengths = {on_ladder(rung.texts * ETA * f) for f in (8, 4, 2, 1)} | {on_ladder(cap)}
        fits = [t for t in lengths
                if 1.5 * rung.texts <= t <= cap
                and ctx.speed.train(t, depth) + ctx.speed.encode(n_eval, depth) <= ctx.left() * SEARCH_SHARE]
        if not fits:
            return
        rung = Rung(rung.index + 1, 1, max(fits))
        ctx.say(f"budget left ({ctx.left() / 60:.1f} min): healing {best.name} longer, on {rung.texts:,} texts")
        if not run_rung(ctx, [best], rung):
            return
        active = [best]
