"""Judged retention: what a little judging of the user's own queries says (``verify --write-judging`` and
``--judgments``).

Two models' nDCG@10 on a query depends only on the relevance of the documents in their two top 10s, so those
pairs, and only those, are what a judge (a person, an LLM, a cross-encoder) must fill to compare them
(:func:`pools`). The pairs are written query by query, in an order drawn from the query ids alone
(:func:`query_order`), so a judge who stops early has judged whole queries, a random sample of them. Given back
filled in, each query whose pairs are all judged gets its labelled nDCG@10 under both models (graded gains as BEIR
and pytrec_eval: :func:`espresso_export.core.metrics.ndcg_at_k`, the ideal DCG from that query's judged
relevances), and the judged retention is the candidate's mean over the source's, with the paired bootstrap interval of every retention
(:func:`espresso_export.core.metrics.ratio_interval`). A query with an unjudged document in either top 10 is
skipped and counted. The report keeps it apart from the label-free estimates.

Why not the queries needing fewest pairs first (the least judging a query): those are the queries where the models
agree most, and candidates read high on them: a judge who stops early must have judged a random sample.

"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.metrics import ndcg_at_k, ratio_interval

K = 10
FILLED = "relevance"  # the field a judge fills: 0 not relevant, 1 relevant, 2 highly (any number >= 0)


# --- numbers in, numbers out -------------------------------------------------------------------------------------

def pools(*tops: np.ndarray, k: int = K) -> list[list[int]]:
    """Per query, the documents (corpus positions, ascending) in any of the models' top ``k`` (the source's and a
    candidate's, or several candidates'): the pairs that decide each one's nDCG@k (-1 pads are no documents)."""
    return [sorted({int(d) for top in row for d in top[:k] if d >= 0}) for row in zip(*tops)]


def judged_ndcg(source_top: np.ndarray, candidate_top: np.ndarray, grades: Sequence[dict[int, float]],
                k: int = K) -> tuple[np.ndarray, np.ndarray, int]:
    """``(candidate, source, skipped)``: each model's nDCG@k on the queries whose pooled documents all have a grade
    in ``grades[i]`` (position -> relevance; the ideal DCG from all of them), and the count of the other queries."""
    cand, src, skipped = [], [], 0
    for s, c, pool, g in zip(source_top, candidate_top, pools(source_top, candidate_top, k=k), grades):
        if not pool or any(d not in g for d in pool):
            skipped += 1
            continue
        cand.append(ndcg_at_k([int(d) for d in c[:k] if d >= 0], g, k))
        src.append(ndcg_at_k([int(d) for d in s[:k] if d >= 0], g, k))
    return np.asarray(cand, dtype=np.float64), np.asarray(src, dtype=np.float64), skipped


@dataclass(frozen=True)
class JudgedRow:
    """One corpus: both models' labelled nDCG@10 on its judged queries."""

    name: str
    candidate: np.ndarray = field(repr=False, compare=False)  # per judged query
    source: np.ndarray = field(repr=False, compare=False)
    skipped: int = 0

    @property
    def judged(self) -> int:
        return len(self.source)

    @property
    def retention(self) -> float | None:
        """Candidate mean over source mean; None with no judged query or a source mean of 0."""
        s = float(self.source.mean()) if self.judged else 0.0
        return float(self.candidate.mean()) / s if s > 0 else None

    @property
    def ci95(self) -> tuple[float, float] | None:
        return ratio_interval(self.candidate, self.source)

    def line(self) -> str:
        iv, r = self.ci95, self.retention
        shown = "undefined (no judged query, or no relevant document judged)" if r is None else f"{r:.3f}"
        return (f"judged retention on {self.name}: {shown}" + (f" [{iv[0]:.2f}-{iv[1]:.2f}]" if iv else "")
                + f", {self.judged} queries judged, {self.skipped} skipped")

    def to_dict(self) -> dict:
        iv, r = self.ci95, self.retention
        mean = (lambda v: round(float(v.mean()), 4) if len(v) else None)
        return {"name": self.name, "retention": None if r is None else round(r, 4),
                "ci95": None if iv is None else [round(iv[0], 4), round(iv[1], 4)],
                "candidate_ndcg_at_10": mean(self.candidate), "source_ndcg_at_10": mean(self.source),
                "queries_judged": self.judged, "queries_skipped": self.skipped}


