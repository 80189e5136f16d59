"""Sentences: distillation corpora, calibration sets and vocabulary-pruning corpora, read one way.

A spec is a file (``.txt`` one text a line; ``.jsonl`` a text field, with a record's ``title`` in front of
its ``text`` as retrieval embeds BEIR documents; ``.csv``/``.tsv`` a column; STS-B files both sentences of
every pair; ``.parquet`` a column; gzip for any but parquet), ``builtin`` (the shipped calibration corpus) or a
Hub dataset (:mod:`espresso_export.data.hub_datasets`). :func:`read_corpus` merges
specs with per-source counts; :func:`read_sentences` reads one (``shrink
--calibration``). Both keep the distinct non-empty stripped texts in order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from espresso_export.core.errors import ValidationError
from espresso_export.core.extras import require
from espresso_export.data.files import (
    BUILTIN,
    base_suffix,
    builtin_resource,
    jsonl_objects,
    open_text,
    sniff_delimiter,
    table_rows,
    text_lines,
    text_value,
    titled,
)
from espresso_export.data.hub_datasets import (
    HubDataset,
    hub_dataset,
    hub_files,
    hub_split,
)
from espresso_export.data.sts_sets import is_stsb, stsb_rows

TEXT_FIELDS = ("text", "sentence", "sentence1", "query", "premise")
NAMED_KINDS = ("jsonl", "csv", "tsv", "parquet", "hub")  # sources whose text is a named field or column


def sentences_sha256(sentences: list[str]) -> str:
    return hashlib.sha256("\n".join(sentences).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CorpusSource:
    """What one ``--corpus`` spec contributed."""

    spec: str
    kind: str  # txt | jsonl | csv | tsv | stsb | parquet | hub
    lines: int  # texts read, empty ones included
    empty: int  # dropped: empty after stripping
    duplicates: int  # dropped: seen before (in this source or an earlier one)
    kept: int
    weight: float | None = None  # the share of the training mix asked for (``spec:0.3``), or None


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


class NotInSource(ValidationError):
    """The field or column named is not in this source (its first record or its header lacks it)."""


def _jsonl_texts(path: Path, text: str, field: str | None) -> list[str]:
    items = []
    for where, obj in jsonl_objects(path, text):
        key = field or next((k for k in TEXT_FIELDS if k in obj), None)
        if key is None or key not in obj:
            error = NotInSource if field is not None and not items else ValidationError
            raise error(f"{where}: no {field or ' or '.join(TEXT_FIELDS)!r} field (the record has: "
                        f"{', '.join(map(str, obj)) or 'nothing'}; name the text's field with {path.name}#FIELD, or "
                        "--corpus-field / corpus_field: in a recipe)")
        value = text_value(obj[key], where, key)  # null: an empty text, dropped and counted; NaN, 12, [..]: refused
        # a document's title goes in front of its text, as verify embeds BEIR documents: for the field the user
        # named too (`--corpus-field body` dropped the title)
        with_title = (key == "text" or field is not None) and key != "title" and "title" in obj
        items.append(titled(obj, value, where) if with_title else value)
    return items


def _table_texts(path: Path, text: str, delim: str, column: str | None) -> list[str]:
    """One column of a csv/tsv file: by header name, or by 0-based index (then every row is data)."""
    rows = list(table_rows(text, delim))
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
            raise (ValidationError if column is None else NotInSource)(
                f"{path}:1: no column {column or ' or '.join(TEXT_FIELDS)!r} in the header {header}; "
                f"set the column name ({path.name}#COLUMN, or --corpus-column; a 0-based index for files without "
                "a header)"
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
    require("parquet")
    import pyarrow.parquet as pq  # type: ignore[import-not-found]

    table = pq.read_table(str(path))
    name = column or next((c for c in TEXT_FIELDS if c in table.column_names), None)
    if name is None or name not in table.column_names:
        raise (ValidationError if column is None else NotInSource)(f"{path}: no column {column or ' or '.join(TEXT_FIELDS)!r}; columns: {table.column_names}")
    return [text_value(v, f"{path}: row {i}", name) for i, v in enumerate(table.column(name).to_pylist(), 1)]


def corpus_texts(path: str | Path, *, field: str | None = None, column: str | None = None) -> tuple[str, list[str]]:
    """``(kind, texts)`` of one corpus file, raw: empty and repeated texts are kept.

    txt: one text a line; jsonl: ``field`` (default: the first of text, sentence, ...; a ``text`` with a ``title``
    in its record is read as "title text", as retrieval embeds a BEIR document);
    csv/tsv: ``column`` (header name or 0-based index); STS-B files: both sentences of every pair. Either name
    serves for either kind (``field`` names a csv column when no ``column`` is given, and the other way round).
    """
    path = Path(path).expanduser()
    suffix = base_suffix(path)
    # a field and a column name the same thing: either option names a csv column or a jsonl field
    if suffix in (".csv", ".tsv", ".parquet"):
        column = column if column is not None else field
    elif suffix == ".jsonl":
        field = field if field is not None else column
    if suffix == ".parquet":
        return "parquet", _parquet_texts(path, column)
    text = open_text(path)
    if suffix == ".jsonl":
        return "jsonl", _jsonl_texts(path, text, field)
    if suffix in (".csv", ".tsv") and column is None and is_stsb(text):
        pairs = stsb_rows(path, text)
        return "stsb", [s for s1, s2, _ in pairs for s in (s1, s2)]
    if suffix in (".csv", ".tsv"):
        return suffix[1:], _table_texts(path, text, sniff_delimiter(path, text), column)
    return "txt", text_lines(text)


def _hub_split_texts(dataset: HubDataset, field: str | None, column: str | None) -> list[str]:
    names, rows = hub_split(dataset)
    name = field or column or next((c for c in TEXT_FIELDS if c in names), None)
    if name is None or name not in names:
        raise (ValidationError if field is None and column is None else NotInSource)(f"Hub dataset {dataset}: no column {name or ' or '.join(TEXT_FIELDS)!r}; "
                              f"columns: {', '.join(names)}")
    return [text_value(row[name], f"Hub dataset {dataset}: row {i}", name) for i, row in enumerate(rows, 1)]


def _spec_texts(spec: str, field: str | None, column: str | None) -> tuple[str, list[str]]:
    """``(kind, texts)`` of one spec, raw: a file, ``builtin``, or a Hub dataset (all its files, or one split)."""
    if spec == BUILTIN:
        return corpus_texts(builtin_resource("calibration.txt"))
    dataset = hub_dataset(spec)
    if dataset is None:
        return corpus_texts(spec, field=field, column=column)
    if dataset.split is not None:
        return "hub", _hub_split_texts(dataset, field, column)
    return "hub", [t for f in hub_files(dataset) for t in corpus_texts(f, field=field, column=column)[1]]


def split_weight(spec: str) -> tuple[str, float | None]:
    """``("a.jsonl", 0.7)`` for ``a.jsonl:0.7`` (a share of the training mix); ``(spec, None)`` without one, or
    when the whole spec is an existing file."""
    head, sep, tail = spec.rpartition(":")
    if not sep or not head or Path(spec).expanduser().exists():
        return spec, None
    try:
        weight = float(tail)
    except ValueError:
        return spec, None  # hf://owner/name:split
    if not weight > 0 or weight == float("inf"):
        raise ValidationError(f"--corpus {spec}: the share after ':' must be a positive number, got {tail!r}")
    return head, weight


def split_source(spec: str) -> tuple[str, str | None, float | None]:
    """``("docs.jsonl", "body", 0.7)`` for ``docs.jsonl#body:0.7``: a source, the jsonl field or csv column it
    names for itself after ``#`` (or ``None``), and its share of the mix (or ``None``)."""
    rest, weight = split_weight(spec)
    head, sep, name = rest.rpartition("#")
    if not sep or not head or not name or "/" in name or Path(rest).expanduser().exists():
        return rest, None, weight
    return head, name, weight


