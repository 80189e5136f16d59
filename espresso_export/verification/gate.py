"""The verify gate: thresholds, one check per measured value, and what decides a check within the noise.

A retention check compares the measured value with its threshold; when the value's 95% interval (over the
set's queries or pairs) holds the threshold, the set is too small to decide and ``Thresholds.within_noise``
says what decides (:class:`~espresso_export.core.types.WithinNoise`). A value that is missing, NaN or infinite
fails its check whatever the policy, and a model whose vectors hold NaN or inf fails the gate even when no
threshold was given: no comparison lets a broken model pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from espresso_export.core.evidence import MAX_NOISE, undecided
from espresso_export.core.formatting import number, rounded
from espresso_export.core.types import WithinNoise


@dataclass(frozen=True)
class Thresholds:
    min_sts_retention: float | None = None  # every STS set's Spearman retention
    max_latency_ratio: float | None = None  # candidate / source time of a round (median), at every batch size
    min_retrieval_retention: float | None = None  # every retrieval set's nDCG@10 retention
    within_noise: WithinNoise = WithinNoise.VALUE  # a retention check whose interval holds its threshold
    min_agreement: float | None = None  # every corpus' agreement@10 with the source's ranking
    max_noise: float = MAX_NOISE  # a corpus estimate whose interval is wider on either side decides nothing
    min_judged_retention: float | None = None  # every corpus' judged retention (--judgments)

    def __post_init__(self) -> None:
        object.__setattr__(self, "within_noise", WithinNoise(self.within_noise))  # "pass" from the API too

    def to_dict(self) -> dict:
        return {"min_sts_retention": self.min_sts_retention, "max_latency_ratio": self.max_latency_ratio,
                "min_retrieval_retention": self.min_retrieval_retention, "within_noise": self.within_noise.value,
                "min_agreement": self.min_agreement, "max_noise": self.max_noise,
                "min_judged_retention": self.min_judged_retention}


def interval_list(ci: tuple[float, float] | None) -> list[float] | None:
    return None if ci is None else [rounded(ci[0]), rounded(ci[1])]


@dataclass(frozen=True)
class Check:
    name: str
    threshold: str  # ">= 0.95" / "<= 1.0"
    value: float | None
    passed: bool
    interval: tuple[float, float] | None = None  # the value's 95% interval over the set's items, when known
    within_noise: bool = False  # the interval holds the threshold: the set is too small to decide
    policy: WithinNoise = WithinNoise.VALUE  # what decided a check within the noise
    reliable: bool = True  # False: a timing verify does not trust (other processes, spread); marked "?"
    noise: str = "the set's noise"  # what the interval measures: the set's items, or the timing's rounds
    shown: str | None = None  # the value as the failure line says it, when a number alone would not

    @property
    def decided_by_policy(self) -> bool:
        return (self.within_noise or not self.reliable) and self.policy is not WithinNoise.VALUE

    def describe(self) -> str:
        shown = self.shown or ("undefined (source score <= 0)" if self.value is None else f"{self.value:.4f}"
                               if finite(self.value) else f"{self.value} (not a finite number)")
        decided = "" if self.policy is WithinNoise.VALUE else f"; --within-noise {self.policy.value}"
        noise = f" (95% interval {self.interval[0]:.4f}-{self.interval[1]:.4f}: within {self.noise}{decided})" \
            if self.within_noise and self.interval else ""
        if not self.reliable:
            noise += f" (timing NOT reliable: see the latency table{decided if not self.within_noise else ''})"
        return f"{self.name} = {shown}, needs {self.threshold}{noise}"

    def cell(self) -> str:
        """The value for the gate table, with its interval when known, and ``?`` on a timing not to be trusted."""
        if self.shown:
            return self.shown
        shown = number(self.value, ".4f") + ("" if self.reliable else "?")
        return f"{shown} [{self.interval[0]:.3f}-{self.interval[1]:.3f}]" if self.interval else shown

    def to_dict(self) -> dict:
        return {"name": self.name, "threshold": self.threshold, "value": rounded(self.value), "passed": self.passed,
                "ci95": interval_list(self.interval), "within_noise": self.within_noise, "reliable": self.reliable,
                "decided_by": "value" if not self.decided_by_policy else "interval" if self.within_noise else
                "unreliable"}


def finite(value: float | None) -> bool:
    """A value a threshold can be compared with: not missing, not NaN, not infinite."""
    return value is not None and math.isfinite(value)


def _decided(name: str, threshold: str, value: float | None, passed: bool, interval, noisy: bool,
             policy: WithinNoise, reliable: bool = True, noise: str = "the set's noise") -> Check:
    """The check, with ``policy`` deciding instead of the value when the interval holds the threshold or the
    measurement is not reliable (``fail``: a busy CI runner cannot pass a latency gate; ``pass``: nor fail it).
    A value that is not finite fails, whatever the policy."""
    unsure = (noisy or not reliable) and finite(value)
    if unsure and policy is not WithinNoise.VALUE:
        passed = policy is WithinNoise.PASS
    return Check(name, threshold, value, passed, interval, noisy, policy if unsure else WithinNoise.VALUE, reliable,
                 noise)


def _at_least(name: str, value: float | None, bound: float, interval: tuple[float, float] | None = None,
              policy: WithinNoise = WithinNoise.VALUE) -> Check:
    """``value >= bound`` (a retention)."""
    noisy = finite(value) and interval is not None and interval[0] < bound <= interval[1]
    return _decided(name, f">= {bound:g}", value, finite(value) and value >= bound, interval, noisy, policy)


def _estimate_at_least(name: str, value: float | None, bound: float, interval, items: int,
                       thresholds: Thresholds) -> Check:
    """A label-free estimate's ``value >= bound``: failed as undecided, whatever the policy, when too few queries
    or too wide an interval stand behind it (:func:`~espresso_export.core.evidence.undecided`)."""
    why = undecided(items, interval, thresholds.max_noise)
    if why is None or not finite(value):
        return _at_least(name, value, bound, interval, thresholds.within_noise)
    return Check(name, f">= {bound:g}", value, False, interval,
                 shown=f"{value:.4f}, undecided: {why} (give more queries: --queries, more documents, or "
                       "--max-noise)")


def _at_most(name: str, value: float | None, bound: float, interval: tuple[float, float] | None = None,
             policy: WithinNoise = WithinNoise.VALUE, reliable: bool = True) -> Check:
    """``value <= bound`` (a latency ratio, whose timing may not be reliable)."""
    noisy = finite(value) and interval is not None and interval[0] <= bound < interval[1]
    return _decided(name, f"<= {bound:g}", value, finite(value) and value <= bound, interval, noisy, policy,
                    reliable, "the timing's noise")


def _finite_vectors(role: str, texts: int) -> Check:
    """The check a model fails when some of its vectors hold NaN or inf (checked with or without thresholds)."""
    return Check(f"the {role}'s vectors", "all finite", float(texts), False, shown=f"NaN or inf for {texts} text(s)")


def gate_checks(report, thresholds: Thresholds) -> list[Check]:
    """One check per threshold given and measured value, and one per model whose vectors are not finite."""
    checks = [_finite_vectors(role, texts) for role, texts in (report.nonfinite or {}).items() if texts]
    if thresholds.min_sts_retention is not None:
        for row in report.sts:
            checks.append(_at_least(f"STS retention on {row.name}", row.retention, thresholds.min_sts_retention,
                                    row.retention_ci95, thresholds.within_noise))
    if thresholds.max_latency_ratio is not None:
        for row in report.latency:
            ci = None if row.time_ratio is None else (row.time_ratio.low, row.time_ratio.high)
            checks.append(_at_most(f"latency ratio at batch {row.batch_size} (1 / speed-up)", row.latency_ratio,
                                   thresholds.max_latency_ratio, ci, thresholds.within_noise, row.reliable))
    if thresholds.min_retrieval_retention is not None:
        for row in report.retrieval:
            checks.append(_at_least(f"nDCG@10 retention on {row.name}", row.ndcg_retention,
                                    thresholds.min_retrieval_retention, row.ndcg_retention_ci95,
                                    thresholds.within_noise))
    if thresholds.min_agreement is not None:
        for row in getattr(report, "agreement", None) or []:
            checks.append(_estimate_at_least(f"agreement@10 on {row.name}", row.agreement_at_10,
                                             thresholds.min_agreement, row.agreement_ci95, row.queries, thresholds))
    if thresholds.min_judged_retention is not None:
        for row in getattr(report, "judged", None) or []:
            checks.append(_at_least(f"judged retention on {row.name}", row.retention, thresholds.min_judged_retention,
                                    row.ci95, thresholds.within_noise))
    return checks


def noise_policy(thresholds: Thresholds) -> str:
    return {WithinNoise.VALUE: "; decided on the measured value (--within-noise value)",
            WithinNoise.PASS: "; passed (--within-noise pass: only a whole interval below fails)",
            WithinNoise.FAIL: "; failed (--within-noise fail: only a whole interval at or above passes)"}[
        thresholds.within_noise]
