"""Which checkpoint ``distill`` keeps: the evaluation before training and after every epoch.

With ``--eval-sts`` only, the score is the student's STS Spearman x100. With ``--eval-retrieval`` it is 100 x the
mean of the retentions (student over teacher: STS Spearman, nDCG@10 on the BEIR set), so that neither set decides
alone whatever its scale; the teacher is scored once, before training. Retrieval is an exact cosine search in
numpy: the eval sets are small, and training must not need faiss.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.metrics import sts_spearman, top_k_by_cosine
from espresso_export.data import RetrievalSet, StsPairs, sentences_sha256
from espresso_export.data.files import spec_key

Embed = Callable[[Sequence[str]], np.ndarray]


def retrieval_scores(embed: Embed, data: RetrievalSet) -> dict[str, float]:
    """nDCG@10, recall@100, MRR@10 and recall@10 of ``embed`` on ``data`` (exact cosine search)."""
    positions = data.evaluated_queries
    queries = embed([data.queries[i] for i in positions])
    ranked = top_k_by_cosine(queries, embed(data.docs), 100)
    return data.scores(ranked, positions)


def retrieval_sha256(data: RetrievalSet) -> str:
    """What identifies an eval retrieval set (a resumed run must use the same one)."""
    judged = sorted(f"{q}\t{d}\t{g}" for q in data.relevant for d, g in data.judgements(q).items())
    parts = [sentences_sha256(data.queries), sentences_sha256(data.docs), sentences_sha256(judged)]
    return hashlib.sha256("".join(parts).encode()).hexdigest()


@dataclass
class Selection:
    """The eval sets, the teacher's scores on them, and every evaluation's parts (for the provenance)."""

    sts: StsPairs | None = None
    retrieval: RetrievalSet | None = None
    teacher: dict[str, float] = field(default_factory=dict)  # "sts" (Spearman x100), "ndcg_at_10"
    measured: list[dict] = field(default_factory=list)

    @property
    def rule(self) -> str:
        if self.retrieval is None:
            return "STS Spearman x100"
        named = ["STS Spearman", "nDCG@10"] if self.sts is not None else ["nDCG@10"]
        return f"100 x mean retention vs the teacher ({', '.join(named)})"

    def measure(self, embed: Embed) -> dict[str, float]:
        """The raw scores of ``embed`` on the sets given."""
        parts: dict[str, float] = {}
        if self.sts is not None:
            parts["sts"] = sts_spearman(embed(self.sts.sentence1), embed(self.sts.sentence2), self.sts.scores)
        if self.retrieval is not None:
            parts["ndcg_at_10"] = retrieval_scores(embed, self.retrieval)["ndcg_at_10"]
        return parts

    def measure_teacher(self, embed: Embed) -> None:
        """The teacher's scores, the denominators of the retentions (only needed with a retrieval set)."""
        if self.retrieval is None:
            return
        self.teacher = self.measure(embed)
        for name, value in self.teacher.items():
            if value <= 0:
                raise ValidationError(f"the teacher scores {value:.4f} ({name}) on the eval set, so a retention "
                                      "against it means nothing: choose an eval set the teacher does well on")

    def score(self, parts: dict[str, float]) -> float:
        if self.retrieval is None:
            return parts["sts"]
        return 100.0 * float(np.mean([parts[name] / self.teacher[name] for name in parts]))

    def evaluate(self, embed: Embed) -> float:
        parts = self.measure(embed)
        score = self.score(parts)
        self.measured.append({**{k: round(v, 6) for k, v in parts.items()}, "score": round(score, 6)})
        return score

    def identity(self) -> dict:
        out = {"eval": None if self.sts is None else sentences_sha256(self.sts.sentence1 + self.sts.sentence2)}
        if self.retrieval is not None:
            out["eval_retrieval"] = retrieval_sha256(self.retrieval)
        return out

    def info(self, sts_spec, retrieval_spec, result) -> dict | None:
        """The provenance of the selection (``result``: the trainer's :class:`TrainResult`)."""
        if self.sts is None and self.retrieval is None:
            return None
        info = {"sts": None if self.sts is None else spec_key(sts_spec), "pairs": None if self.sts is None else len(self.sts),
                "score": self.rule, "initial": result.initial_score, "best": result.best_score,
                "best_step": result.best_step, "history": result.history}
        if self.retrieval is not None:
            info.update(retrieval=spec_key(retrieval_spec), queries=len(self.retrieval.evaluated_queries),
                        docs=len(self.retrieval.docs), teacher=self.teacher, measured=self.measured)
        return info
