"""What ``auto`` scores every candidate on: a seeded sample of the user's documents, known-item queries cut out of
it (:func:`~espresso_export.data.pseudo_queries.choose_queries`), and the source's vectors of both, encoded once.
A candidate's score is its known-item retention (:mod:`espresso_export.verification.known_item`) with its
agreement@10 beside it; its vectors are searched again at every stored width and precision."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.data.pseudo_queries import (
    MIN_WORDS,
    Documents,
    KnownItemQueries,
    choose_queries,
    read_documents_of,
)
from espresso_export.runtime.precision import bytes_per_vector, truncate
from espresso_export.verification.agreement import DEPTH, K, agreement, ranked_ids
from espresso_export.verification.known_item import (
    Estimate,
    document_belief,
    document_followed,
    followed,
    higher,
    known_item,
    known_item_index,
    source_belief,
)

RESCORE = 4  # binary: 4 x top-k by Hamming distance, re-ranked (sentence-transformers' semantic_search_faiss default)
DIGITS = 4  # scores are kept as auto.json records them, so a search read back from its work folder decides alike
NESTED_WIDTHS = (32, 48, 64, 96, 128, 192, 256, 384, 512, 768)  # the stored widths tried, up to the head's


def read_documents(specs: list[str], *, field: str | None = None) -> Documents:
    """Every document of every ``--corpus`` spec, as an index holds them (titles in front; ``field``: the jsonl
    field or csv column of those that name none, ``--corpus-field``)."""
    parts = [read_documents_of(s, field=field) for s in specs]
    titles = None
    if any(p.titles for p in parts):
        titles = [t for p in parts for t in (p.titles or [""] * len(p.texts))]
    return Documents(name="+".join(p.name for p in parts), texts=[t for p in parts for t in p.texts], titles=titles,
                     duplicates=sum(p.duplicates for p in parts))


@dataclass(frozen=True)
class Sample:
    """The documents the candidates are searched over and the known-item queries they are scored on."""

    documents: list[str]
    queries: KnownItemQueries  # origins index ``documents``
    held_out: frozenset[int]  # positions in the whole corpus of the queries' documents: never healed on
    others: list[str] = field(default_factory=list)  # the documents not in the sample (:mod:`.all_documents`)
    duplicates: int = 0  # repeated documents dropped (each kept once)
    asked: list[str] = field(default_factory=list)  # the user's own queries (--queries) it is also scored on

    @property
    def encoded(self) -> int:
        """Texts a candidate encodes to be scored: the documents, each query and its target, the user's queries."""
        return len(self.documents) + 2 * len(self.queries) + len(self.asked)

    def with_others(self) -> Sample:
        """Every document (the sample's first, so the queries' origins still point at theirs), the same queries."""
        return Sample(self.documents + self.others, self.queries, self.held_out, asked=self.asked)

    def to_dict(self) -> dict:
        out = {"documents": len(self.documents), "queries": len(self.queries), "query_method": self.queries.method,
               "duplicates_dropped": self.duplicates}
        return {**out, "your_queries": len(self.asked)} if self.asked else out


def draw_sample(documents: Documents, *, size: int, queries: int, seed: int, method: str = "auto") -> Sample:
    """A seeded sample of ``size`` documents and ``queries`` known-item queries cut out of it, chosen as
    ``verify --corpus`` chooses them (:func:`~espresso_export.data.pseudo_queries.choose_queries`); a corpus that
    gives none is refused before any model is loaded, naming what to give."""
    n = len(documents.texts)
    chosen = sorted(random.Random(seed).sample(range(n), min(size, n)))
    sub = replace(documents, texts=[documents.texts[i] for i in chosen],
                  titles=None if documents.titles is None else [documents.titles[i] for i in chosen])
    made = choose_queries(sub, agreement=None, known_items=method, limit=queries, seed=seed)
    if made.known_items is None:
        raise ValidationError(
            f"{documents.name}: no known-item query could be made from its {n:,} documents ({made.why_no_known_items}): "
            f"auto scores candidates on queries cut out of your documents; give documents of two or more sentences, "
            f"with titles or of {2 * MIN_WORDS}+ words (--corpus; --corpus-field names a jsonl field holding them)")
    taken = set(chosen)
    return Sample(sub.texts, made.known_items, frozenset(chosen[i] for i in made.known_items.origins),
                  [x for i, x in enumerate(documents.texts) if i not in taken], documents.duplicates)


