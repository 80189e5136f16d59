"""The models ``auto`` tries and what was measured of them: a :class:`Candidate` (a cut of the source or the
student), scored plain and after each heal (a :class:`Heal` each, frozen once measured), and what the objective
minimises (:func:`cost`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from espresso_export.core.types import AutoObjective
from espresso_export.model.static import STATIC_STUDENT
from espresso_export.searching.scoring import Score, cheapest, nested_widths

PLAIN = "plain"  # the heal of no texts: the cut as shrink makes it
STATIC = STATIC_STUDENT  # the candidate that is a static model of the source: its name and distill's student


@dataclass(frozen=True)
class SampleScore:
    """A heal's score on the search's sample, kept beside the one on all the documents that replaced it."""

    score: Score
    forms: tuple[Score, ...]

    def to_dict(self) -> dict:
        s = self.score
        return {"retention": s.retention, "ci95": None if s.ci95 is None else list(s.ci95),
                "agreement_at_10": s.agreement_at_10, "found": s.found, "follows": s.follows,
                **({} if s.asked is None else {"asked": s.asked}), "variants": [f.to_dict() for f in self.forms]}

    @classmethod
    def from_dict(cls, d: dict, like: Score) -> SampleScore:
        return cls(replace(like, retention=d["retention"], ci95=None if d["ci95"] is None else tuple(d["ci95"]),
                           agreement_at_10=d["agreement_at_10"], found=d.get("found"), follows=d.get("follows"),
                           asked=d.get("asked")),
                   tuple(Score.from_dict(v) for v in d["variants"]))


@dataclass(frozen=True)
class Heal:
    """A candidate scored after a heal of ``texts`` texts (:data:`PLAIN`: none): its vectors at full width in
    float32 (``score``) and at every stored form (``forms``); for a trained one, the heal's folder, distill
    settings and time; once scored again on all the documents, the sample's score beside it."""

    score: Score
    forms: tuple[Score, ...] = ()
    texts: int = 0
    folder: str | None = None
    settings: dict | None = None  # distill's settings: what the recipe rebuilds
    seconds: float | None = None
    resumed_from: Any = None  # the step a stopped heal of these settings had reached
    diverged: dict | None = None  # the first try, when it diverged and this is the second
    sample: SampleScore | None = None
    documents: int | None = None  # scored on all of these documents (None: on the sample)

    @property
    def retention(self) -> float:
        return self.score.retention

    @property
    def on_all_documents(self) -> bool:
        return self.sample is not None

    def to_dict(self) -> dict:
        out = {**self.score.to_dict(), "variants": [f.to_dict() for f in self.forms], "texts": self.texts}
        for key in ("folder", "settings", "seconds", "resumed_from", "diverged"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.sample is not None:
            out.update(sample=self.sample.to_dict(), documents=self.documents)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Heal:
        score = Score.from_dict(d)
        return cls(score, tuple(Score.from_dict(v) for v in d.get("variants", [])), d.get("texts", 0),
                   d.get("folder"), d.get("settings"), d.get("seconds"), d.get("resumed_from"), d.get("diverged"),
                   SampleScore.from_dict(d["sample"], score) if "sample" in d else None, d.get("documents"))


@dataclass
class Candidate:
    """One point of the search space and what was measured of it."""

    name: str  # "L3" (the source cut to 3 layers spread over it), "L3f" (its first 3 layers), "student" or "static"
    depth: int
    layers: list[int] | None = None  # the source's layers a cut keeps
    student: str | None = None
    params: int = 0
    latency_ratio: float = 1.0  # seconds per text against the source's, encoded here side by side
    scores: dict[str, Heal] = field(default_factory=dict)  # PLAIN, "r1", ... ("t1500": an earlier search's heal)
    dropped: str | None = None  # why the search stopped healing it
    calibration: str | None = None  # a plain cut's PCA texts: the calibration file, or None for the healing texts

    def to_dict(self) -> dict:
        return {"name": self.name, "depth": self.depth, "layers": None if self.layers is None else list(self.layers),
                "student": self.student, "params": self.params, "latency_ratio": self.latency_ratio,
                "scores": {k: h.to_dict() for k, h in self.scores.items()}, "dropped": self.dropped,
                "calibration": self.calibration}

    @classmethod
    def from_dict(cls, d: dict) -> Candidate:
        """A new candidate (a record read from the work folder gains heals of its own, never entries of it)."""
        return cls(d["name"], d["depth"], None if d["layers"] is None else list(d["layers"]), d["student"],
                   d["params"], d["latency_ratio"], {k: Heal.from_dict(h) for k, h in d["scores"].items()},
                   d["dropped"], d["calibration"])

    @property
    def is_cut(self) -> bool:
        return self.student is None

    @property
    def is_static(self) -> bool:
        """A static model of the source (model2vec's distillation, healed on the healing texts), not a transformer."""
        return self.student == STATIC

    def sibling(self) -> str | None:
        """The spread cut of a first-layers cut's depth (``L3`` for ``L3f``), else None."""
        return f"L{self.depth}" if self.name == f"L{self.depth}f" else None


def find(cands: list[Candidate], name: str) -> Candidate:
    return next(c for c in cands if c.name == name)


def work_depth(cand: Candidate, source_depth: int) -> float:
    """The candidate's cost per text in the source's layers, what the plan's :class:`.budget.Speed` scales by: a
    cut's depth; a student's measured time ratio times the source's depth (a student narrower than the source runs
    faster than its depth says, and a heal's speed measured on it must not set the cuts' estimates)."""
    if cand.is_cut:
        return float(cand.depth)
    return cand.latency_ratio * source_depth


def head_width(dim: int, texts: int) -> int:
    """The widest PCA head ``texts`` distinct texts can fit, a PCA to k dims needing k + 1 of them: ``dim``, else the
    widest nested width below it that they fit (0: none). Every head of a search is fitted on the healing texts
    (a heal's targets; a plain cut's when the searched documents are too few) or on more texts than them."""
    if texts > dim:
        return dim
    return max((d for d in nested_widths(dim) if d < texts), default=0)


def cost(cand: Candidate, objective: AutoObjective, heal: Heal | None, target: float, precisions=None) -> float:
    """What the objective minimises, for ranking: the measured time ratio, the parameters, or the bytes per
    vector of the narrowest stored form that keeps the target (infinite when none does yet)."""
    if objective is AutoObjective.LATENCY:
        return cand.latency_ratio
    if objective is AutoObjective.SIZE:
        return float(cand.params)
    best = cheapest(heal.forms if heal is not None else (), target, precisions)
    return float(best.bytes_per_vector) if best else math.inf
