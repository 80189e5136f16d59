"""A sweep point measured whole: its score on every set, its agreement details, and (``--precision``) its search
quality with the vectors stored at each precision, with the bytes a vector then takes.

A precision's score is the point's metric with the documents quantised as an index would hold them
(:func:`espresso_export.runtime.precision.search_at`: faiss's flat, 8-bit scalar-quantiser or binary index) and
float queries, on the unit vectors the exported model outputs. int8/uint8 buckets are fitted on the point's own
embeddings of the calibration sentences (per depth and width, as an export fits its stored ranges), never on the
documents searched. Only searches are scored at a precision: STS Spearman of quantised pairs is not measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.vectors import l2_normalised
from espresso_export.runtime.precision import SCALAR, CalibrationRanges, bytes_per_vector, search_at
from espresso_export.sweeping.sweep_metric import AgreementTarget, RetrievalTarget, agreement_of, set_score
from espresso_export.verification.agreement import DEPTH, K


@dataclass
class Measure:
    """One embedding's scores x100 per set; agreement details per agreement set; per precision its scores x100
    (``score``, ``per_set``) and ``bytes_per_vector``."""

    per_set: dict[str, float]
    agreement: dict[str, dict] = field(default_factory=dict)
    at_precision: dict[str, dict] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return float(np.mean(list(self.per_set.values())))


def measure(sets, emb: np.ndarray, rows: Callable[[list[str]], np.ndarray], calibration: np.ndarray | None,
            precisions: Sequence[str] | None) -> Measure:
    """Score ``emb`` (the scored texts' rows) on ``sets``; at each of ``precisions`` too, int8/uint8 with ranges
    fitted on ``calibration`` (the same model's embeddings of the calibration sentences)."""
    per_set: dict[str, float] = {}
    details: dict[str, dict] = {}
    for s in sets:
        per_set[s.name], detail = set_score(s, emb, rows)
        if detail is not None:
            details[s.name] = detail
    found = Measure(per_set, details)
    ranges = _ranges(calibration) if any(p in SCALAR for p in precisions or ()) else None
    for p in precisions or ():
        scores = {s.name: score_at(s, emb, rows, p, ranges) for s in sets}
        found.at_precision[p] = {"score": float(np.mean(list(scores.values()))), "per_set": scores,
                                 "bytes_per_vector": bytes_per_vector(p, emb.shape[1])}
    return found


def _ranges(calibration: np.ndarray | None) -> CalibrationRanges:
    if calibration is None or len(calibration) < 2:
        raise ValidationError("int8/uint8 need calibration sentences to fit their ranges on (--calibration)")
    return CalibrationRanges.fit(l2_normalised(calibration))


def score_at(s, emb: np.ndarray, rows: Callable[[list[str]], np.ndarray], precision: str, ranges) -> float:
    """Set ``s``'s score x100 with the documents stored at ``precision`` (float queries), searched by faiss."""
    if isinstance(s, AgreementTarget):
        q, d = s.vectors(emb, rows)
        ranked = search_at(q, d, max(K, DEPTH), precision=precision, ranges=ranges, exclude=s.exclude).ranked
        return 100.0 * agreement_of(s, ranked).means()[f"agreement_at_{K}"]
    if isinstance(s, RetrievalTarget):
        q, d = l2_normalised(emb[rows(s.queries)]), l2_normalised(emb[rows(list(s.data.docs))])
        ranked = search_at(q, d, 10, precision=precision, ranges=ranges).ranked
        return 100.0 * s.data.scores(ranked, s.data.evaluated_queries)["ndcg_at_10"]
    raise ValidationError(f"{s.name}: an STS set is not scored at a vector precision (--metric retrieval or "
                          "agreement)")


def with_retention(at_precision: dict[str, dict], source_score: float) -> dict[str, dict]:
    """Each precision's entry with its ``retention``: its score over the source's float32 score."""
    return {p: {**v, "retention": v["score"] / source_score if source_score > 0 else None}
            for p, v in at_precision.items()}
