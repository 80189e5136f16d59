"""Agreement on the user's own documents (``verify --corpus``): no labels, the source's ranking is the reference.

Each corpus is searched with the user's queries (``--queries``) or pseudo-queries made from the corpus, chosen
by the rule ``auto`` searches by too (:func:`~espresso_export.data.pseudo_queries.choose_queries`: ``auto``
takes titles where the passages have them, the title being the better predictor of labelled retention where
both exist, else a sentence of a passage, else the passage itself). The source's top
10 at float32 is searched once; the candidate's vectors are searched in every stored form
(:class:`~espresso_export.verification.vectors.Variant`) and scored by :mod:`.agreement`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from espresso_export.core.formatting import rounded
from espresso_export.verification.agreement import (
    DEPTH,
    Agreement,
    K,
    agreement,
    ranked_ids,
)
from espresso_export.verification.embedders import EncodeCache
from espresso_export.verification.gate import interval_list
from espresso_export.verification.vectors import Variant, VectorForms, at_width, unit


@dataclass(frozen=True)
class CorpusSet:
    """A corpus and the queries it is searched with."""

    spec: str
    name: str
    passages: list[str]
    queries: list[str]
    exclude: list[int] | None  # per query, the passage left out of its results (a pseudo-query's own)
    queries_from: str  # "queries.txt" or "pseudo-queries (title)"
    known_item_queries: object = None  # KnownItemQueries for the known-item retention (None when none could be made)
    duplicates: int = 0  # repeated texts dropped from the corpus (each kept once)
    no_known_items: str | None = None  # why no known-item query could be made
    queries_spec: str | None = None  # the user's queries file (--queries), for their ids (.judging)

    @property
    def documents(self) -> list[str]:
        """The corpus' texts, by the search package's word for them (docs/architecture.md, Glossary)."""
        return self.passages


def load_corpus(spec: str, queries: str | None, *, method: str, limit: int, seed: int,
                known_items: str, field: str | None = None) -> CorpusSet:
    """Read ``spec`` (:func:`~espresso_export.data.pseudo_queries.read_documents_of`, ``field`` its jsonl field) and its
    queries: at most ``limit``, a seeded sample of the given ones, or pseudo-queries by ``method``; and its
    known-item queries by ``known_items``, both chosen by
    :func:`~espresso_export.data.pseudo_queries.choose_queries`. A corpus that gives no query at all, and no
    ``queries``, is refused naming ``--queries``."""
    from pathlib import Path

    from espresso_export.core.errors import ValidationError
    from espresso_export.data.corpus import read_corpus
    from espresso_export.data.pseudo_queries import choose_queries, read_documents_of

    passages = read_documents_of(spec, field=field)
    chosen = choose_queries(passages, agreement=None if queries is not None else method, known_items=known_items,
                            limit=limit, seed=seed)
    shape = {"known_item_queries": chosen.known_items, "duplicates": chosen.duplicates,
             "no_known_items": chosen.why_no_known_items}
    if queries is not None:
        texts = read_corpus(queries).sentences
        if len(texts) > limit:
            texts = [texts[i] for i in sorted(random.Random(seed).sample(range(len(texts)), limit))]
        return CorpusSet(spec, passages.name, passages.texts, texts, None, Path(queries).name, **shape,
                         queries_spec=queries)
    made = chosen.agreement
    if made is None:
        raise ValidationError(f"{passages.name}: no pseudo-query could be made from its {len(passages.texts)} "
                              f"texts ({chosen.why_no_agreement}): give your own queries for it with --queries")
    shown = f"pseudo-queries ({made.method}, auto)" if method == "auto" else f"pseudo-queries ({made.method})"
    return CorpusSet(spec, passages.name, passages.texts, made.texts, made.exclude, shown, **shape)


@dataclass(frozen=True)
class VariantAgreement:
    variant: Variant
    agreement: Agreement
    index_bytes: int
    known_item: dict | None = None  # the known-item retention with the documents stored in this form
    belief: dict | None = None  # the belief retention on the user's own queries (.known_item.belief_known_item)

    def to_dict(self) -> dict:
        out = {**self.variant.to_dict(), "index_bytes": self.index_bytes, **self.agreement.to_dict()}
        out = out if self.known_item is None else {**out, "known_item": self.known_item}
        return out if self.belief is None else {**out, "belief": self.belief}


@dataclass(frozen=True)
class AgreementRow:
    """One corpus: the candidate's agreement with the source's ranking, its float32 vectors first."""

    name: str
    spec: str
    passages: int
    queries: int
    queries_from: str
    results: list[VariantAgreement]
    finite: bool = True  # False: a model's vectors hold NaN or inf, and no agreement is defined
    known_item: dict | None = None  # KnownItem.to_dict() and the query method: the retention-scale estimate
    duplicates: int = 0  # repeated texts dropped from the corpus (each kept once)
    no_known_items: str | None = None  # why no known-item query could be made
    belief: dict | None = None  # the float32 form's belief retention on the user's own --queries
    # the source's and the candidate's top 10 (corpus positions, float32 at full width): the pairs to judge
    tops: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @property
    def agreement_at_10(self) -> float:
        """The candidate's float32 agreement@10 (the gate's value); NaN when a model's vectors are not finite."""
        return self.results[0].agreement.means()[f"agreement_at_{K}"] if self.finite else math.nan

    @cached_property
    def agreement_ci95(self) -> tuple[float, float] | None:
        return self.results[0].agreement.intervals()[f"agreement_at_{K}"] if self.finite else None

    def to_dict(self) -> dict:
        main = self.results[0].agreement
        means = main.means() if self.finite else {n: math.nan for n in main.names()}
        intervals = main.intervals() if self.finite else {n: None for n in main.names()}
        return {"name": self.name, "spec": self.spec, "passages": self.passages, "queries": self.queries,
                "queries_from": self.queries_from, "duplicates_dropped": self.duplicates,
                "no_known_items": self.no_known_items, **{n: rounded(v) for n, v in means.items()},
                "ci95": {n: interval_list(iv) for n, iv in intervals.items()},
                "variants": [r.to_dict() for r in self.results] if self.finite else [],
                "known_item": self.known_item, "belief": self.belief}


