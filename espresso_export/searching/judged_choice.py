"""The answer chosen on the user's judgments, when they say so (``auto --judged-choice``).

The known-item estimate reads some kinds of model far below their labelled retention (a static model healed on
the documents most of all: ``benchmarks/README.md#estimate-by-kind``), so it never lets them answer. A user who
judged a few query-document pairs of their own queries has labels: with ``--judged-choice`` each candidate (its
best heal by the estimate; every one that may answer, :func:`.answer.may_answer`) is searched over all the
documents with the final check's queries, cheapest first by the objective, and the first whose judged retention
(:mod:`espresso_export.verification.judging`) keeps the target on every corpus over at least :data:`MIN_JUDGED`
judged queries is the answer. The estimate is reported beside it, never gating. With ``--write-judging`` and no
judgments, the pairs of the candidates up to the estimate's own answer (the union of each one's top 10 and the
source's) are written to judge, so the judging can come before the choice: the same command with ``--judgments``
then judges exactly those heals from the work folder, adding none.

The judged retention that chose is no independent check of the answer: the report says it chose, and the
labelled sets (``--retrieval``, ``--sts``) stay the judges.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from espresso_export.searching.all_documents import heal_model
from espresso_export.searching.answer import Answer, choose, may_answer
from espresso_export.searching.budget import judged_seconds
from espresso_export.searching.candidates import Candidate, cost, find, work_depth
from espresso_export.searching.context import Context
from espresso_export.searching.encoding import documents_vectors
from espresso_export.verification.judging import K, JudgedRow

JUDGED_STEP = "judged-choice"  # the work folder's record of the heals whose pairs were written to judge
MIN_JUDGED = 10  # judged queries a corpus needs before its judged retention may choose (verify's least for a score)
SOURCE_FILE = "judged-source-{}.npz"  # the source's top 10 of a corpus for the final check's queries


@dataclass(frozen=True)
class JudgedCheck:
    """A candidate's heal searched over every corpus: its judged retention on each (none without judgments)."""

    answer: Answer
    rows: tuple[JudgedRow, ...]
    seconds: float
    tops: tuple[np.ndarray, ...] = field(default=(), repr=False, compare=False)  # its top 10 on each corpus

    def keeps(self, target: float) -> bool:
        return bool(self.rows) and all(r.retention is not None and r.retention >= target and r.judged >= MIN_JUDGED
                                       for r in self.rows)

    def line(self, target: float, score: str = "known-item retention", answer: bool = True) -> str:
        """The check as a log line; ``answer``: it is the first that keeps the target (with --write-judging the
        costlier candidates after it are checked too, and keep it without being the answer)."""
        head = f"judged choice, {self.answer.describe()} ({score} {self.answer.measured.retention:.3f}): "
        if not self.rows:
            return head + "no judgments given (its pairs go to --write-judging)"
        said = "; ".join(r.line() for r in self.rows)
        if self.keeps(target):
            verdict = f"keeps {target:g}" + (", the answer" if answer else "")
        elif any(r.judged < MIN_JUDGED for r in self.rows):
            verdict = f"fewer than {MIN_JUDGED} judged queries, undecided (its pairs go to --write-judging)"
        else:
            verdict = f"below {target:g}"
        return f"{head}{said}: {verdict}"

    def to_dict(self, target: float) -> dict:
        return {"candidate": self.answer.name, "heal": self.answer.heal,
                "known_item_retention": self.answer.measured.retention, "keeps_target": self.keeps(target),
                "judged": [r.to_dict() for r in self.rows], "seconds": round(self.seconds, 1)}


@dataclass
class _Tops:
    """One corpus' rankings as the judging functions read a verify row's: the source's top 10 first."""

    tops: tuple[np.ndarray, ...]


def judged_order(cands: list[Candidate], settings, pinned: dict[str, int] | None = None) -> list[Answer]:
    """Each candidate's best heal by the estimate (one that may answer, within the latency gate), or the heal of
    ``pinned`` texts (the heals whose pairs were written to judge), cheapest first by the objective; ties go to
    the better estimate."""
    found = []
    for cand in cands:
        if settings.max_latency_ratio is not None and cand.latency_ratio > settings.max_latency_ratio:
            continue
        heals = {name: h for name, h in cand.scores.items() if may_answer(cand, name)}
        if pinned is not None:
            heals = {name: h for name, h in heals.items() if h.texts == pinned.get(cand.name)}
        if heals:
            name = max(heals, key=lambda n: heals[n].retention)
            key = cost(cand, settings.objective, heals[name], settings.min_retention, settings.precision)
            found.append((key, -heals[name].retention, Answer(cand.name, name, heals[name], heals[name].score)))
    return [a for *_, a in sorted(found, key=lambda f: f[:2])]


