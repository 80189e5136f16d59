"""Training pairs: anchor/positive pairs, triplets with a hard negative, NLI rows turned into triplets.

* :func:`read_pairs` reads jsonl/csv/tsv pair files (ESE, contrastive training);
* :func:`read_training_data` picks scored pairs (:func:`~espresso_export.data.sts_sets.read_sts`) or
  pairs by the file's content;
* :func:`read_sentence_pairs` reduces any of these files to distinct sentence pairs (pair distillation).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from espresso_export.core.errors import ValidationError
from espresso_export.data.files import (
    BUILTIN,
    base_suffix,
    jsonl_objects,
    open_text,
    sniff_delimiter,
    table_rows,
    text_lines,
)
from espresso_export.data.sts_sets import StsPairs, is_stsb, read_sts

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
    table = [r for r in table_rows(text, delim) if any(c.strip() for c in r)]
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
    text = open_text(path)
    if base_suffix(path) == ".jsonl":
        rows, nli = _pair_rows_jsonl(path, text)
    else:
        rows, nli = _pair_rows_table(path, text, sniff_delimiter(path, text))
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
    text = open_text(path)
    first = next((line for line in text_lines(text) if line.strip()), "")
    if base_suffix(path) == ".jsonl":
        return any("score" in obj for _, obj in jsonl_objects(path, first))
    cells = first.split(sniff_delimiter(path, first))
    return "score" in [c.strip().lower() for c in cells] or is_stsb(first)


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