def _belief(source_queries: np.ndarray, source_docs: np.ndarray):
    """The source's belief over its top :data:`~.known_item.BELIEF_DEPTH` for each query: ranked positions and
    their cosines."""
    from espresso_export.verification.known_item import BELIEF_DEPTH

    top = ranked_ids(source_queries, source_docs, min(BELIEF_DEPTH, len(source_docs)))
    return top, np.einsum("qw,qkw->qk", source_queries, source_docs[top])


def _belief_of(belief, ranked: np.ndarray, answers=None) -> dict | None:
    """The belief retention on the user's queries: the higher of the queries' belief followed and the documents'
    (``answers``, :func:`~.known_item.document_followed`), both kept."""
    from espresso_export.verification.known_item import belief_known_item, higher

    if belief is None:
        return None
    found = belief_known_item(*belief, ranked)
    read = higher(found, answers)
    return {"retention": rounded(read.retention), "ci95": interval_list(read.interval()),
            "queries": int(len(found.source)), "by_queries": rounded(found.retention),
            "by_documents": None if answers is None else rounded(answers.retention)}


def _finite(*arrays: np.ndarray) -> bool:
    return all(bool(np.isfinite(a).all()) for a in arrays)


def measure_corpus(data: CorpusSet, caches: dict[str, EncodeCache], forms: VectorForms,
                   wanted: list[Variant]) -> AgreementRow:
    """The source's top 10 once (float32), then the candidate's ranking in every ``wanted`` form, scored."""
    source, candidate = caches["source"], caches["candidate"]
    s_sim, c_sim = source.embedder.usage.similarity, candidate.embedder.usage.similarity
    sq = unit(source.encode(data.queries, role="query"), s_sim)
    sd = unit(source.encode(data.passages, role="document"), s_sim)
    cq = unit(candidate.encode(data.queries, role="query"), c_sim)
    cd = unit(candidate.encode(data.passages, role="document"), c_sim)
    shape = {"name": data.name, "spec": data.spec, "passages": len(data.passages), "queries": len(data.queries),
             "queries_from": data.queries_from, "duplicates": data.duplicates, "no_known_items": data.no_known_items}
    if not _finite(sq, sd, cq, cd):
        nan = Agreement(K, DEPTH, np.full((len(data.queries), 3), np.nan))
        return AgreementRow(**shape, results=[VariantAgreement(wanted[0], nan, 0)], finite=False)
    source_top = ranked_ids(sq, sd, K, exclude=data.exclude)
    known = _KnownItems.of(data, source, candidate, sd, cd, s_sim, c_sim)
    # real queries only: on queries made from the documents the belief reads far below labelled retention
    belief = _belief(sq, sd) if data.queries_spec is not None else None
    answers = _answers(sq, sd, known) if belief is not None else None
    del sq, sd
    results, tops = [], None
    for variant in wanted:
        found = forms.search(cq, cd, max(K, DEPTH), variant, exclude=data.exclude)
        tops = tops or (source_top, found.ranked[:, :K])
        results.append(VariantAgreement(variant, agreement(source_top, found.ranked, k=K, depth=DEPTH),
                                        found.index_bytes, known.at(variant) if known else None,
                                        _belief_of(belief, found.ranked, _answered(answers, cq, cd, variant))))
    # the row's own: the first form, float32 at full width (:func:`.vectors.variants`)
    return AgreementRow(**shape, results=results, known_item=results[0].known_item, tops=tops,
                        belief=results[0].belief)


