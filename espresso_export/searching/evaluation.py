"""What ``auto`` scores every candidate on: a seeded sample of the user's documents, known-item pseudo-queries
made from it (:func:`~espresso_export.data.pseudo_queries.cloze_queries`), and the source's vectors of both,
encoded once. A candidate's score is its known-item retention (:mod:`espresso_export.verification.known_item`),
with its agreement@10 beside it; its vectors are searched again truncated and at each output precision."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.data.pseudo_queries import MIN_WORDS, ClozeQueries, Passages, choose_queries, read_passages
from espresso_export.runtime.precision import bytes_per_vector, truncate
from espresso_export.verification.agreement import DEPTH, K, agreement, ranked_ids
from espresso_export.verification.known_item import cloze_index, known_item

RESCORE = 4  # binary: 4 x top-k by Hamming distance, re-ranked (sentence-transformers' semantic_search_faiss default)


def read_documents(specs: list[str], *, field: str | None = None) -> Passages:
    """Every document of every ``--corpus`` spec, as an index holds them (titles in front; ``field``: the jsonl
    field or csv column of those that name none, ``--corpus-field``)."""
    parts = [read_passages(s, field=field) for s in specs]
    titles = None
    if any(p.titles for p in parts):
        titles = [t for p in parts for t in (p.titles or [""] * len(p.texts))]
    return Passages(name="+".join(p.name for p in parts), texts=[t for p in parts for t in p.texts], titles=titles,
                    duplicates=sum(p.duplicates for p in parts))


@dataclass(frozen=True)
class EvalSet:
    """The documents the candidates are searched over and the known-item queries they are scored on."""

    passages: list[str]
    cloze: ClozeQueries  # origins index ``passages``
    held_out: frozenset[int]  # positions in the whole corpus of the queries' passages: never healed on
    others: list[str] = field(default_factory=list)  # the documents not in the sample (:mod:`.all_documents`)
    duplicates: int = 0  # repeated documents dropped (each kept once)

    @property
    def encoded(self) -> int:
        """Texts a candidate encodes to be scored: the documents, each query and its target."""
        return len(self.passages) + 2 * len(self.cloze)

    def to_dict(self) -> dict:
        return {"passages": len(self.passages), "queries": len(self.cloze), "query_method": self.cloze.method,
                "duplicates_dropped": self.duplicates}


def eval_set(docs: Passages, *, passages: int, queries: int, seed: int, method: str = "auto") -> EvalSet:
    """A seeded sample of ``passages`` documents and ``queries`` known-item queries made from it, chosen as
    ``verify --corpus`` chooses them (:func:`~espresso_export.data.pseudo_queries.choose_queries`); a corpus that
    gives none is refused before any model is loaded, naming what to give."""
    n = len(docs.texts)
    chosen = sorted(random.Random(seed).sample(range(n), min(passages, n)))
    sub = replace(docs, texts=[docs.texts[i] for i in chosen],
                  titles=None if docs.titles is None else [docs.titles[i] for i in chosen])
    made = choose_queries(sub, agreement=None, known_items=method, limit=queries, seed=seed)
    cloze = made.known_items
    if cloze is None:
        raise ValidationError(
            f"{docs.name}: no known-item query could be made from its {n:,} documents ({made.why_no_known_items}): "
            f"auto scores candidates on queries cut out of your documents; give documents of two or more sentences, "
            f"with titles or of {2 * MIN_WORDS}+ words (--corpus; --corpus-field names a jsonl field holding them)")
    taken = set(chosen)
    return EvalSet(sub.texts, cloze, frozenset(chosen[i] for i in cloze.origins),
                   [x for i, x in enumerate(docs.texts) if i not in taken], docs.duplicates)


@dataclass
class Vectors:
    """One model's vectors of an :class:`EvalSet` (unit rows)."""

    queries: np.ndarray
    passages: np.ndarray
    targets: np.ndarray

    def narrowed(self, dim: int) -> Vectors:
        return Vectors(*(truncate(x, dim) for x in (self.queries, self.passages, self.targets)))

    def triple(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.queries, self.passages, self.targets

    def save(self, path) -> None:
        np.savez(path, queries=self.queries, passages=self.passages, targets=self.targets)

    @classmethod
    def load(cls, path) -> Vectors:
        with np.load(path) as z:
            return cls(z["queries"], z["passages"], z["targets"])


@dataclass
class Score:
    """A candidate's vectors scored against the source's at one width and precision."""

    dim: int
    precision: str
    retention: float
    ci95: list[float] | None
    agreement_at_10: float
    bytes_per_vector: int
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"dim": self.dim, "precision": self.precision, "retention": round(self.retention, 4),
                "ci95": self.ci95, "agreement_at_10": round(self.agreement_at_10, 4),
                "bytes_per_vector": self.bytes_per_vector}


class Scorer:
    """Scores candidates' :class:`Vectors` against the source's, searched once."""

    def __init__(self, ev: EvalSet, source: Vectors) -> None:
        self.ev, self.source = ev, source
        index = cloze_index(source.passages, ev.cloze.origins, source.targets)
        self._reference = ranked_ids(source.queries, index, K)  # the source's top 10 of the same index

    def score(self, v: Vectors, *, dim: int | None = None, precision: str = "float32") -> Score:
        """Known-item retention (and its 95% interval) and agreement@10, the candidate's documents stored at
        ``precision`` and, given ``dim``, truncated to it (renormalised)."""
        width = v.queries.shape[1]
        if dim is not None and dim < width:
            v, width = v.narrowed(dim), dim
        rescore = RESCORE if precision == "binary" else 0
        found = known_item(self.source.triple(), v.triple(), self.ev.cloze.origins, precision=precision,
                           rescore=rescore)
        index = cloze_index(v.passages, self.ev.cloze.origins, v.targets)
        agree = agreement(self._reference, ranked_ids(v.queries, index, max(K, DEPTH)), k=K, depth=DEPTH)
        iv = found.interval()
        return Score(width, precision, found.retention, None if iv is None else [round(x, 4) for x in iv],
                     agree.means()[f"agreement_at_{K}"], bytes_per_vector(precision, width))
