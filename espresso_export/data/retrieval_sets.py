"""Retrieval sets: queries, a corpus and relevance judgements (BEIR folders, or an STS set turned around)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from espresso_export.core.errors import NotFoundError, ValidationError
from espresso_export.core.metrics import per_query_ranking_scores, scores_of
from espresso_export.data.files import (
    jsonl_objects,
    open_text,
    parse_score,
    text_lines,
    text_value,
    titled,
)
from espresso_export.data.sts_sets import StsPairs


@dataclass(frozen=True)
class RetrievalSet:
    """Queries, a corpus and, per query, the ids of its relevant documents (graded score > 0)."""

    name: str
    query_ids: list[str]
    queries: list[str]
    doc_ids: list[str]
    docs: list[str]
    relevant: dict[str, frozenset[str]]  # only queries with at least one relevant document
    grades: dict[str, dict[str, float]] = field(default_factory=dict)  # graded judgements (> 0); absent: all 1

    def judgements(self, query_id: str) -> dict[str, float]:
        """The graded relevant documents of ``query_id`` (id -> score > 0); grade 1 when the set has no grades."""
        return self.grades.get(query_id) or {d: 1.0 for d in self.relevant.get(query_id, ())}

    def scores(self, ranked, positions: list[int]) -> dict[str, float]:
        """MRR@10, recall@10, nDCG@10 and recall@100 of ``ranked`` (row i: corpus positions retrieved for the
        query at ``positions[i]``, best first; -1 for none)."""
        return scores_of(self.per_query_scores(ranked, positions))

    def per_query_scores(self, ranked, positions: list[int]) -> np.ndarray:
        """``(queries, 4)``: :meth:`scores` per query, columns in ``RANKING_SCORES`` order."""
        rankings = [[self.doc_ids[j] for j in row if j >= 0] for row in ranked]
        return per_query_ranking_scores(rankings, [self.judgements(self.query_ids[q]) for q in positions])

    @property
    def evaluated_queries(self) -> list[int]:
        """Positions in ``queries`` of the queries that have relevant documents."""
        return [i for i, q in enumerate(self.query_ids) if q in self.relevant]


def _beir_texts(path: Path, *, with_title: bool) -> tuple[list[str], list[str]]:
    ids: list[str] = []
    texts: list[str] = []
    seen: set[str] = set()
    for where, obj in jsonl_objects(path, open_text(path)):
        if "_id" not in obj or "text" not in obj:
            raise ValidationError(f"{where}: needs the fields _id and text")
        key = str(obj["_id"])
        if key in seen:
            raise ValidationError(f"{where}: duplicate _id {key!r}")
        seen.add(key)
        value = text_value(obj["text"], where, "text")
        text = titled(obj, value, where) if with_title else value.strip()
        if not text:
            raise ValidationError(f"{where}: empty text for _id {key!r}")
        ids.append(key)
        texts.append(text)
    if not ids:
        raise ValidationError(f"{path} is empty")
    return ids, texts


def _beir_file(folder: Path, stem: str, what: str = "a retrieval set") -> Path:
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (folder / name).is_file():
            return folder / name
    layout = "corpus.jsonl" if stem == "corpus" and what != "a retrieval set" else \
        "corpus.jsonl, queries.jsonl, qrels/test.tsv"
    raise ValidationError(f"{folder} is not {what}: no {stem}.jsonl (BEIR layout: {layout})")


def read_beir_corpus(folder: str | Path) -> tuple[list[str], list[str]]:
    """``(ids, documents)`` of a BEIR folder's ``corpus.jsonl`` alone, as :func:`read_retrieval` reads them ("title
    text", in file order): a folder of documents, with or without queries and qrels (labels are for
    ``--retrieval``; a ``--corpus`` needs none)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise NotFoundError(f"corpus not found: {folder} is not a folder")
    return _beir_texts(_beir_file(folder, "corpus", "a corpus folder"), with_title=True)


