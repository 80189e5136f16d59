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
