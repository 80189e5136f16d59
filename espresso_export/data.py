"""Readers for every text input, in one place.

* sentences (calibration, distillation corpora): ``.txt`` one a line, ``.jsonl``
  with a text field, optionally gzipped;
* scored pairs (STS): STS-B files (tab-separated; score in column 5, sentences
  in 6-7; rows with extra trailing columns tolerated) and generic
  csv/tsv/jsonl files with ``sentence1, sentence2, score`` columns.

Malformed input raises :class:`~espresso_export.errors.ValidationError` naming
the file, the line and what is wrong.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .errors import NotFoundError, ValidationError

BUILTIN = "builtin"
TEXT_FIELDS = ("text", "sentence", "sentence1", "query", "premise")


def builtin_resource(name: str) -> Path:
    return Path(str(resources.files("espresso_export") / "resources" / name))


def _open_text(path: Path):
    if not path.exists():
        raise NotFoundError(f"file not found: {path}")
    if path.is_dir():
        raise ValidationError(f"{path} is a folder, expected a file")
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        return raw.decode("utf-8")
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise ValidationError(f"cannot read {path}: {e}") from e
    except UnicodeDecodeError as e:
        raise ValidationError(f"{path} is not UTF-8 text (byte {e.start})") from e


def _base_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _unique(lines) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for line in lines:
        line = line.strip()
        if line and line not in seen:
            seen.add(line)
            out.append(line)
    return out


def read_sentences(path: str | Path, *, field: str | None = None) -> list[str]:
    """Distinct non-empty sentences from a txt or jsonl file, in file order."""
    if str(path) == BUILTIN:
        path = builtin_resource("calibration.txt")
    path = Path(path)
    text = _open_text(path)
    if _base_suffix(path) == ".jsonl":
        items = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValidationError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
            if not isinstance(obj, dict):
                raise ValidationError(f"{path}:{lineno}: expected a JSON object")
            key = field or next((k for k in TEXT_FIELDS if k in obj), None)
            if key is None or key not in obj:
                wanted = field or " or ".join(TEXT_FIELDS)
                raise ValidationError(f"{path}:{lineno}: no {wanted!r} field")
            items.append(str(obj[key]))
        sentences = _unique(items)
    else:
        sentences = _unique(text.splitlines())
    if not sentences:
        raise ValidationError(f"{path} has no sentences (empty file)")
    return sentences


def sentences_sha256(sentences: list[str]) -> str:
    return hashlib.sha256("\n".join(sentences).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class StsPairs:
    name: str
    sentence1: list[str]
    sentence2: list[str]
    scores: list[float]

    def __len__(self) -> int:
        return len(self.scores)


def _parse_score(value: str, where: str) -> float:
    try:
        score = float(value)
    except ValueError as e:
        raise ValidationError(f"{where}: score {value!r} is not a number") from e
    if score != score:  # NaN
        raise ValidationError(f"{where}: score is NaN")
    return score


def read_sts(
    path: str | Path,
    *,
    columns: tuple[str, str, str] = ("sentence1", "sentence2", "score"),
    limit: int | None = None,
) -> StsPairs:
    """Scored sentence pairs from an STS-B file or a csv/tsv/jsonl file with named columns."""
    if str(path) == BUILTIN:
        path = builtin_resource("sts_smoke.tsv")
    path = Path(path)
    text = _open_text(path)
    suffix = _base_suffix(path)
    if suffix == ".jsonl":
        rows = _sts_jsonl(path, text, columns)
    else:
        first = text.split("\n", 1)[0]
        delim = "\t" if (suffix == ".tsv" or "\t" in first) else ","
        header = [c.strip() for c in first.split(delim)]
        if all(c in header for c in columns):
            rows = _sts_named(path, text, delim, columns)
        elif delim == "\t":
            rows = _sts_stsb(path, text)
        else:
            raise ValidationError(f"{path}:1: header must name the columns {', '.join(columns)}")
    if limit is not None:
        rows = rows[:limit]
    if len(rows) < 2:
        raise ValidationError(f"{path}: needs at least 2 scored pairs, found {len(rows)}")
    s1, s2, sc = zip(*rows)
    return StsPairs(name=path.name, sentence1=list(s1), sentence2=list(s2), scores=list(sc))


def _sts_stsb(path: Path, text: str) -> list[tuple[str, str, float]]:
    """STS-B rows: genre, file, year, id, score, sentence1, sentence2[, extra, extra]."""
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        where = f"{path}:{lineno}"
        if len(parts) < 7:
            raise ValidationError(f"{where}: expected at least 7 tab-separated columns (STS-B format), found {len(parts)}")
        score = _parse_score(parts[4], where)
        s1, s2 = parts[5].strip(), parts[6].strip()
        if not s1 or not s2:
            raise ValidationError(f"{where}: empty sentence")
        rows.append((s1, s2, score))
    return rows


def _sts_named(path: Path, text: str, delim: str, columns) -> list[tuple[str, str, float]]:
    reader = csv.DictReader(io.StringIO(text), delimiter=delim, quoting=csv.QUOTE_MINIMAL if delim == "," else csv.QUOTE_NONE)
    c1, c2, cs = columns
    rows = []
    for lineno, row in enumerate(reader, 2):
        if not any((v or "").strip() for v in row.values()):
            continue
        where = f"{path}:{lineno}"
        if row.get(c1) is None or row.get(c2) is None or row.get(cs) is None:
            raise ValidationError(f"{where}: missing a value for {c1}, {c2} or {cs}")
        rows.append((row[c1].strip(), row[c2].strip(), _parse_score(row[cs], where)))
    return rows


def _sts_jsonl(path: Path, text: str, columns) -> list[tuple[str, str, float]]:
    c1, c2, cs = columns
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValidationError(f"{where}: not valid JSON ({e.msg})") from e
        missing = [c for c in columns if c not in obj]
        if missing:
            raise ValidationError(f"{where}: missing field(s) {', '.join(missing)}")
        rows.append((str(obj[c1]), str(obj[c2]), _parse_score(str(obj[cs]), where)))
    return rows


# --- retrieval sets (queries, corpus, relevance) -----------------------------------------------


@dataclass(frozen=True)
class RetrievalSet:
    """Queries, a corpus and, per query, the ids of its relevant documents (graded score > 0)."""

    name: str
    query_ids: list[str]
    queries: list[str]
    doc_ids: list[str]
    docs: list[str]
    relevant: dict[str, frozenset[str]]  # only queries with at least one relevant document

    @property
    def evaluated_queries(self) -> list[int]:
        """Positions in ``queries`` of the queries that have relevant documents."""
        return [i for i, q in enumerate(self.query_ids) if q in self.relevant]


def _jsonl_objects(path: Path, text: str):
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValidationError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
        if not isinstance(obj, dict):
            raise ValidationError(f"{path}:{lineno}: expected a JSON object")
        yield lineno, obj


def _beir_texts(path: Path, *, with_title: bool) -> tuple[list[str], list[str]]:
    ids: list[str] = []
    texts: list[str] = []
    seen: set[str] = set()
    for lineno, obj in _jsonl_objects(path, _open_text(path)):
        where = f"{path}:{lineno}"
        if "_id" not in obj or "text" not in obj:
            raise ValidationError(f"{where}: needs the fields _id and text")
        key = str(obj["_id"])
        if key in seen:
            raise ValidationError(f"{where}: duplicate _id {key!r}")
        seen.add(key)
        text = str(obj["text"]).strip()
        title = str(obj.get("title") or "").strip() if with_title else ""
        text = f"{title} {text}".strip() if title else text
        if not text:
            raise ValidationError(f"{where}: empty text for _id {key!r}")
        ids.append(key)
        texts.append(text)
    if not ids:
        raise ValidationError(f"{path} is empty")
    return ids, texts


def _beir_file(folder: Path, stem: str) -> Path:
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        if (folder / name).is_file():
            return folder / name
    raise ValidationError(f"{folder} is not a retrieval set: no {stem}.jsonl (BEIR layout: corpus.jsonl, "
                          "queries.jsonl, qrels/test.tsv)")


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
    for lineno, line in enumerate(_open_text(path).splitlines(), 1):
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
        yield lineno, parts[0].strip(), parts[1].strip(), _parse_score(parts[2], where)
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
    positive: dict[str, set[str]] = {}
    for lineno, qid, did, score in _read_qrels(qrels_path):
        if score <= 0:
            continue  # judged not relevant
        if qid not in known_q:
            raise ValidationError(f"{qrels_path}:{lineno}: query id {qid!r} is not in the queries file")
        if did not in known_d:
            raise ValidationError(f"{qrels_path}:{lineno}: corpus id {did!r} is not in the corpus")
        positive.setdefault(qid, set()).add(did)
    relevant = {q: frozenset(d) for q, d in positive.items()}
    if not relevant:
        raise ValidationError(f"{qrels_path}: no query has a relevant document (score > 0)")
    return RetrievalSet(folder.name, query_ids, queries, doc_ids, docs, relevant)


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
