"""What a sweep point is scored on: STS sets (Spearman x100), retrieval sets (nDCG@10 x100) or the agreement of
its search with the source's on a corpus (agreement@10 x100).

``sweep --metric retrieval --retrieval BEIR_DIR`` ranks, plots and recommends the cuts on nDCG@10 instead of
STS: the score of every point, its retention, the Pareto front and the target all use it. A retrieval set
enters the sweep like an STS set: its texts (the judged queries, then the corpus) join the encoded texts, and
:func:`set_score` scores a point's embedding rows of them.

``--metric agreement --corpus DOCS`` needs no labels: the source's ranking of the corpus for each query (given,
or pseudo-queries made once from the corpus) is searched once (:func:`set_reference`) and is the reference
every point is compared with (:mod:`espresso_export.verification.agreement`); the source scores 1 by
definition, so the retention of a point is its agreement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.metrics import sts_spearman, top_k_by_cosine
from espresso_export.core.vectors import l2_normalised
from espresso_export.data import RetrievalSet
from espresso_export.verification.agreement import DEPTH, K, agreement, ranked_ids


@dataclass(frozen=True)
class RetrievalTarget:
    """A retrieval set as a sweep scores it."""

    spec: str
    data: RetrievalSet
    kind: str = "retrieval"
    smoke: bool = False

    @property
    def name(self) -> str:
        return self.data.name

    @property
    def queries(self) -> list[str]:
        return [self.data.queries[i] for i in self.data.evaluated_queries]

    def texts(self) -> list[str]:
        return self.queries + list(self.data.docs)

    def info(self) -> dict:
        return {"name": self.name, "spec": self.spec, "kind": self.kind, "queries": len(self.queries),
                "docs": len(self.data.docs), "metric": "nDCG@10 x100", "smoke_set": False}


@dataclass
class AgreementTarget:
    """A corpus and its queries as a sweep scores agreement on them; ``reference`` is the source's ranking
    (corpus positions, ``DEPTH`` wide) once :func:`set_reference` has searched it."""

    spec: str
    passages: list[str]
    queries: list[str]
    method: str  # "queries" (given), or the pseudo-query method
    exclude: list[int] | None = None  # per query, the passage it was made from (left out of its results)
    reference: np.ndarray | None = None
    kind: str = "agreement"
    smoke: bool = False

    @property
    def name(self) -> str:
        return Path(self.spec).name or self.spec

    def texts(self) -> list[str]:
        return self.queries + self.passages

    def vectors(self, emb: np.ndarray, rows: Callable[[list[str]], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(queries, passages) as unit vectors: what an index of the exported model's outputs holds."""
        return l2_normalised(emb[rows(self.queries)]), l2_normalised(emb[rows(self.passages)])

    def info(self) -> dict:
        return {"name": self.name, "spec": self.spec, "kind": self.kind, "queries": len(self.queries),
                "docs": len(self.passages), "query_source": self.method, "metric": f"agreement@{K} x100",
                "k": K, "depth": DEPTH, "smoke_set": False}


def load_agreement(corpus: str, *, queries: str | None, method: str, limit: int, seed: int) -> AgreementTarget:
    """The corpus' passages and the queries searched: ``queries`` (a seeded sample of ``limit`` when there are
    more), or ``limit`` pseudo-queries by ``method`` chosen as verify chooses them
    (:func:`~espresso_export.data.pseudo_queries.choose_queries`), made once for every point."""
    from espresso_export.data.corpus import read_corpus
    from espresso_export.data.pseudo_queries import choose_queries, read_documents_of

    passages = read_documents_of(corpus)
    if len(passages.texts) < 2:
        raise ValidationError(f"--corpus {corpus}: agreement needs at least 2 passages, found {len(passages.texts)}")
    if queries is not None:
        texts = read_corpus(queries).sentences
        if len(texts) > limit:
            keep = sorted(np.random.default_rng(seed).choice(len(texts), limit, replace=False).tolist())
            texts = [texts[i] for i in keep]
        return AgreementTarget(str(corpus), passages.texts, texts, "queries")
    chosen = choose_queries(passages, agreement=method, known_items=None, limit=limit, seed=seed)
    made = chosen.agreement
    if made is None:
        raise ValidationError(f"--corpus {corpus}: no pseudo-query could be made ({chosen.why_no_agreement}): give "
                              "your own queries for it with --queries")
    return AgreementTarget(str(corpus), passages.texts, made.texts, f"pseudo-{made.method}", made.exclude)


def set_reference(sets, emb: np.ndarray, rows: Callable[[list[str]], np.ndarray]) -> None:
    """Search the source's rankings of every agreement set (``emb``: the source's embeddings), once."""
    for s in sets:
        if isinstance(s, AgreementTarget):
            q, d = s.vectors(emb, rows)
            s.reference = ranked_ids(q, d, max(K, DEPTH), exclude=s.exclude)


def agreement_of(s: AgreementTarget, ranked: np.ndarray):
    """A candidate's :class:`~espresso_export.verification.agreement.Agreement` with the source's reference."""
    if s.reference is None:
        raise ValidationError(f"{s.name}: the source's ranking is searched (set_reference) before any point")
    return agreement(s.reference[:, :K], ranked, k=K, depth=DEPTH)


def load_targets(specs, *, columns, min_score: float, limit: int | None) -> list[RetrievalTarget]:
    from espresso_export.verification.retrieval import load_retrieval

    return [RetrievalTarget(str(spec), load_retrieval(spec, columns=columns, min_score=min_score, limit=limit))
            for spec in specs]


def set_texts(s) -> list[str]:
    """The texts a scored set needs encoded: an STS set's two sentences of every pair, or queries and corpus."""
    return s.texts() if isinstance(s, (RetrievalTarget, AgreementTarget)) else s.pairs.sentence1 + s.pairs.sentence2


def set_info(s) -> dict:
    if isinstance(s, (RetrievalTarget, AgreementTarget)):
        return s.info()
    return {"name": s.name, "spec": s.spec, "kind": s.kind, "pairs": len(s.pairs), "smoke_set": s.smoke}


def set_score(s, emb: np.ndarray, rows: Callable[[list[str]], np.ndarray]) -> tuple[float, dict | None]:
    """The score x100 of embeddings ``emb`` on set ``s`` (``rows``: the rows of given texts in ``emb``), and on an
    agreement set the whole :class:`~espresso_export.verification.agreement.Agreement` (nDCG@10 with the source's
    ranks as grades, recall@100, 95% intervals) as its ``to_dict`` (None on the other sets)."""
    if isinstance(s, AgreementTarget):
        q, d = s.vectors(emb, rows)
        found = agreement_of(s, ranked_ids(q, d, max(K, DEPTH), exclude=s.exclude))
        return 100.0 * found.means()[f"agreement_at_{K}"], found.to_dict()
    return _labelled_score(s, emb, rows), None


def _labelled_score(s, emb: np.ndarray, rows: Callable[[list[str]], np.ndarray]) -> float:
    if isinstance(s, RetrievalTarget):
        ranked = top_k_by_cosine(emb[rows(s.queries)], emb[rows(list(s.data.docs))], 10)
        return 100.0 * s.data.scores(ranked, s.data.evaluated_queries)["ndcg_at_10"]
    return sts_spearman(emb[rows(s.pairs.sentence1)], emb[rows(s.pairs.sentence2)], s.pairs.scores)