def _corpora(ctx: Context) -> list:
    """The final check's corpora and queries (verify reads them the same way, so the judgments' ids match)."""
    from espresso_export.verification.corpus_agreement import load_corpus
    from espresso_export.verification.verify_settings import declared_default

    s = ctx.settings
    return [load_corpus(spec, queries, method=declared_default("agreement_from"), limit=s.corpus_queries,
                        seed=s.seed, known_items=s.known_items, field=s.corpus_field)
            for spec, queries in zip(s.corpus, s.queries or [None] * len(s.corpus))]


def _top(model, data, device: str) -> np.ndarray:
    """A model's top 10 of a corpus' documents for each query, in float32 (as the answer is deployed and the final
    check ranks: a pair judged here is the pair verify asks for)."""
    from espresso_export.verification.agreement import ranked_ids

    documents = documents_vectors(model, data.documents, ("off", device))
    return ranked_ids(documents_vectors(model, data.queries, ("off", device)), documents, K, exclude=data.exclude)


def _source_tops(ctx: Context, corpora: list) -> list[np.ndarray]:
    """The source's top 10 on each corpus, kept in the work folder (a second run with the judgments reuses it)."""
    from espresso_export.model.cache import atomic_file

    out = []
    for i, data in enumerate(corpora):
        path = ctx.work.path(SOURCE_FILE.format(i))
        if path.is_file():
            with np.load(path) as saved:
                if saved["top"].shape[0] == len(data.queries):
                    out.append(saved["top"])
                    continue
        top = _top(ctx.model.get(), data, ctx.settings.device)

        def write(tmp, top=top) -> None:
            with open(tmp, "wb") as fh:
                np.savez(fh, top=top)

        atomic_file(path, write)
        out.append(top)
    return out


def _fits(ctx: Context, cand: Candidate, corpora: list, checked: int) -> bool:
    """Whether the budget still covers searching every corpus with ``cand`` before the answer's finish (the search
    kept :func:`.budget.judged_seconds` aside for these checks); the first check always runs."""
    texts = sum(len(d.documents) + len(d.queries) for d in corpora)
    need = ctx.speed.encode(texts, work_depth(cand, ctx.speed.depth))
    finish = ctx.reserve - judged_seconds(ctx.settings, sum(len(d.documents) for d in corpora), ctx.speed)
    left = ctx.settings.budget_seconds - finish - (time.perf_counter() - ctx.start)
    if checked and need > left:
        ctx.say(f"judged choice: no budget left to search with {cand.name} (~{need / 60:.1f} min); a larger "
                "--time-budget checks more", once=True)
        return False
    return True


def best_judged(checks: list[JudgedCheck]) -> Answer | None:
    """Nothing kept the target by the judgments: the check with the highest judged retention (its lowest over the
    corpora), shown as what the search reached; None when nothing was judged."""
    judged = [(min(r.retention for r in c.rows), c.answer) for c in checks
              if c.rows and all(r.retention is not None for r in c.rows)]
    return max(judged, key=lambda f: f[0])[1] if judged else None


def _to_pool(ctx: Context, cands: list[Candidate], order: list[Answer]) -> list[Answer]:
    """The candidates whose pairs a run without judgments writes: those no costlier than the estimate's own answer
    (it keeps the target by the estimate; a costlier one is no better an answer), every one when it has none."""
    s = ctx.settings
    estimate = choose(cands, s, ctx.queries)
    if estimate is None:
        return order
    bound = cost(find(cands, estimate.name), s.objective, estimate.measured, s.min_retention, s.precision)
    kept = [a for a in order
            if cost(find(cands, a.name), s.objective, a.measured, s.min_retention, s.precision) <= bound]
    if len(kept) < len(order):
        ctx.say(f"judged choice: pooling the {len(kept)} candidates no costlier than the estimate's answer, "
                f"{estimate.describe()}")
    return kept