@dataclass(frozen=True)
class Vectors:
    """One model's unit vectors of a :class:`Sample`: its queries, its documents and the queries' targets, and the
    user's own queries (``asked``, empty without ``--queries``)."""

    queries: np.ndarray
    documents: np.ndarray
    targets: np.ndarray
    asked: np.ndarray | None = None

    def narrowed(self, dim: int) -> Vectors:
        return self.mapped(lambda x: truncate(x, dim))

    def triple(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.queries, self.documents, self.targets

    def mapped(self, f) -> Vectors:
        """``f`` applied to each array (a head, a truncation)."""
        return Vectors(*(f(x) for x in self.triple()), asked=None if self.asked is None else f(self.asked))

    def save(self, path) -> None:
        asked = {} if self.asked is None else {"asked": self.asked}
        np.savez(path, queries=self.queries, documents=self.documents, targets=self.targets, **asked)

    @classmethod
    def load(cls, path) -> Vectors:
        with np.load(path) as z:
            return cls(z["queries"], z["documents"], z["targets"], z["asked"] if "asked" in z else None)


@dataclass(frozen=True)
class Score:
    """A candidate's vectors scored against the source's at one stored form (width and precision), as recorded:
    the known-item retention, its 95% interval and agreement@10 rounded to :data:`DIGITS`. A form chosen again on
    all the documents by the final check carries its retention alone (no interval, no agreement)."""

    dim: int
    precision: str
    retention: float
    ci95: tuple[float, float] | None = None
    agreement_at_10: float | None = None
    bytes_per_vector: int = 0
    found: float | None = None  # the estimate's two reads, the lower the retention (known_item.Estimate)
    follows: float | None = None
    asked: float | None = None  # the belief on the user's own queries: the retention when higher than both

    @property
    def form(self) -> tuple[str, int, int]:
        """(precision, width, rescoring): how an index stores and searches these vectors."""
        return self.precision, self.dim, RESCORE if self.precision == "binary" else 0

    def describe(self) -> str:
        return f"{self.dim}-d {self.precision} ({self.bytes_per_vector} bytes)"

    def to_dict(self) -> dict:
        return {"dim": self.dim, "precision": self.precision, "retention": self.retention,
                "ci95": None if self.ci95 is None else list(self.ci95), "agreement_at_10": self.agreement_at_10,
                "bytes_per_vector": self.bytes_per_vector, "found": self.found, "follows": self.follows,
                **({} if self.asked is None else {"asked": self.asked})}

    @classmethod
    def from_dict(cls, d: dict) -> Score:
        ci = d.get("ci95")
        return cls(d["dim"], d["precision"], d["retention"], None if ci is None else tuple(ci),
                   d.get("agreement_at_10"), d["bytes_per_vector"], d.get("found"), d.get("follows"), d.get("asked"))


def cheapest(forms: Iterable[Score], target: float, precisions=None) -> Score | None:
    """The fewest bytes per vector of a stored form keeping ``target`` (among ``precisions``, default all); ties to
    the better retention."""
    ok = [f for f in forms if f.retention >= target and (precisions is None or f.precision in precisions)]
    return min(ok, key=lambda f: (f.bytes_per_vector, -f.retention)) if ok else None


def score_name(with_queries: bool) -> str:
    """What a search's scores are, as its lines, tables and plots name them: with the user's queries the estimate
    is the higher of two reads (:class:`~espresso_export.verification.known_item.Estimate`)."""
    return "estimate" if with_queries else "known-item retention"


def nested_widths(dim: int) -> list[int]:
    return [d for d in NESTED_WIDTHS if d <= dim]


class Scorer:
    """Scores candidates' :class:`Vectors` against the source's, searched once."""

    def __init__(self, sample: Sample, source: Vectors) -> None:
        self.sample, self.source = sample, source
        index = known_item_index(source.documents, sample.queries.origins, source.targets)
        self._reference = ranked_ids(source.queries, index, K)  # the source's top 10 of the same index
        self._belief = source_belief(source.queries, index)
        has_asked = source.asked is not None and len(source.asked) > 0
        self._asked = source_belief(source.asked, source.documents) if has_asked else None
        # the documents' side: each sample document's belief over the user's and the known-item queries
        self._answers = document_belief(source.asked, source.queries, source.documents) if has_asked else None

    def score(self, v: Vectors, *, dim: int | None = None, precision: str = "float32") -> Score:
        """The estimate (:class:`~espresso_export.verification.known_item.Estimate`: the lower of the known-item
        reads, with the user's queries the higher of that and their belief), its 95% interval, and agreement@10,
        the candidate's documents stored at ``precision`` and, given ``dim``, truncated to it (renormalised)."""
        width = v.queries.shape[1]
        if dim is not None and dim < width:
            v, width = v.narrowed(dim), dim
        rescore = RESCORE if precision == "binary" else 0
        origins = self.sample.queries.origins
        index = known_item_index(v.documents, origins, v.targets)
        asked = None
        if self._asked is not None:  # the user's queries search the documents as they are (nothing cut out)
            asked = higher(followed(self._asked, v.asked, v.documents, precision=precision, rescore=rescore),
                           document_followed(self._answers, v.asked, v.documents, precision=precision,
                                             rescore=rescore))
        found = Estimate(known_item(self.source.triple(), v.triple(), origins, precision=precision, rescore=rescore),
                         followed(self._belief, v.queries, index, precision=precision, rescore=rescore), asked)
        agree = agreement(self._reference, ranked_ids(v.queries, index, max(K, DEPTH)), k=K, depth=DEPTH)
        iv = found.interval()
        return Score(width, precision, round(found.retention, DIGITS),
                     None if iv is None else (round(iv[0], DIGITS), round(iv[1], DIGITS)),
                     round(agree.means()[f"agreement_at_{K}"], DIGITS), bytes_per_vector(precision, width),
                     round(found.found.retention, DIGITS), round(found.follows.retention, DIGITS),
                     None if asked is None else round(asked.retention, DIGITS))

    def forms(self, vectors: Vectors, dims: list[int], precisions: list[str]) -> tuple[Score, ...]:
        """Every (width, precision) the index could store, scored: the nested widths of a PCA head and each
        output precision."""
        width = vectors.queries.shape[1]
        return tuple(self.score(vectors, dim=k, precision=p)
                     for k in sorted({d for d in dims if d < width} | {width}) for p in precisions)
