"""How ``auto`` spends its budget on heals: successive halving over the candidates, sized from this machine's speed.

Rung 0 is free of training: every plain cut is scored (:mod:`.plain_cuts`). Candidates whose plain score could
not reach the target even if healing closed almost all of their gap to the source are dropped there
(:func:`hopeless`). Then rung ``r`` heals each remaining candidate on ``texts[r]`` texts (:data:`ETA` times the
previous rung's), scores it, and keeps the cheapest ``1/ETA`` of those that may still reach the target, plus the
cheapest that already does (:func:`survivors`). Every rung costs about the same; the texts per rung are chosen
so that the rungs fit the budget left after the teacher pass (:func:`plan_rungs`), estimated from the source's
measured encoding speed and corrected by each heal's measured speed. Budget left after the last rung heals the
best candidate longer (:func:`_extend`). The static candidate is no part of the halving: it is healed once, on
every healing text, before it (:func:`heal_static`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from espresso_export.core.types import AutoObjective
from espresso_export.searching.all_documents import settle
from espresso_export.searching.answer import choose
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.budget import Speed, minutes
from espresso_export.searching.candidates import PLAIN, Candidate, Heal, cost, find, work_depth
from espresso_export.searching.context import Context
from espresso_export.searching.encoding import load_candidate
from espresso_export.searching.heals import heal_and_score
from espresso_export.searching.work import heal_step

ETA = 3  # keep a third at each rung
MAX_GAP_CLOSED = 0.95  # rung 0: a heal closes at most this share of a plain cut's gap to the source
MIN_STEPS = 20  # a heal shorter than this says little
LONGER_GAIN = 0.5  # a heal ETA times as long gains at most this share of what the last one gained
SEARCH_SHARE = 0.85  # of the budget left after the fixed costs; the rest absorbs estimation error
MIN_SLACK = 0.005  # the least a candidate is assumed to gain from a longer heal
LADDER = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)  # heal lengths are rounded down to these x 10^k texts
# after the last rung: a longer heal of the best candidate, ETA times the last one's length times one of these
# (the longest that fits), or at least EXTEND_MIN_GROWTH times it when that reaches EXTEND_EPOCHS passes over
# the healing texts (sized by the teacher pass's share of the budget, so a fast heal reaches that cap first)
EXTEND_FACTORS = (8, 4, 2, 1)
EXTEND_MIN_GROWTH = 1.5
EXTEND_EPOCHS = 4  # the plan's heals make at most 2 passes over the healing texts (plan_rungs' max_texts)
# a static heal's time over its untrained distillation's: the vocabulary grows by the texts' words, then the table
# trains (seconds) and a PCA is fitted; the teacher pass is counted apart
STATIC_HEAL_FACTOR = 2.0
STATIC_RUNG = "r1"  # the static candidate's one heal, under the first rung's name


def on_ladder(texts: float) -> int:
    """``texts`` rounded down to :data:`LADDER`: searches with other budgets plan the same heal lengths, so a
    rerun with more time reuses the heals a shorter one finished."""
    if texts < 1:
        return 0
    power = 10 ** math.floor(math.log10(texts))
    return int(max(step * power for step in LADDER if step * power <= texts + 1e-9))


@dataclass(frozen=True)
class Rung:
    index: int  # 1, 2, ...
    candidates: int  # how many are healed at this rung
    texts: int  # training texts per heal (steps x batch size)

    @property
    def name(self) -> str:
        """The heal's name in a candidate's scores: ``r1``, ``r2``, ..."""
        return f"r{self.index}"


def plan_rungs(n: int, depth: float, seconds: float, speed: Speed, *, batch_size: int, max_texts: int,
               score_texts: int = 0) -> list[Rung]:
    """Rungs for ``n`` candidates of about ``depth`` layers within ``seconds``: as many as halving ``n`` down to one
    takes, each given the same time. Fewer candidates (the caller's best first) when even the first rung would
    be shorter than :data:`MIN_STEPS` steps. The last rung is capped at ``max_texts`` (two epochs of the
    healing texts). Each heal is followed by encoding ``score_texts`` texts to score it."""
    while n >= 1:
        sizes = [n]
        while sizes[-1] > 1:
            sizes.append(math.ceil(sizes[-1] / ETA))
        weights = sum(c * ETA**r for r, c in enumerate(sizes))
        scoring = sum(sizes) * speed.encode(score_texts, depth)
        first = (seconds * SEARCH_SHARE - scoring) / max(weights * speed.train(1, depth), 1e-9)
        if first >= MIN_STEPS * batch_size:
            rungs: list[Rung] = []
            for r, c in enumerate(sizes):
                texts = on_ladder(min(first * ETA**r, max_texts))
                if rungs and texts <= rungs[-1].texts:  # capped: a longer heal is not possible, stop halving here
                    break
                rungs.append(Rung(r + 1, c, texts))
            return rungs
        n -= 1
    return []


def hopeless(plain: float, target: float) -> bool:
    """Rung 0: even a heal closing :data:`MAX_GAP_CLOSED` of the plain cut's gap would miss the target."""
    return plain + (1.0 - plain) * MAX_GAP_CLOSED < target


def slack(before: dict[str, float], after: dict[str, float]) -> float:
    """How much more a candidate may still gain from a longer heal: :data:`LONGER_GAIN` of the largest gain the
    last rung measured (longer heals gain less), at least :data:`MIN_SLACK`."""
    gains = [after[k] - before[k] for k in after if k in before]
    return max(MIN_SLACK, LONGER_GAIN * max(gains, default=0.0))


def survivors(scores: dict[str, float], costs: dict[str, float], target: float, keep: int, margin: float) -> list[str]:
    """The cheapest ``keep`` candidates whose score plus ``margin`` reaches ``target``, and the cheapest that already
    reaches it; when none may reach it, the ``keep`` best scored (the closest to the target)."""
    by_cost = sorted(scores, key=lambda k: (costs[k], -scores[k]))
    hopeful = [k for k in by_cost if scores[k] + margin >= target]
    if not hopeful:
        return sorted(scores, key=lambda k: -scores[k])[:keep]
    chosen = hopeful[:keep]
    meets = [k for k in by_cost if scores[k] >= target]
    if meets and meets[0] not in chosen:
        chosen.append(meets[0])
    return chosen


def earlier_heals(ctx: Context, cands: list[Candidate]) -> None:
    """Heals an earlier search of the same work folder finished (another budget planned other lengths) join the
    candidates' heals: a longer budget answers at least as well as a shorter one did."""
    measured = {(c.name, h.texts) for c in cands for h in c.scores.values()}
    for c in cands:
        for record in ctx.work.heals_of(c.name):
            if (c.name, record.get("texts")) not in measured:
                c.scores[f"t{record['texts']}"] = Heal.from_dict(record)


def starts(cands: list[Candidate]) -> dict[str, float]:
    """Each candidate's untrained score as a start for healing: its rung-0 retention; for a first-layers cut, the
    higher of its own and its spread sibling's. Untrained, a first-layers cut reads low (its last layer's output
    was never trained as an embedding), while a heal of the same layers count starts near where the spread cut
    does; its own score would drop it as hopeless, and its heal's gain over it would pass for what longer heals
    may still gain."""
    plain = {c.name: c.scores[PLAIN].retention for c in cands}
    return {c.name: max(plain[c.name], plain.get(c.sibling(), 0.0)) for c in cands}


def heal_static(ctx: Context, cands: list[Candidate]) -> None:
    """The static candidate healed once on every healing text (a table trains in seconds: what costs is
    model2vec's distillation and the shared teacher pass), when the budget covers it, whatever its untrained score
    (which never answers: :func:`~espresso_export.searching.answer.may_answer`); then scored on all the documents
    if it is the cheapest keeping the target."""
    cand = next((c for c in cands if c.is_static), None)
    if cand is None or cand.dropped is not None:
        return
    plain = cand.scores[PLAIN]
    done = ctx.work.done(heal_step(cand.name, ctx.heal_texts))
    if done is None:
        teacher = ctx.speed.encode(ctx.heal_texts, ctx.speed.depth) if ctx.work.done("teacher") is None else 0.0
        need = STATIC_HEAL_FACTOR * (plain.seconds or 0.0) + teacher
        if need > ctx.left() * SEARCH_SHARE:
            cand.dropped = "not healed: the budget left does not cover it"
            share = minutes(max(ctx.left(), 0) * SEARCH_SHARE)
            ctx.say(f"static: not healed, it needs ~{minutes(need)}, more than the {share} it may take of the "
                    f"{minutes(max(ctx.left(), 0))} left")
            return
        ctx.say(f"static: healing it on {ctx.heal_texts:,} texts (~{minutes(need)})")
        heal = heal_and_score(ctx, cand, ctx.heal_texts, "static")
        if heal is None:
            cand.dropped = "heal stopped, the budget ran out"
            ctx.say("static: the budget ran out while healing it")
            return
        ctx.work.put(heal_step(cand.name, ctx.heal_texts), heal.to_dict())
        ctx.work.save()
    else:
        heal = Heal.from_dict(done)
    cand.scores[STATIC_RUNG] = heal
    # the corpus's words join its table: one parameter count for both (the healed one's, the larger)
    cand.params = max(cand.params, load_candidate(heal.folder, "cpu").n_params)
    cand.dropped = "healed once, on every healing text"
    ctx.say(f"static: {ctx.score_name} {heal.retention:.3f} healed ({plain.retention:.3f} untrained), "
            f"agreement@10 {heal.score.agreement_at_10:.3f}")
    settle(ctx, cands)


def search(ctx: Context, cands: list[Candidate]) -> None:
    """Drop the hopeless, plan the rungs within the budget left, and halve (transformers only: the static
    candidate had its heal, :func:`heal_static`)."""
    s = ctx.settings
    target = s.min_retention
    beaten = beaten_by_answer(cands, s, ctx.queries, whole=not ctx.sample.others)
    cands = [c for c in cands if not c.is_static]
    begin = starts(cands)
    kept = {c.name for c in cands if c.scores[PLAIN].retention >= target and c.is_cut}
    viable = []
    for c in cands:
        if hopeless(begin[c.name], target):
            c.dropped = "rung 0: too far from the target for a heal to close"
        elif c.name in kept:
            c.dropped = "meets the target untrained"
        elif c.sibling() in kept and s.objective is not AutoObjective.BYTES_PER_VECTOR:
            c.dropped = f"{c.sibling()}, as fast and as large, meets the target untrained"
        elif c.name in beaten:
            c.dropped = beaten[c.name]
        else:
            viable.append(c)
    if not viable:
        ctx.say("rung 0: no candidate left to heal (each keeps the target untrained, is too far from it, or is "
                "no cheaper than an answer kept on all the documents)")
        return
    viable.sort(key=lambda c: cost(c, s.objective, c.scores[PLAIN], target, s.precision))
    teacher = ctx.speed.encode(ctx.heal_texts, ctx.speed.depth) if ctx.work.done("teacher") is None else 0.0
    rungs = _fit_rungs(ctx, viable, ctx.left() - teacher)
    if not rungs:
        ctx.say("no heal fits the budget: answering from the plain cuts")
        return
    chosen = spread(viable, rungs[0].candidates, begin)
    for _ in range(2):  # planned again for the depths chosen (deeper ones may fit fewer), and chosen again
        rungs = _fit_rungs(ctx, chosen, ctx.left() - teacher) or rungs
        if rungs[0].candidates >= len(chosen):
            break
        chosen = spread(chosen, rungs[0].candidates, begin)
    for c in viable:
        if c not in chosen:
            c.dropped = "not healed: the budget allows fewer candidates"
    plan = ", ".join(f"{r.candidates} x {r.texts:,} texts" for r in rungs)
    ctx.say(f"plan: rungs {plan}; estimated {(_estimate(ctx, rungs, chosen) + teacher) / 60:.1f} min of "
            f"{ctx.left() / 60:.1f} left")
    _halve(ctx, chosen, rungs, begin)


def beaten_by_answer(cands: list[Candidate], s: AutoSettings, queries: int, *, whole: bool) -> dict[str, str]:
    """Candidates no heal can make the answer: for latency or size (a cost no heal changes), those no cheaper
    than an answer already keeping the target on all the documents (``whole``: the sample is all of them), by
    name, with why. Healing them would spend the budget on answers that cannot win."""
    if s.objective is AutoObjective.BYTES_PER_VECTOR:
        return {}
    found = choose(cands, s, queries)
    if found is None or not (whole or found.measured.on_all_documents):
        return {}
    bar = cost(find(cands, found.name), s.objective, found.measured, s.min_retention, s.precision)
    return {c.name: f"no cheaper than {found.describe()}, which keeps the target on all the documents"
            for c in cands if c.name != found.name
            and cost(c, s.objective, c.scores[PLAIN], s.min_retention, s.precision) >= bar}


def _mean_depth(ctx: Context, cands: list[Candidate]) -> float:
    return sum(work_depth(c, ctx.speed.depth) for c in cands) / max(len(cands), 1)


def _fit_rungs(ctx: Context, viable: list[Candidate], seconds: float) -> list[Rung]:
    if not viable or seconds <= 0:
        return []
    return plan_rungs(len(viable), _mean_depth(ctx, viable), seconds, ctx.speed, batch_size=ctx.settings.batch_size,
                      max_texts=2 * ctx.heal_texts, score_texts=ctx.sample.encoded)


def spread(ordered: list[Candidate], n: int, begin: dict[str, float]) -> list[Candidate]:
    """``n`` of the candidates (ordered cheapest first), depths before layer choices: depths spread from the
    cheapest to the best started, each by its better-scored cut (the spread one, unless the source is ESE-trained);
    only when ``n`` exceeds the depths do the other cuts of the chosen depths join: a short heal of a
    first-layers cut stays behind its spread sibling, while depth decides most. The student the user named is
    always one of them, apart from the depths (its layers are not the source's): a budget that heals one
    candidate would otherwise give it to the best-started cut and never try the student."""
    if n >= len(ordered):
        return list(ordered)
    named = [c for c in ordered if not c.is_cut]
    if named:
        cuts = [c for c in ordered if c.is_cut]
        return sorted(named + (spread(cuts, n - len(named), begin) if n > len(named) else []), key=ordered.index)
    if n == 1:
        return [max(ordered, key=lambda c: (begin[c.name], c.scores[PLAIN].retention))]
    by_depth = list(dict.fromkeys(c.depth for c in ordered))
    k = min(n, len(by_depth))
    chosen = [by_depth[round(i * (len(by_depth) - 1) / (k - 1))] for i in range(k)] if k > 1 else by_depth[-1:]
    tiers = [sorted((c for c in ordered if c.depth == d), key=lambda c: -c.scores[PLAIN].retention) for d in chosen]
    picked = [tier[i] for i in range(max(map(len, tiers))) for tier in tiers if i < len(tier)][:n]
    return sorted(picked, key=ordered.index)


def _estimate(ctx: Context, rungs: list[Rung], chosen: list[Candidate]) -> float:
    depth = _mean_depth(ctx, chosen)
    return sum(r.candidates * (ctx.speed.train(r.texts, depth) + ctx.speed.encode(ctx.sample.encoded, depth))
               for r in rungs)


def _halve(ctx: Context, active: list[Candidate], rungs: list[Rung], begin: dict[str, float]) -> None:
    s, target = ctx.settings, ctx.settings.min_retention
    before = {c.name: begin[c.name] for c in active}
    for i, rung in enumerate(rungs):
        after = run_rung(ctx, active, rung)
        if not after or ctx.stopped:
            return
        if i + 1 == len(rungs):
            _extend(ctx, [c for c in active if c.name in after], rung)
            return
        margin = slack(before, after)
        costs = {c.name: cost(c, s.objective, c.scores.get(rung.name), target, s.precision) for c in active}
        keep = survivors(after, costs, target, rungs[i + 1].candidates, margin)
        for c in active:
            if c.name not in keep and c.dropped is None:
                c.dropped = f"rung {rung.index}: halved (score {after.get(c.name, 0):.3f}, margin {margin:.3f})"
        active = [c for c in active if c.name in keep]
        before = after


def _extend(ctx: Context, active: list[Candidate], rung: Rung) -> None:
    """The planned rungs ended with budget to spare (the heals ran faster than planned): while none of the last
    rung's candidates keeps the target, heal the best of them again on the longest ladder length that still
    fits (:data:`EXTEND_FACTORS`, :data:`EXTEND_MIN_GROWTH`, :data:`EXTEND_EPOCHS`)."""
    target = ctx.settings.min_retention
    cap = EXTEND_EPOCHS * ctx.heal_texts
    while active and not ctx.stopped:
        if any(c.scores[rung.name].retention >= target for c in active):
            return
        best = max(active, key=lambda c: c.scores[rung.name].retention)
        depth = work_depth(best, ctx.speed.depth)
        lengths = {on_ladder(rung.texts * ETA * f) for f in EXTEND_FACTORS} | {on_ladder(cap)}
        fits = [t for t in lengths
                if EXTEND_MIN_GROWTH * rung.texts <= t <= cap
                and ctx.speed.train(t, depth) + ctx.speed.encode(ctx.sample.encoded, depth) <= ctx.left() * SEARCH_SHARE]
        if not fits:
            return
        rung = Rung(rung.index + 1, 1, max(fits))
        if ctx.work.done(heal_step(best.name, rung.texts)) is None:  # else run_rung reads it back and says so
            ctx.say(f"budget left ({ctx.left() / 60:.1f} min): healing {best.name} longer, on {rung.texts:,} texts")
        if not run_rung(ctx, [best], rung):
            return
        active = [best]


def run_rung(ctx: Context, active: list[Candidate], rung: Rung) -> dict[str, float]:
    """Known-item retention of each candidate healed at this rung (those the budget reached), after
    :func:`~.all_documents.settle`: one keeping the target on the sample is scored on all the documents before
    it is trusted."""
    found: list[str] = []
    for cand in active:
        key = heal_step(cand.name, rung.texts)
        done = ctx.work.done(key)
        if done is None:
            depth = work_depth(cand, ctx.speed.depth)
            need = ctx.speed.train(rung.texts, depth) + ctx.speed.encode(ctx.sample.encoded, depth)
            if need > ctx.left():
                cand.dropped = cand.dropped or f"rung {rung.index}: not healed, the budget ran out"
                ctx.say(f"rung {rung.index}: {cand.name} needs ~{minutes(need)}, {minutes(max(ctx.left(), 0))} "
                        "left: stopping the search here")
                ctx.stopped = True
                return _retentions(active, found, rung)
            ctx.say(f"rung {rung.index}: healing {cand.name} on {rung.texts:,} texts (~{minutes(need)})")
            heal = heal_and_score(ctx, cand, rung.texts, f"rung {rung.index}")
            if heal is None:
                cand.dropped = cand.dropped or f"rung {rung.index}: heal stopped, the budget ran out"
                ctx.say(f"rung {rung.index}: the budget ran out while healing {cand.name}: stopping the search here "
                        "(its checkpoint is kept: the same command with a larger budget continues it)")
                ctx.stopped = True
                return _retentions(active, found, rung)
            ctx.work.put(key, heal.to_dict())
            ctx.work.state["train_cost"] = ctx.speed.train_cost
            ctx.work.save()
        else:
            heal = Heal.from_dict(done)
        cand.scores[rung.name] = heal
        found.append(cand.name)
        ctx.say(f"rung {rung.index}: {cand.name} {ctx.score_name} {heal.retention:.3f}, agreement@10 "
                f"{heal.score.agreement_at_10:.3f}")
    settle(ctx, active)
    return _retentions(active, found, rung)


def _retentions(active: list[Candidate], names: list[str], rung: Rung) -> dict[str, float]:
    return {name: find(active, name).scores[rung.name].retention for name in names}