def choose_judged(ctx: Context, cands: list[Candidate]) -> tuple[Answer | None, list[JudgedCheck]]:
    """The cheapest candidate whose judged retention keeps the target (:func:`judged_order`), and every check made
    (with ``--write-judging``: every candidate pooled, for their pairs, :func:`_to_pool` without judgments; else up
    to the first that keeps it)."""
    from espresso_export.verification.judging import judged_rows, read_judgments

    s = ctx.settings
    judgments = read_judgments(s.judgments) if s.judgments else None
    corpora = _corpora(ctx)
    source = _source_tops(ctx, corpora)
    checks: list[JudgedCheck] = []
    chosen = None
    recorded = ctx.work.done(JUDGED_STEP) if judgments is not None else None
    order = judged_order(cands, s, recorded["heals"] if recorded else None)
    for answer in order if judgments is not None else _to_pool(ctx, cands, order):
        cand = find(cands, answer.name)
        if not _fits(ctx, cand, corpora, len(checks)):
            break
        began = time.perf_counter()
        model = heal_model(ctx, cand, answer.measured.folder)
        tops = tuple(_top(model, data, s.device) for data in corpora)
        del model
        rows = [_Tops((src, top)) for src, top in zip(source, tops)]
        judged = judged_rows(corpora, rows, judgments, s.corpus_field) if judgments is not None else []
        check = JudgedCheck(answer, tuple(judged), time.perf_counter() - began, tops)
        checks.append(check)
        first = chosen is None and check.keeps(s.min_retention)
        ctx.say(check.line(s.min_retention, ctx.score_name, answer=first))
        if first:
            chosen = answer
            if not s.write_judging:
                break
    if s.write_judging:
        _write_pairs(ctx, corpora, source, checks)
        ctx.work.put(JUDGED_STEP, {"heals": {c.answer.name: c.answer.measured.texts for c in checks}})
        if s.judge_command:
            return _judged_by_command(ctx, corpora, source, checks)
    return chosen, checks


def _judged_by_command(ctx: Context, corpora: list, source: list[np.ndarray],
                       checks: list[JudgedCheck]) -> tuple[Answer | None, list[JudgedCheck]]:
    """The pairs just written filled by ``--judge-command`` (``judging.fill_by_command``), then each check judged
    on them from the top 10s it kept, cheapest first: the first that keeps the target answers. From here on the
    search reads the file as ``--judgments`` (the final check judges the answer on it)."""
    from dataclasses import replace

    from espresso_export.verification.judging import fill_by_command, judged_rows, read_judgments

    s = ctx.settings
    ctx.say(f"judged choice: {fill_by_command(s.write_judging, s.judge_command, s.judge_per_query)}")
    ctx.settings = replace(s, judgments=s.write_judging, write_judging=None, judge_command=None)
    judgments = read_judgments(s.write_judging)
    chosen, judged = None, []
    for check in checks:
        rows = [_Tops((src, top)) for src, top in zip(source, check.tops)]
        check = replace(check, rows=tuple(judged_rows(corpora, rows, judgments, s.corpus_field)))
        judged.append(check)
        first = chosen is None and check.keeps(s.min_retention)
        ctx.say(check.line(s.min_retention, ctx.score_name, answer=first))
        chosen = check.answer if first else chosen
    return chosen, judged


def judging_earlier_search(ctx: Context) -> bool:
    """Whether this run judges the heals an earlier run wrote the pairs of (``--judged-choice --judgments`` on its
    work folder): then no heal is added, so the candidates are the ones judged."""
    s = ctx.settings
    if not (s.judged_choice and s.judgments and ctx.work.done(JUDGED_STEP) is not None):
        return False
    ctx.say("judged choice: judging the heals whose pairs an earlier run of this search wrote (no heal added; "
            "without --judgments the search continues)")
    return True


def _write_pairs(ctx: Context, corpora: list, source: list[np.ndarray], checks: list[JudgedCheck]) -> None:
    """Every pair that decides a checked candidate's judged retention or the source's, query by query
    (:func:`espresso_export.verification.judging.judging_pairs`)."""
    from espresso_export.verification.judging import judging_pairs, to_fill, write_pairs

    rows = [_Tops((src, *(c.tops[i] for c in checks))) for i, src in enumerate(source)]
    said = write_pairs(ctx.settings.write_judging, judging_pairs(corpora, rows, ctx.settings.corpus_field))
    ctx.say(f"judged choice: {said}, deciding the source's and {len(checks)} candidates' judged retention, written "
            f"to {ctx.settings.write_judging}: {to_fill(ctx.settings.write_judging)}")