def source_path(spec: str) -> tuple[str, str]:
    """The file part of a corpus spec and what follows it (``#FIELD``, ``:SHARE``): a recipe resolves the path
    alone."""
    path, name, weight = split_source(spec)
    return path, (f"#{name}" if name else "") + (f":{weight:g}" if weight is not None else "")


def _source_texts(spec: str, own: str | None, field: str | None, column: str | None):
    """``(kind, texts, fits)`` of one source (``fits``: True, or the :class:`NotInSource` error): its own field (``SPEC#FIELD``) if it names one, else the global
    ``field``/``column`` where the source has it (``fits``), else the source's default reading (an STS-B file's
    pairs, a jsonl's ``text``): one ``--corpus-field`` does not break the other sources of a mix."""
    if own is not None:
        return (*_spec_texts(spec, own, own), True)
    if field is None and column is None:
        return (*_spec_texts(spec, None, None), True)
    try:
        return (*_spec_texts(spec, field, column), True)
    except NotInSource as e:
        kind, texts = _spec_texts(spec, None, None)
        return kind, texts, e


def _keep_new(texts: Iterable[str], seen: set[str], sentences: list[str]) -> tuple[int, int, int]:
    """Append the stripped, non-empty texts not in ``seen`` to ``sentences``; ``(read, empty, duplicates)``."""
    lines = empty = dups = 0
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
    return lines, empty, dups