def _answers(sq: np.ndarray, sd: np.ndarray, known: _KnownItems | None):
    """The documents' belief over the user's queries and, where there are any, the known-item ones."""
    from espresso_export.verification.known_item import document_belief

    return document_belief(sq, None if known is None else known.queries, sd)


def _answered(answers, cq: np.ndarray, cd: np.ndarray, variant: Variant):
    from espresso_export.verification.known_item import document_followed

    if answers is None:
        return None
    return document_followed(answers, at_width(cq, variant.dim), at_width(cd, variant.dim),
                             precision=variant.precision, rescore=variant.rescore)


@dataclass
class _KnownItems:
    """The candidate's known-item retention on the corpus (:mod:`.known_item`): the source's per-query scores
    once (float32, full width), the candidate's with its documents in each stored form (int8 ranges fitted on
    the corpus itself)."""

    method: str
    origins: list[int]
    source: np.ndarray
    candidate: tuple[np.ndarray, np.ndarray, np.ndarray]  # its (query, corpus, known-item target) vectors
    belief: tuple[np.ndarray, np.ndarray]  # the source's ranked documents and cosines (known_item.source_belief)
    queries: np.ndarray = field(repr=False)  # the source's vectors of the known-item queries

    @classmethod
    def of(cls, data: CorpusSet, source: EncodeCache, candidate: EncodeCache, sd, cd, s_sim,
           c_sim) -> _KnownItems | None:
        from espresso_export.verification.known_item import known_item_index, known_item_ndcg, source_belief

        c = data.known_item_queries
        if c is None:
            return None
        triples = []
        for cache, sim, docs in ((source, s_sim, sd), (candidate, c_sim, cd)):
            q = unit(cache.encode(c.texts, role="query"), sim)
            t = unit(cache.encode(c.targets, role="document"), sim)
            triples.append((q, docs, t))
        if not _finite(*triples[0], *triples[1]):
            return None
        q, d, t = triples[0]
        index = known_item_index(d, c.origins, t)
        return cls(c.method, list(c.origins), known_item_ndcg(q, index, c.origins), triples[1],
                   source_belief(q, index), q)

    def at(self, variant: Variant) -> dict:
        """With the candidate's documents stored as ``variant``."""
        from espresso_export.verification.known_item import (
            Estimate,
            KnownItem,
            followed,
            known_item_index,
            stored_ndcg,
        )

        q, d, t = (at_width(x, variant.dim) for x in self.candidate)
        index = known_item_index(d, self.origins, t)
        found = stored_ndcg(q, index, self.origins, precision=variant.precision, rescore=variant.rescore)
        follows = followed(self.belief, q, index, precision=variant.precision, rescore=variant.rescore)
        return {**Estimate(KnownItem(found, self.source), follows).to_dict(),
                "method": f"known items by {self.method}"}
