"""The answer: the cheapest measured heal of any candidate that keeps the target by a score that can decide it,
by the objective (:func:`choose`), and what the search reached when none does (:func:`best_reached`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from espresso_export.core.evidence import undecided
from espresso_export.core.types import AutoObjective
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.candidates import PLAIN, Candidate, Heal, cost
from espresso_export.searching.scoring import Score, cheapest


@dataclass(frozen=True)
class Answer:
    """A candidate's heal and the stored form (width, precision) the index keeps its vectors in."""

    name: str
    heal: str  # the heal's name: "plain", "r1", ...
    measured: Heal
    form: Score

    def with_form(self, form: Score) -> Answer:
        return Answer(self.name, self.heal, self.measured, form)

    def describe(self) -> str:
        return f"{self.name} ({self.heal})"

    def to_dict(self) -> dict:
        return {"candidate": self.name, "heal": self.heal, "retention": self.measured.retention,
                "agreement_at_10": self.measured.score.agreement_at_10, "texts": self.measured.texts,
                "vectors": {"dim": self.form.dim, "precision": self.form.precision,
                            "bytes_per_vector": self.form.bytes_per_vector, "retention": self.form.retention}}


def decided(score: Score, queries: int, settings: AutoSettings) -> bool:
    """Whether a heal's (or stored form's) known-item score over ``queries`` may decide the target: enough
    queries and a 95% interval no wider than ``--max-noise`` (:func:`~espresso_export.core.evidence.undecided`).
    A score that cannot is never an answer, however high it reads."""
    return undecided(queries, score.ci95, settings.max_noise) is None


def _kept_form(heal: Heal, settings: AutoSettings, queries: int) -> Score | None:
    """The form a heal keeps the target in by a deciding score: for bytes per vector the cheapest stored form,
    else its float vectors at full width."""
    target = settings.min_retention
    if settings.objective is AutoObjective.BYTES_PER_VECTOR:
        return cheapest((f for f in heal.forms if decided(f, queries, settings)), target, settings.precision)
    ok = heal.retention >= target and decided(heal.score, queries, settings)
    return heal.score if ok else None


def may_answer(cand: Candidate, heal: str) -> bool:
    """Whether a heal may be the answer: every one but the static candidate untrained, which is scored (rung 0)
    and never answers. The known-item estimate reads model2vec's plain distillation far off its labelled
    retention in both directions on the labelled collections (``benchmarks/README.md#estimate-by-kind``); the
    static model healed on the documents reads below its labels there, like the cuts."""
    return not (cand.is_static and heal == PLAIN)


def choose(cands: list[Candidate], settings: AutoSettings, queries: int,
           exclude: Iterable[tuple[str, str]] = frozenset()) -> Answer | None:
    """The cheapest measured heal of any candidate that keeps the target (and the latency gate) by a score that
    decides it (:func:`decided`, over the search's ``queries``), by the objective; ties go to the better score.
    ``exclude``: (candidate, heal) pairs already tried."""
    exclude = frozenset(exclude)
    found = []
    for cand in cands:
        if settings.max_latency_ratio is not None and cand.latency_ratio > settings.max_latency_ratio:
            continue
        for name, heal in cand.scores.items():
            if (cand.name, name) in exclude or not may_answer(cand, name):
                continue
            form = _kept_form(heal, settings, queries)
            if form is not None:
                key = cost(cand, settings.objective, heal, settings.min_retention, settings.precision)
                found.append((key, -heal.retention, Answer(cand.name, name, heal, form)))
    return min(found, key=lambda f: f[:2])[2] if found else None


def best_reached(cands: list[Candidate], settings: AutoSettings, queries: int) -> Answer | None:
    """Nothing kept the target: the best heal whose score decides (else the best scored), shown as what the
    search reached."""
    heals = [(decided(h.score, queries, settings), h.retention, Answer(c.name, name, h, h.score))
             for c in cands for name, h in c.scores.items()]
    return max(heals, key=lambda f: f[:2])[2] if heals else None
