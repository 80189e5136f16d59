"""What ``auto`` returns and writes: every candidate's measured heals (``auto.json``, ``auto.csv``), the plot of
quality against the objective (``auto.png``), and the answer."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from espresso_export.core.evidence import undecided
from espresso_export.core.files import write_text_atomic
from espresso_export.core.types import AutoObjective
from espresso_export.model.window import WindowCut
from espresso_export.searching.answer import Answer, decided
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.candidates import PLAIN, Candidate, Heal, cost, find
from espresso_export.searching.context import Context
from espresso_export.searching.halving import ETA, LONGER_GAIN
from espresso_export.searching.judged_choice import MIN_JUDGED, judged_order
from espresso_export.searching.plots import plot_auto
from espresso_export.searching.scoring import cheapest, score_name
from espresso_export.searching.work import WINDOW_STEP
from espresso_export.verification.estimate_error import kind_of, measured_error

CSV_FIELDS = ("candidate", "heal", "texts", "retention", "ci95_low", "ci95_high", "documents", "sample_retention",
              "agreement_at_10", "latency_ratio", "params", "dim", "bytes_per_vector", "bytes_at_target", "dropped")


def measured_on(heal: Heal) -> str:
    """Where a heal's retention was measured: the search's sample, or all the documents (:mod:`.all_documents`)."""
    if heal.on_all_documents:
        return f"all {heal.documents:,} documents with the search's queries"
    return "the search's sample"


def _undecided(s: AutoSettings, cands: list[Candidate], queries: int) -> str | None:
    """The heals that read at or above the target by a score too noisy to decide it, the widest first: the
    search cannot tell whether they keep it, which no longer heal changes."""
    found = sorted(((why, c.name, k, h.retention) for c in cands for k, h in c.scores.items()
                    if h.retention >= s.min_retention
                    and (why := undecided(queries, h.score.ci95, s.max_noise))), key=lambda f: f[3], reverse=True)
    if not found:
        return None
    why, name, heal, value = found[0]
    return (f"{len(found)} heal(s) read at or above {s.min_retention:g} but cannot decide it, e.g. {name} ({heal}) "
            f"{value:.3f}: {why}; give more documents or known-item queries (--sample-documents, --sample-queries, "
            "--corpus) or accept wider intervals (--max-noise)")


def _missed(s: AutoSettings, cands: list[Candidate], best: Answer | None, queries: int,
            source_depth: int | None = None) -> str:
    """What the search reached, and what more time would likely give: the best candidate's last heal gained
    ``g`` over its previous one; a heal :data:`.halving.ETA` times as long gains about
    :data:`.halving.LONGER_GAIN` as much again."""
    if best is None:
        return f"no candidate kept {s.min_retention:g} of the source and none was measured"
    unsure = _undecided(s, cands, queries)
    if unsure is not None:
        return unsure
    slow = [f"{c.name} (time x{c.latency_ratio:.2f})" for c in cands if s.max_latency_ratio is not None
            and c.latency_ratio > s.max_latency_ratio and any(h.retention >= s.min_retention for h in c.scores.values())]
    if slow:
        return (f"no candidate kept {s.min_retention:g} of the source within --max-latency-ratio "
                f"{s.max_latency_ratio:g}: {', '.join(slow)} kept it, slower than that; raise --max-latency-ratio or lower "
                "--min-retention")
    line = (f"no candidate kept {s.min_retention:g} of the source: the best reached {best.measured.retention:.3f} "
            f"({best.describe()})")
    noisy = max(((h.retention, Answer(c.name, name, h, h.score)) for c in cands for name, h in c.scores.items()
                 if h.retention > best.measured.retention and not decided(h.score, queries, s)),
                key=lambda f: f[0], default=None)
    if noisy is not None:  # a higher read that cannot decide: say why it is not the best reached
        ci = noisy[1].measured.score.ci95
        spread = f"its 95% interval {ci[0]:.3f}-{ci[1]:.3f}" if ci else "no interval"
        line += (f" by a score that decides; {noisy[1].describe()} read {noisy[0]:.3f} ({spread}: too noisy to "
                 "decide, --max-noise)")
    cand = find(cands, best.name)
    heals = [h.retention for h in cand.scores.values()]
    if len(heals) >= 2 and heals[-1] > heals[-2]:
        likely = heals[-1] + LONGER_GAIN * (heals[-1] - heals[-2])
        line += (f"; a heal {ETA}x as long would likely reach about {likely:.3f} (a larger --time-budget continues "
                 "this search)")
    deeper = [c.depth for c in cands if c.depth > cand.depth and c.is_cut]
    if cand.is_cut and source_depth is not None and cand.depth >= source_depth - 1:
        line += (f"; it is the deepest cut below the source's {source_depth} layers: lower --min-retention, or give "
                 "the heals more texts (--sentences)")
    elif not deeper:
        line += "; no deeper cut was tried: widen --layers or lower --min-retention"
    return line


def _wide(rows: list, target: float) -> str:
    """The chosen candidate's judged intervals that reach below the target: the cheapest candidate reading the
    target on a few judged queries is often one just below it (``benchmarks/README.md#judged-queries``)."""
    wide = [r for r in rows if r.ci95 is not None and r.ci95[0] < target]
    if not wide:
        return ""
    said = ", ".join(f"{r.retention:.3f} [{r.ci95[0]:.2f}-{r.ci95[1]:.2f}] over {r.judged} queries on {r.name}"
                     for r in wide)
    return (f"; its judged retention {said} reaches below {target:g}: chosen on few judged queries, the answer "
            "may sit just below the target, and judging more of your queries narrows it")


def judged_hint(s: AutoSettings, checks: list, met: bool) -> str:
    """What ``--judged-choice`` did: the judgments that chose (no independent check then), or why none did."""
    if met:
        return (f"chosen on your judgments ({s.judgments}): its judged retention in verify.json is what chose it, "
                "not an independent check; the labelled sets (--retrieval, --sts) judge it, the known-item estimate is "
                "reported beside it" + _wide(next((c.rows for c in checks if c.keeps(s.min_retention)), ()),
                                             s.min_retention))
    if not s.judgments:
        return (f"no judgments yet: fill the pairs in {s.write_judging} (espresso-export judge {s.write_judging}), "
                f"then run the same command with --judgments "
                f"{s.write_judging} in place of --write-judging, and --overwrite: the search's work is kept and reused")
    short = [c.answer.describe() for c in checks if any(r.judged < MIN_JUDGED for r in c.rows) or not c.rows]
    line = (f"no candidate searched ({len(checks)}) kept {s.min_retention:g} by your judgments over at least "
            f"{MIN_JUDGED} judged queries")
    if short:
        line += (f"; too few judged queries for {', '.join(short)}: their pairs to judge come with --write-judging "
                 "FILE")
    return line


def answer_error(cand: Candidate, answer: Answer, *, with_queries: bool = False) -> dict:
    """The estimate's measured error for the answer's kind (:mod:`~espresso_export.verification.estimate_error`):
    a plain or healed cut or static model, its vectors as stored; ``with_queries``: the user's queries scored."""
    kind = kind_of(static=cand.is_static, cut=cand.is_cut, healed=answer.heal != PLAIN,
                   precision=answer.form.precision)
    return measured_error(kind, with_queries=with_queries)


def _mean_errors(cands: list[Candidate], answer: Answer, with_queries: bool) -> list[float]:
    """The estimate's mean error for the answer's kind, one per measured collection."""
    error = answer_error(find(cands, answer.name), answer, with_queries=with_queries)
    return [r["mean_error"] for r in error["collections"]]


def within_error(cands: list[Candidate], settings: AutoSettings, answer: Answer | None, *,
                 with_queries: bool = False) -> str | None:
    """Candidates cheaper than the answer (every candidate when none answered) whose estimate misses the target by
    less than the estimate has read their kind below labels on some measured collection (its most negative mean
    error there): labels could keep the target where the estimate does not, and a few judged pairs tell. For
    latency and size, the objectives ``--judged-choice`` chooses by; None when no candidate is that close."""
    if settings.objective is AutoObjective.BYTES_PER_VECTOR or settings.judged_choice:
        return None
    near, price = [], lambda a: cost(find(cands, a.name), settings.objective, a.measured, settings.min_retention)
    for a in judged_order(cands, settings):
        if answer is not None and (a.name == answer.name or price(a) >= price(answer)):
            break  # cheapest first: what follows costs as much as the answer or more
        means = _mean_errors(cands, a, with_queries)
        if a.measured.retention < settings.min_retention <= a.measured.retention - min(means, default=0.0):
            near.append(f"{a.describe()} {a.measured.retention:.3f} (its kind read up to {-min(means):.3f} low)")
    if not near:
        return None
    return (f"{'cheaper than the answer, ' if answer else ''}within the estimate's measured error of "
            f"{settings.min_retention:g} for their kind: {', '.join(near[:3])}; a few judged pairs decide "
            "(--judged-choice --write-judging FILE, espresso-export judge FILE, then --judgments FILE; or, with a "
            "judge program such as an LLM, --judge-command CMD in one run)"
            + ("" if with_queries else "; your own queries, unlabelled (--queries FILE), read closer on most "
               "measured collections"))


def above_error(cands: list[Candidate], settings: AutoSettings, answer: Answer | None, *,
                with_queries: bool = False) -> str | None:
    """The answer, when its estimate keeps the target by less than the estimate has read its kind above labels on
    some labelled collection (its most positive mean error there): by those labels it could miss the target, and
    a few judged pairs tell. None without an answer, with judgments choosing, or when no kind read that high."""
    if answer is None or settings.judged_choice:
        return None
    high = max(_mean_errors(cands, answer, with_queries), default=0.0)
    if high <= 0 or answer.measured.retention - high >= settings.min_retention:
        return None
    return (f"the answer {answer.describe()} reads {answer.measured.retention:.3f}, within the estimate's measured "
            f"error of {settings.min_retention:g} for its kind (read up to {high:.3f} high on a labelled collection): "
            "it could keep less by labels; a few judged pairs tell (--judged-choice --write-judging FILE, "
            "espresso-export judge FILE, then --judgments FILE; or --judge-command CMD in one run)")


def _at_target(heal: Heal, target: float) -> int | None:
    """The fewest bytes per vector of a stored form (width, precision) that keeps the target, if measured."""
    form = cheapest(heal.forms, target)
    return None if form is None else form.bytes_per_vector


@dataclass
class AutoResult:
    source: str
    objective: str
    target: float
    met: bool  # a candidate kept the target
    answer: Answer | None  # when met; else the best the search reached
    source_info: dict
    budget_seconds: float
    seconds: float
    log: list[str] = field(default_factory=list)
    export: dict | None = None
    verify: dict | None = None
    vocabulary: dict | None = None  # the answer's vocabulary pruned: tokens and parameters before and after
    output: Path | None = None
    hints: list[str] = field(default_factory=list)
    timing: dict = field(default_factory=dict)  # the budget, the finish estimated and taken, the whole command
    undecided: bool = False  # not met, while heals read at or above the target by scores too noisy to decide it
    judged: list | None = None  # --judged-choice: each candidate searched and its judged retention (JudgedCheck)
    measured: list[Candidate] = field(default_factory=list, repr=False)  # every candidate and its heals

    @property
    def candidates(self) -> list[dict]:
        """Every candidate as ``auto.json`` records it."""
        return [c.to_dict() for c in self.measured]

    @property
    def estimate_error(self) -> dict | None:
        """The known-item estimate's measured error for the answer's kind, on labelled collections."""
        if self.answer is None:
            return None
        return answer_error(find(self.measured, self.answer.name), self.answer, with_queries=self.with_queries)

    @property
    def passed(self) -> bool:
        return self.met and (self.verify is None or self.verify["passed"])

    @property
    def with_queries(self) -> bool:
        """The user's queries scored every candidate (``--queries``): the estimate is the higher of two reads."""
        return bool(self.source_info.get("sample", {}).get("your_queries"))

    @property
    def score_name(self) -> str:
        """What the candidates' scores are, as tables and plots name them."""
        return score_name(self.with_queries)

    @property
    def chosen_on(self) -> str:
        """What chose the answer: the estimate (with the user's queries or not), or the user's judgments
        (``--judged-choice``)."""
        if self.judged is not None:
            return "your judgments"
        return "estimate with your queries" if self.with_queries else "known-item estimate"

    @classmethod
    def of(cls, ctx: Context, cands: list[Candidate], answer: Answer | None, *, met: bool,
           judged: list | None = None) -> AutoResult:
        import time

        s = ctx.settings
        result = cls(source=ctx.source, objective=s.objective.value, target=s.min_retention, met=met, answer=answer,
                     measured=list(cands),
                     source_info={**ctx.work.done("source"), "sample": ctx.sample.to_dict(),
                                  "window": ctx.work.done(WINDOW_STEP) or None},
                     budget_seconds=s.budget_seconds, seconds=time.perf_counter() - ctx.start, log=list(ctx.log),
                     judged=judged)
        window = WindowCut.of(result.source_info["window"])
        if window is not None and window.worth_saying:
            result.hints.append(window.line("the searched documents"))
        if judged is not None:
            result.hints.append(judged_hint(s, judged, met))
        elif not met:
            result.undecided = _undecided(s, cands, ctx.queries) is not None
            result.hints.append(_missed(s, cands, answer, ctx.queries, ctx.speed.depth))
        return result

    def rows(self) -> list[dict]:
        """One row per heal of every candidate (``auto.csv``)."""
        out = []
        for c in self.measured:
            for name, h in c.scores.items():
                ci = h.score.ci95 or (None, None)
                out.append({"candidate": c.name, "heal": name, "texts": h.texts, "retention": h.retention,
                            "ci95_low": ci[0], "ci95_high": ci[1], "documents": h.documents or "",
                            "sample_retention": h.sample.score.retention if h.sample is not None else "",
                            "agreement_at_10": h.score.agreement_at_10, "latency_ratio": round(c.latency_ratio, 4),
                            "params": c.params, "dim": h.score.dim, "bytes_per_vector": h.score.bytes_per_vector,
                            "bytes_at_target": _at_target(h, self.target), "dropped": c.dropped or ""})
        return out

    def to_dict(self) -> dict:
        from espresso_export import __version__

        return {"espresso_version": __version__, "source": self.source, "objective": self.objective,
                "target_retention": self.target, "met": self.met, "undecided": self.undecided, "passed": self.passed,
                "answer": self.answer.to_dict() if self.answer else None, "chosen_on": self.chosen_on,
                "judged_choice": None if self.judged is None else [c.to_dict(self.target) for c in self.judged],
                "estimate_error": self.estimate_error,
                "export": self.export, "verify": self.verify, "vocabulary": self.vocabulary,
                "source_info": self.source_info,
                "budget_seconds": self.budget_seconds, "seconds": round(self.seconds, 1), "timing": self.timing,
                "candidates": self.candidates, "log": self.log, "hints": self.hints,
                "output": str(self.output) if self.output else None}

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows())
        return buf.getvalue()

    def write(self, folder: Path) -> None:
        try:  # the measurements are the result; a plot that cannot be drawn must not take them down
            plot_auto(self, folder / "auto.png")
        except Exception as e:  # matplotlib raises assorted errors (backends, fonts, a broken install)
            self.hints.append(f"auto.png not written ({e.__class__.__name__}: {e}); the data is in auto.json")
        write_text_atomic(folder / "auto.csv", self.to_csv())
        write_text_atomic(folder / "auto.json", json.dumps(self.to_dict(), indent=2, default=str) + "\n")
