"""Readers for every text input, in one place.

* sentences (calibration, distillation corpora): ``.txt`` one a line, ``.jsonl``
  with a text field, optionally gzipped;
* scored pairs (STS): STS-B files (tab-separated; score in column 5, sentences
  in 6-7; rows with extra trailing columns tolerated) and generic
  csv/tsv/jsonl files with ``sentence1, sentence2, score`` columns;
* training pairs (ESE, contrastive): anchor/positive pairs, triplets with a
  hard negative, or NLI-labelled rows turned into triplets (:func:`read_pairs`);
* distillation pairs: any of the pair files above, reduced to distinct
  sentence pairs (:func:`read_sentence_pairs`).

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

from espresso_export.core.errors import NotFoundError, ValidationError

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
        sentences = _unique(_jsonl_texts(path, text, field))
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


# --- training pairs: anchors with positives (and hard negatives) ---------------------------------------

NLI_LABELS = {"entailment": "entailment", "neutral": "neutral", "contradiction": "contradiction",
              "0": "entailment", "1": "neutral", "2": "contradiction"}  # HF snli/mnli integer labels
ANCHOR_FIELDS = ("anchor", "query", "premise", "sentence1", "text", "sent0")
POSITIVE_FIELDS = ("positive", "pos", "hypothesis", "sentence2", "sent1")
NEGATIVE_FIELDS = ("negative", "neg", "hard_negative", "sent2")


@dataclass(frozen=True)
class TextPairs:
    """Anchor/positive pairs, each optionally with one hard negative (triplets).

    NLI files become SimCSE-style triplets: premise, an entailed hypothesis
    and a contradicting one of the same premise; neutral rows are dropped.
    """

    name: str
    anchor: list[str]
    positive: list[str]
    negative: list[str] | None = None
    dropped: int = 0  # input rows that could not be used (neutral, or no partner of the needed label)

    def __len__(self) -> int:
        return len(self.anchor)


def _first_key(obj: dict, keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if k in obj), None)


def _nli_label(value, where: str) -> str:
    label = NLI_LABELS.get(str(value).strip().lower())
    if label is None:
        raise ValidationError(f"{where}: unknown NLI label {value!r}; expected entailment, neutral or contradiction (or 0/1/2)")
    return label


def _pairs_from_nli(name: str, rows: list[tuple[str, str, str]]) -> TextPairs:
    """Premise -> (entailed, contradicting) triplets; plain pairs if the file has no contradictions."""
    entailed: dict[str, list[str]] = {}
    contradicted: dict[str, list[str]] = {}
    for premise, hypothesis, label in rows:
        if label == "entailment":
            entailed.setdefault(premise, []).append(hypothesis)
        elif label == "contradiction":
            contradicted.setdefault(premise, []).append(hypothesis)
    anchors, positives, negatives = [], [], []
    with_negatives = any(p in contradicted for p in entailed)
    for premise, hyps in entailed.items():
        negs = contradicted.get(premise)
        if with_negatives and not negs:
            continue
        for j, hyp in enumerate(hyps):
            anchors.append(premise)
            positives.append(hyp)
            if with_negatives:
                negatives.append(negs[j % len(negs)])
    if not anchors:
        raise ValidationError(f"{name}: no entailment pairs found (an NLI file needs rows labelled entailment)")
    return TextPairs(name=name, anchor=anchors, positive=positives, negative=negatives if with_negatives else None,
                     dropped=len(rows) - len(anchors))


def jsonl_objects(path: Path, text: str):
    """``(where, object)`` for every non-blank line of a jsonl text; a line that is not a JSON object is an error."""
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValidationError(f"{where}: not valid JSON ({e.msg})") from e
        if not isinstance(obj, dict):
            raise ValidationError(f"{where}: expected a JSON object")
        yield where, obj


def _pair_rows_jsonl(path: Path, text: str) -> tuple[list[tuple], bool]:
    rows: list[tuple] = []
    nli = None
    for where, obj in jsonl_objects(path, text):
        a, p = _first_key(obj, ANCHOR_FIELDS), _first_key(obj, POSITIVE_FIELDS)
        if a is None or p is None:
            raise ValidationError(f"{where}: needs an anchor ({'/'.join(ANCHOR_FIELDS)}) and a positive "
                                  f"({'/'.join(POSITIVE_FIELDS)}) field")
        is_nli = "label" in obj
        if nli is None:
            nli = is_nli
        elif nli != is_nli:
            raise ValidationError(f"{where}: mixes labelled (NLI) and unlabelled rows")
        if is_nli:
            rows.append((str(obj[a]).strip(), str(obj[p]).strip(), _nli_label(obj["label"], where)))
        else:
            n = _first_key(obj, NEGATIVE_FIELDS)
            rows.append((str(obj[a]).strip(), str(obj[p]).strip(), None if n is None else str(obj[n]).strip()))
    return rows, bool(nli)


def _pair_rows_table(path: Path, text: str, delim: str) -> tuple[list[tuple], bool]:
    quoting = csv.QUOTE_MINIMAL if delim == "," else csv.QUOTE_NONE
    table = [r for r in csv.reader(io.StringIO(text), delimiter=delim, quoting=quoting) if any(c.strip() for c in r)]
    if not table:
        return [], False
    header = [c.strip().lower() for c in table[0]]
    a, p = _first_key(dict.fromkeys(header), ANCHOR_FIELDS), _first_key(dict.fromkeys(header), POSITIVE_FIELDS)
    if a is not None and p is not None:
        cols = [header.index(a), header.index(p)]
        if "label" in header:
            cols.append(header.index("label"))
        elif (n := _first_key(dict.fromkeys(header), NEGATIVE_FIELDS)) is not None:
            cols.append(header.index(n))
        body, start, nli = table[1:], 2, "label" in header
    else:  # no header: anchor, positive[, negative | NLI label]
        cols = list(range(min(len(table[0]), 3)))
        body, start = table, 1
        nli = len(cols) == 3 and table[0][2].strip().lower() in NLI_LABELS
    if len(cols) < 2:
        raise ValidationError(f"{path}:1: needs at least two columns (anchor and positive)")
    rows: list[tuple] = []
    for lineno, row in enumerate(body, start):
        where = f"{path}:{lineno}"
        if len(row) <= max(cols):
            raise ValidationError(f"{where}: expected {max(cols) + 1} columns, found {len(row)}")
        values = [row[c].strip() for c in cols]
        if nli:
            rows.append((values[0], values[1], _nli_label(values[2], where)))
        else:
            rows.append((values[0], values[1], values[2] if len(values) == 3 else None))
    return rows, nli


def read_pairs(path: str | Path, *, limit: int | None = None) -> TextPairs:
    """Positive pairs or triplets from jsonl/csv/tsv (optionally gzipped), or NLI-labelled rows.

    jsonl fields: anchor/query/premise/sentence1, positive/hypothesis/sentence2, and optionally
    negative, or ``label`` (NLI). csv/tsv: the same names in a header, or no header with the columns
    anchor, positive[, negative | NLI label] (e.g. SNLI as premise, hypothesis, label).
    """
    path = Path(path)
    text = _open_text(path)
    if _base_suffix(path) == ".jsonl":
        rows, nli = _pair_rows_jsonl(path, text)
    else:
        first = text.split("\n", 1)[0]
        rows, nli = _pair_rows_table(path, text, "\t" if (_base_suffix(path) == ".tsv" or "\t" in first) else ",")
    for i, row in enumerate(rows):
        if not row[0] or not row[1] or (not nli and row[2] == ""):
            raise ValidationError(f"{path}: row {i + 1} has an empty sentence")
    if nli:
        pairs = _pairs_from_nli(path.name, rows)
    else:
        has_neg = [r[2] is not None for r in rows]
        if any(has_neg) and not all(has_neg):
            raise ValidationError(f"{path}: some rows have a negative and some do not; give all or none")
        pairs = TextPairs(name=path.name, anchor=[r[0] for r in rows], positive=[r[1] for r in rows],
                          negative=[r[2] for r in rows] if rows and all(has_neg) else None)
    if limit is not None:
        pairs = TextPairs(name=pairs.name, anchor=pairs.anchor[:limit], positive=pairs.positive[:limit],
                          negative=None if pairs.negative is None else pairs.negative[:limit], dropped=pairs.dropped)
    if len(pairs) < 2:
        raise ValidationError(f"{path}: needs at least 2 pairs, found {len(pairs)}")
    return pairs


def is_scored(path: str | Path) -> bool:
    """True when a file holds scored pairs (STS-B layout, or a ``score`` column/field)."""
    path = Path(path)
    if str(path) == BUILTIN:
        return True
    text = _open_text(path)
    first = next((line for line in text.splitlines() if line.strip()), "")
    if _base_suffix(path) == ".jsonl":
        return any("score" in obj for _, obj in jsonl_objects(path, first))
    cells = first.split("\t") if "\t" in first else first.split(",")
    if "score" in [c.strip().lower() for c in cells]:
        return True
    if len(cells) >= 7:  # STS-B: genre, file, year, id, score, sentence1, sentence2
        try:
            float(cells[4])
            return True
        except ValueError:
            return False
    return False


def read_training_data(path: str | Path, *, limit: int | None = None) -> StsPairs | TextPairs:
    """Scored pairs (:func:`read_sts`) or positive pairs / triplets (:func:`read_pairs`), by content."""
    return read_sts(path, limit=limit) if is_scored(path) else read_pairs(path, limit=limit)


def read_sentence_pairs(specs, *, limit: int | None = None) -> tuple[list[tuple[str, str]], dict]:
    """Distinct sentence pairs from one or more pair files, their scores and labels ignored, with counts.

    For pair distillation the teacher supplies the similarity, so any related pairs will do: STS files
    (both sentences of each row), anchor/positive pairs, triplets (anchor/positive and anchor/negative)
    or NLI rows. A pair and its reverse count once; pairs of a sentence with itself are dropped.
    ``limit`` caps the pairs read from each file.
    """
    if isinstance(specs, (str, Path)):
        specs = [specs]
    specs = [str(s) for s in specs]
    if not specs:
        raise ValidationError("no pair file given")
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    sources = []
    for spec in specs:
        data = read_training_data(spec, limit=limit)
        if isinstance(data, StsPairs):
            rows = list(zip(data.sentence1, data.sentence2))
        else:
            rows = list(zip(data.anchor, data.positive))
            if data.negative is not None:
                rows += list(zip(data.anchor, data.negative))
        kept = 0
        for a, b in rows:
            a, b = a.strip(), b.strip()
            key = (a, b) if a <= b else (b, a)
            if not a or not b or a == b or key in seen:
                continue
            seen.add(key)
            pairs.append((a, b))
            kept += 1
        sources.append({"spec": spec, "pairs": len(rows), "kept": kept})
    if len(pairs) < 2:
        raise ValidationError(f"the pair files hold {len(pairs)} distinct pairs of different sentences; need at least 2")
    return pairs, {"pairs": len(pairs), "sources": sources}


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
    for where, obj in jsonl_objects(path, text):
        missing = [c for c in columns if c not in obj]
        if missing:
            raise ValidationError(f"{where}: missing field(s) {', '.join(missing)}")
        rows.append((str(obj[c1]), str(obj[c2]), _parse_score(str(obj[cs]), where)))
    return rows


# --- distillation corpora -----------------------------------------------------------------------------

HUB_PREFIX = "hf://"
_HUB_DATA_PATTERNS = ["*.txt", "*.txt.gz", "*.jsonl", "*.jsonl.gz", "*.csv", "*.csv.gz", "*.tsv", "*.tsv.gz",
                      "*.parquet", "**/*.txt", "**/*.txt.gz", "**/*.jsonl", "**/*.jsonl.gz", "**/*.csv",
                      "**/*.csv.gz", "**/*.tsv", "**/*.tsv.gz", "**/*.parquet"]
_CORPUS_SUFFIXES = (".txt", ".jsonl", ".csv", ".tsv", ".parquet")


@dataclass(frozen=True)
class CorpusSource:
    """What one ``--corpus`` spec contributed."""

    spec: str
    kind: str  # txt | jsonl | csv | tsv | stsb | parquet | hub
    lines: int  # texts read, empty ones included
    empty: int  # dropped: empty after stripping
    duplicates: int  # dropped: seen before (in this source or an earlier one)
    kept: int


@dataclass(frozen=True)
class Corpus:
    sentences: list[str]
    sources: list[CorpusSource]

    def __len__(self) -> int:
        return len(self.sentences)

    @property
    def sha256(self) -> str:
        return sentences_sha256(self.sentences)

    def counts(self) -> dict:
        return {
            "sentences": len(self.sentences),
            "read": sum(s.lines for s in self.sources),
            "empty_dropped": sum(s.empty for s in self.sources),
            "duplicates_dropped": sum(s.duplicates for s in self.sources),
            "sources": [s.__dict__ for s in self.sources],
        }


def is_stsb(text: str) -> bool:
    """True for the STS-B layout: tab-separated, >= 7 columns, a number in column 5."""
    first = text.split("\n", 1)[0].split("\t")
    if len(first) < 7:
        return False
    try:
        float(first[4])
    except ValueError:
        return False
    return True


def _jsonl_texts(path: Path, text: str, field: str | None) -> list[str]:
    items = []
    for where, obj in jsonl_objects(path, text):
        key = field or next((k for k in TEXT_FIELDS if k in obj), None)
        if key is None or key not in obj:
            raise ValidationError(f"{where}: no {field or ' or '.join(TEXT_FIELDS)!r} field")
        value = obj[key]
        items.append("" if value is None else str(value))
    return items


def _table_texts(path: Path, text: str, delim: str, column: str | None) -> list[str]:
    """One column of a csv/tsv file: by header name, or by 0-based index (then every row is data)."""
    quoting = csv.QUOTE_MINIMAL if delim == "," else csv.QUOTE_NONE
    rows = list(csv.reader(io.StringIO(text), delimiter=delim, quoting=quoting))
    if not rows:
        return []
    if column is not None and column.isdigit():
        idx, body, start = int(column), rows, 1
    else:
        header = [c.strip() for c in rows[0]]
        name = column or next((c for c in TEXT_FIELDS if c in header), None)
        if name is None and len(header) == 1:
            name = header[0]
        if name is None or name not in header:
            raise ValidationError(
                f"{path}:1: no column {column or ' or '.join(TEXT_FIELDS)!r} in the header {header}; "
                "set the column name (or a 0-based index for files without a header)"
            )
        idx, body, start = header.index(name), rows[1:], 2
    out = []
    for lineno, row in enumerate(body, start):
        if not row:
            continue
        if idx >= len(row):
            raise ValidationError(f"{path}:{lineno}: row has {len(row)} columns, no column {idx}")
        out.append(row[idx])
    return out


def _parquet_texts(path: Path, column: str | None) -> list[str]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-not-found]
    except ImportError as e:
        raise ValidationError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from e
    table = pq.read_table(str(path))
    name = column or next((c for c in TEXT_FIELDS if c in table.column_names), None)
    if name is None or name not in table.column_names:
        raise ValidationError(f"{path}: no column {column or ' or '.join(TEXT_FIELDS)!r}; columns: {table.column_names}")
    return ["" if v is None else str(v) for v in table.column(name).to_pylist()]


def corpus_texts(path: str | Path, *, field: str | None = None, column: str | None = None) -> tuple[str, list[str]]:
    """``(kind, texts)`` of one corpus file, raw: empty and repeated texts are kept.

    txt: one text a line; jsonl: ``field`` (default: the first of text, sentence, ...);
    csv/tsv: ``column`` (header name or 0-based index); STS-B files: both sentences of every pair.
    """
    path = Path(path).expanduser()
    suffix = _base_suffix(path)
    if suffix == ".parquet":
        return "parquet", _parquet_texts(path, column)
    text = _open_text(path)
    if suffix == ".jsonl":
        return "jsonl", _jsonl_texts(path, text, field)
    if suffix in (".csv", ".tsv") and column is None and is_stsb(text):
        pairs = _sts_stsb(path, text)
        return "stsb", [s for s1, s2, _ in pairs for s in (s1, s2)]
    if suffix in (".csv", ".tsv"):
        first = text.split("\n", 1)[0]
        delim = "\t" if (suffix == ".tsv" or "\t" in first) else ","
        return suffix[1:], _table_texts(path, text, delim, column)
    return "txt", text.splitlines()


def _hub_dataset_files(dataset_id: str) -> list[Path]:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError, RepositoryNotFoundError

    from espresso_export.core.errors import OfflineError

    try:
        folder = Path(snapshot_download(dataset_id, repo_type="dataset", allow_patterns=_HUB_DATA_PATTERNS))
    except (HFValidationError, RepositoryNotFoundError) as e:
        raise NotFoundError(f"dataset not found on the Hub: {dataset_id!r}") from e
    except LocalEntryNotFoundError as e:
        raise OfflineError(f"cannot download the dataset {dataset_id!r}: the Hugging Face Hub is unreachable "
                           "(offline?); pass local corpus files instead") from e
    except OSError as e:
        raise OfflineError(f"cannot download the dataset {dataset_id!r}: {e.__class__.__name__}") from e
    files = sorted(p for p in folder.rglob("*") if p.is_file() and _base_suffix(p) in _CORPUS_SUFFIXES)
    if not files:
        raise ValidationError(f"dataset {dataset_id!r} has no txt/jsonl/csv/tsv/parquet files")
    return files


def read_corpus(specs, *, field: str | None = None, column: str | None = None) -> Corpus:
    """Distinct non-empty sentences from one or more corpus specs, in order, with per-source counts.

    A spec is a file (txt, jsonl, csv, tsv, STS-B, parquet; optionally gzipped), ``builtin``
    (the shipped calibration corpus), or ``hf://owner/name`` (a Hub dataset; needs the network).
    """
    if isinstance(specs, (str, Path)):
        specs = [specs]
    specs = [str(s) for s in specs]
    if not specs:
        raise ValidationError("no corpus given")
    seen: set[str] = set()
    sentences: list[str] = []
    sources: list[CorpusSource] = []
    for spec in specs:
        if spec == BUILTIN:
            parts = [("txt", builtin_resource("calibration.txt").read_text(encoding="utf-8").splitlines())]
        elif spec.startswith(HUB_PREFIX):
            parts = [corpus_texts(f, field=field, column=column) for f in _hub_dataset_files(spec[len(HUB_PREFIX):])]
        else:
            parts = [corpus_texts(spec, field=field, column=column)]
        kind = "hub" if spec.startswith(HUB_PREFIX) else parts[0][0]
        lines = empty = dups = 0
        for _, texts in parts:
            for raw in texts:
                lines += 1
                s = raw.strip()
                if not s:
                    empty += 1
                elif s in seen:
                    dups += 1
                else:
                    seen.add(s)
                    sentences.append(s)
        sources.append(CorpusSource(spec=spec, kind=kind, lines=lines, empty=empty, duplicates=dups,
                                    kept=lines - empty - dups))
    if not sentences:
        raise ValidationError(f"the corpus is empty: no non-empty sentences in {', '.join(specs)}")
    return Corpus(sentences=sentences, sources=sources)


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


def _beir_texts(path: Path, *, with_title: bool) -> tuple[list[str], list[str]]:
    ids: list[str] = []
    texts: list[str] = []
    seen: set[str] = set()
    for where, obj in jsonl_objects(path, _open_text(path)):
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