# --- the judgments file ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Judgments:
    """Relevance by (corpus or None for every corpus, query id, document id), with the query's text when the line
    gave it (a judgment of another query under the same id is not used)."""

    path: str
    by_query: dict[tuple[str | None, str], list[tuple[str, float | None, str | None]]]  # (doc, relevance, query)

    def grades(self, corpus: str, query_id: str, query: str) -> dict[str, float]:
        """Document id -> relevance of one query (its last judgment): its judged pairs only."""
        out: dict[str, float] = {}
        for key in ((None, query_id), (corpus, query_id)):
            for doc, relevance, text in self.by_query.get(key, []):
                if relevance is not None and text in (None, query):
                    out[doc] = relevance
        return out


def _id(value, where: str, name: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise ValidationError(f"{where}: {name} must be a string or an integer, got {json.dumps(value)}")
    return str(value).strip()


def parse_relevance(value, where: str) -> float | None:
    """A judge's grade: null or empty is not judged yet; a number at least 0 (0 not relevant, 1, 2 highly)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "null", "none")):
        return None
    number = None if isinstance(value, bool) else value if isinstance(value, (int, float)) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or number < 0:
        raise ValidationError(f"{where}: relevance must be a number at least 0 (0 not relevant, 1 relevant, 2 "
                              f"highly) or null for not judged, got {json.dumps(value)}")
    return float(number)


def _json_pair(line: str, where: str) -> tuple:
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise ValidationError(f"{where}: not valid JSON ({getattr(e, 'msg', e)}); a line is one pair as "
                              "--write-judging writes it") from None
    if not isinstance(obj, dict) or "query_id" not in obj or "doc_id" not in obj or FILLED not in obj:
        raise ValidationError(f"{where}: a pair needs query_id, doc_id and relevance (as --write-judging writes "
                              "them)")
    corpus, query = obj.get("corpus"), obj.get("query")
    return (None if corpus is None else _id(corpus, where, "corpus"), _id(obj["query_id"], where, "query_id"),
            _id(obj["doc_id"], where, "doc_id"), parse_relevance(obj[FILLED], where),
            query if isinstance(query, str) else None)


def _header(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return cell.strip().lower() not in ("", "null", "none")
    return False


def _tsv_pair(line: str, where: str, first: bool) -> tuple | None:
    cells = line.rstrip("\r\n").split("\t")
    if len(cells) != 3:
        raise ValidationError(f"{where}: expected query_id<TAB>doc_id<TAB>relevance, or a JSON line as "
                              f"--write-judging writes it; got {len(cells)} column(s)")
    if first and _header(cells[2]):
        return None  # a header (query-id, corpus-id, score: a BEIR qrels file)
    return (None, _id(cells[0], where, "query_id"), _id(cells[1], where, "doc_id"), parse_relevance(cells[2], where),
            None)


def read_judgments(path: str | Path) -> Judgments:
    """A filled ``--write-judging`` file (JSON lines; extra fields ignored) or a TSV ``query_id, doc_id,
    relevance`` (a BEIR qrels file too), gzipped or not. A malformed line is refused naming the file and line."""
    from espresso_export.data.files import open_text, text_lines

    path = Path(path).expanduser()
    by_query: dict = {}
    lines = [(n, line) for n, line in enumerate(text_lines(open_text(path)), 1) if line.strip()]
    as_json = bool(lines) and lines[0][1].lstrip().startswith("{")
    for i, (n, line) in enumerate(lines):
        where = f"{path}:{n}"
        pair = _json_pair(line, where) if as_json else _tsv_pair(line, where, first=i == 0)
        if pair is not None:
            corpus, query_id, doc, relevance, text = pair
            by_query.setdefault((corpus, query_id), []).append((doc, relevance, text))
    return Judgments(str(path), by_query)


def unjudged_file(path: Path) -> bool:
    """Whether ``path`` holds pairs with nothing judged yet (every relevance null): replacing it loses nothing."""
    from espresso_export.data.files import text_lines

    try:
        lines = [json.loads(line) for line in text_lines(path.read_text(encoding="utf-8")) if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return all(isinstance(o, dict) and "doc_id" in o and o.get(FILLED, 0) is None for o in lines)


def check_judging(judgments: str | None, write_judging: str | None, corpus: Sequence[str],
                  judge_command: str | None = None) -> None:
    """Before any work: a corpus to judge, a judgments file that reads (a bad line: its file and line), a pairs
    file that replaces nothing judged, and a judge program only with a pairs file to fill and no judgments."""
    if judge_command and not (write_judging and not judgments):
        raise ValidationError("--judge-command fills the pairs --write-judging FILE writes, then reads them back: "
                              "give --write-judging (and no --judgments: a filled file is read as it is)")
    if (judgments or write_judging) and not corpus:
        raise ValidationError("--judgments and --write-judging judge the searches of your documents: give --corpus")
    if write_judging:
        out = Path(write_judging).expanduser()
        if out.is_dir() or (out.exists() and not unjudged_file(out)):
            raise ValidationError(f"--write-judging {out} exists and holds judgments or other data; it is kept: "
                                  "give another file name (--judgments reads a filled one)")
    if judgments:
        read_judgments(judgments)


# --- the corpora of a verify run -----------------------------------------------------------------------------------

def text_ids(spec: str, texts: Sequence[str], field_name: str | None = None) -> list[str]:
    """Each of ``texts`` (a source's distinct texts, as read): the ``_id`` of its record where the source's records
    have one (a BEIR folder, a jsonl file), else its position in ``texts``."""
    from espresso_export.data.corpus import corpus_texts, split_source
    from espresso_export.data.files import jsonl_objects, open_text
    from espresso_export.data.retrieval_sets import read_beir_corpus

    name, own, _ = split_source(str(spec))
    path = Path(name).expanduser()
    pairs: list = []
    try:
        if path.is_dir():
            ids, raw = read_beir_corpus(path)
            pairs = list(zip(raw, ids))
        elif path.name.endswith((".jsonl", ".jsonl.gz")):
            raw = corpus_texts(path, field=own or field_name)[1]
            pairs = list(zip(raw, [obj.get("_id") for _, obj in jsonl_objects(path, open_text(path))]))
    except ValidationError:  # read as the documents were, or not at all: positions then
        pairs = []
    by_text: dict[str, str] = {}
    for text, found in pairs:
        if isinstance(found, (str, int)) and not isinstance(found, bool):
            by_text.setdefault(text.strip(), str(found))
    return [by_text.get(t.strip(), str(i)) for i, t in enumerate(texts)] if by_text else \
        [str(i) for i in range(len(texts))]


def query_ids(data) -> list[str]:
    """The ids of a corpus' searched queries: the user's ``_id`` or position in their file, else (agreement
    queries made from the documents, the same for the same documents, settings and seed) their position."""
    if data.queries_spec is None:
        return [str(i) for i in range(len(data.queries))]
    from espresso_export.data.corpus import read_corpus

    every = read_corpus(data.queries_spec).sentences
    ids = dict(zip(every, text_ids(data.queries_spec, every)))
    return [ids.get(q, str(i)) for i, q in enumerate(data.queries)]


def query_order(corpus: str, query_id: str) -> str:
    """A query's place in the judging order: a hash of its corpus and id, so the order is random, the same in every
    run and file (verify's, auto's) for the same queries, and independent of the models judged."""
    return hashlib.sha256(f"{corpus}\0{query_id}".encode()).hexdigest()


def judging_pairs(corpora, rows, field_name: str | None = None) -> list[dict]:
    """Every pair a judge must fill, one dict a pair: per query the documents of both top 10s, the queries in
    :func:`query_order`."""
    found = []
    for c, (data, row) in enumerate(zip(corpora, rows)):
        if row.tops is None:  # a model's vectors hold NaN or inf: no ranking to judge
            continue
        docs, queries = text_ids(data.spec, data.passages, field_name), query_ids(data)
        for q, pool in enumerate(pools(*row.tops)):
            pairs = [{"corpus": data.name, "query_id": queries[q], "query": data.queries[q], "doc_id": docs[d],
                      "document": data.passages[d], FILLED: None} for d in pool]
            found.append((query_order(data.name, queries[q]), c, q, pairs))
    return [pair for *_, pairs in sorted(found, key=lambda item: item[:3]) for pair in pairs]


def judged_rows(corpora, rows, judgments: Judgments, field_name: str | None = None) -> list[JudgedRow]:
    """The judged retention on each corpus, from the judgments of its queries."""
    out = []
    for data, row in zip(corpora, rows):
        if row.tops is None:
            continue
        position = {doc: i for i, doc in enumerate(text_ids(data.spec, data.passages, field_name))}
        grades = [{position[d]: r for d, r in judgments.grades(data.name, qid, text).items() if d in position}
                  for qid, text in zip(query_ids(data), data.queries)]
        cand, src, skipped = judged_ndcg(*row.tops, grades)
        out.append(JudgedRow(data.name, cand, src, skipped))
    return out


def judge(report, corpora, judgments: Judgments | None, write_judging: str | None,
          field_name: str | None = None, command: str | None = None, per_query: bool = False) -> None:
    """Onto a verify report: the judged retention of each corpus, and the pairs to judge written (with a note);
    ``command``: the pairs filled by that judge program (:func:`fill_by_command`) and read back as judgments."""
    if write_judging:
        said = write_pairs(write_judging, judging_pairs(corpora, report.agreement, field_name))
        if command:
            filled = fill_by_command(write_judging, command, per_query)
            report.notes.append(f"{said} written to {write_judging} and {filled}")
            judgments = read_judgments(write_judging)
        else:
            report.notes.append(f"{said} to judge written to {write_judging}: {to_fill(write_judging)}")
    if judgments is not None:
        report.judged = judged_rows(corpora, report.agreement, judgments, field_name)


def fill_by_command(path: str | Path, command: str, per_query: bool) -> str:
    """The pairs file at ``path`` filled by a judge program (``espresso-export judge --command``); what it did, as
    a log line ends. A program that fails raises :class:`~espresso_export.core.errors.RuntimeFailure` (exit 1),
    keeping what it judged."""
    from espresso_export.verification.judge import judge as fill

    done = fill(path, command=command, per_query=per_query)
    return (f"{done.judged_now:,} pairs judged by {command} in {done.seconds:.1f} s, {done.complete} of "
            f"{done.queries} queries complete")


def to_fill(path: str | Path) -> str:
    """What to do with a written pairs file, as both commands say it."""
    return (f"fill relevance (0 not relevant, 1 relevant, 2 highly; espresso-export judge {path} asks for each), "
            "then give it back with --judgments")


def write_pairs(path: str | Path, pairs: list[dict]) -> str:
    """The pairs to judge written as JSON lines (atomically); what was written, as "N pairs of M queries"."""
    from espresso_export.core.files import write_text_atomic

    # U+2028/U+2029 escaped: readers that split lines as str.splitlines (or JavaScript) would break a line there
    write_text_atomic(path, "".join(json.dumps(p, ensure_ascii=False).replace("\u2028", "\\u2028")
                                    .replace("\u2029", "\\u2029") + "\n" for p in pairs))
    return f"{len(pairs)} pairs of {len({(p['corpus'], p['query_id']) for p in pairs})} queries"


def judged_sections(rows: Sequence[JudgedRow]) -> list:
    """The report's tables: one a corpus, apart from the label-free estimates."""
    from espresso_export.verification.report import Section

    def cell(v: np.ndarray) -> str:
        return f"{v.mean():.4f}" if len(v) else "-"

    out = []
    for row in rows:
        r, iv = row.retention, row.ci95
        shown = "-" if r is None else f"{r:.4f}" + (f" [{iv[0]:.3f}-{iv[1]:.3f}]" if iv else "")
        notes = [row.line()]
        if row.skipped:
            notes.append("skipped: a query with an unjudged document in either top 10 (the file's order is random, "
                         "so the judged ones are a random sample while whole queries are judged in its order)")
        out.append(Section(f"judged retention: {row.name} (labelled nDCG@10 from your judgments, not an estimate)",
                           ("", "candidate", "source", "retention"),
                           [("nDCG@10", cell(row.candidate), cell(row.source), shown)], notes))
    return out