def read_corpus(specs, *, field: str | None = None, column: str | None = None) -> Corpus:
    """Distinct non-empty sentences from one or more corpus specs, in order, with per-source counts.

    A spec is a file (txt, jsonl, csv, tsv, STS-B, parquet; optionally gzipped), ``builtin``
    (the shipped calibration corpus), or ``hf://owner/name[:split]`` (a Hub dataset; needs the network);
    ``spec:0.3`` asks for that share of a training mix (:attr:`CorpusSource.weight`; distill applies it);
    ``spec#NAME`` reads that jsonl field or csv column of this source. ``field``/``column`` apply to the sources
    that have them and name none of their own; a name no source has is an error.
    """
    if isinstance(specs, (str, Path)):
        specs = [specs]
    specs = [str(s) for s in specs]
    if not specs:
        raise ValidationError("no corpus given")
    seen: set[str] = set()
    sentences: list[str] = []
    sources: list[CorpusSource] = []
    misfits: list[NotInSource] = []  # sources without the global --corpus-field/--corpus-column
    fitted = False
    for given in specs:
        spec, own, weight = split_source(given)
        kind, texts, fits = _source_texts(spec, own, field, column)
        if fits is not True:
            misfits.append(fits)
        fitted = fitted or (fits is True and own is None and kind in NAMED_KINDS)
        lines, empty, dups = _keep_new(texts, seen, sentences)
        sources.append(CorpusSource(spec=spec, kind=kind, lines=lines, empty=empty, duplicates=dups,
                                    kept=lines - empty - dups, weight=weight))
    if misfits and not fitted:
        raise misfits[0]  # the name fits no source: a typo, not a mix
    if not sentences:
        raise ValidationError(f"the corpus is empty: no non-empty sentences in {', '.join(specs)}")
    return Corpus(sentences=sentences, sources=sources)


def read_sentences(path: str | Path, *, field: str | None = None, column: str | None = None) -> list[str]:
    """Distinct non-empty sentences of one spec, in file order (a calibration set); read like any corpus."""
    spec = str(path)
    _, texts = _spec_texts(spec, field, column)
    sentences: list[str] = []
    _keep_new(texts, set(), sentences)
    if not sentences:
        where = builtin_resource("calibration.txt") if spec == BUILTIN else Path(spec)
        raise ValidationError(f"{where} has no sentences (empty file)")
    return sentences