def _qrels_file(folder: Path, split: str) -> Path:
    candidates = [folder / "qrels" / f"{split}.tsv", folder / "qrels.tsv"]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        tsvs = sorted((folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        if len(tsvs) != 1:
            raise ValidationError(f"{folder}: no qrels/{split}.tsv" + (f" (found {', '.join(p.name for p in tsvs)})" if tsvs else ""))
        found = tsvs[0]
    return found


def _read_qrels(path: Path):
    """Yield ``(line, query id, doc id, graded score)``; a first line naming the columns is skipped."""
    found = False
    for lineno, line in enumerate(text_lines(open_text(path)), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        where = f"{path}:{lineno}"
        if len(parts) == 4:  # TREC style: query-id, iteration, doc-id, score
            parts = [parts[0], parts[2], parts[3]]
        if len(parts) != 3:
            raise ValidationError(f"{where}: expected 3 tab-separated columns (query-id, corpus-id, score), found {len(parts)}")
        if lineno == 1 and parts[2].strip().lower() == "score":
            continue
        found = True
        yield lineno, parts[0].strip(), parts[1].strip(), parse_score(parts[2], where)
    if not found:
        raise ValidationError(f"{path} has no relevance judgements")


def read_retrieval(folder: str | Path, *, split: str = "test") -> RetrievalSet:
    """A BEIR-style folder: ``corpus.jsonl`` (_id, title, text), ``queries.jsonl`` (_id, text),
    ``qrels/<split>.tsv`` (query-id, corpus-id, score with a header). Documents are "title text"."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NotFoundError(f"retrieval set not found: {folder} is not a folder")
    doc_ids, docs = _beir_texts(_beir_file(folder, "corpus"), with_title=True)
    query_ids, queries = _beir_texts(_beir_file(folder, "queries"), with_title=False)
    qrels_path = _qrels_file(folder, split)
    known_q, known_d = set(query_ids), set(doc_ids)
    positive: dict[str, dict[str, float]] = {}
    for lineno, qid, did, score in _read_qrels(qrels_path):
        if score <= 0:
            continue  # judged not relevant
        if qid not in known_q:
            raise ValidationError(f"{qrels_path}:{lineno}: query id {qid!r} is not in the queries file")
        if did not in known_d:
            raise ValidationError(f"{qrels_path}:{lineno}: corpus id {did!r} is not in the corpus")
        positive.setdefault(qid, {})[did] = score
    relevant = {q: frozenset(d) for q, d in positive.items()}
    if not relevant:
        raise ValidationError(f"{qrels_path}: no query has a relevant document (score > 0)")
    return RetrievalSet(folder.name, query_ids, queries, doc_ids, docs, relevant, grades=positive)


def retrieval_from_sts(pairs: StsPairs, *, min_score: float = 4.0) -> RetrievalSet:
    """Each distinct sentence1 is a query; every distinct sentence2 is a document; a query's
    relevant documents are its pairs scored ``>= min_score``."""
    doc_index: dict[str, str] = {}
    for s2 in pairs.sentence2:
        doc_index.setdefault(s2, f"d{len(doc_index)}")
    query_index: dict[str, str] = {}
    relevant: dict[str, set[str]] = {}
    for s1, s2, score in zip(pairs.sentence1, pairs.sentence2, pairs.scores):
        qid = query_index.setdefault(s1, f"q{len(query_index)}")
        if score >= min_score:
            relevant.setdefault(qid, set()).add(doc_index[s2])
    if not relevant:
        raise ValidationError(f"{pairs.name}: no pair scores >= {min_score:g}, so no query has a relevant document")
    return RetrievalSet(
        name=f"{pairs.name} (as retrieval)",
        query_ids=list(query_index.values()), queries=list(query_index),
        doc_ids=list(doc_index.values()), docs=list(doc_index),
        relevant={q: frozenset(d) for q, d in relevant.items()},
    )
