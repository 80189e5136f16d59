"""Scored sentence pairs (STS): STS-B files, csv/tsv/jsonl files with named columns, Hub splits.

STS-B files are tab-separated with the score in column 5 and the sentences in
columns 6-7 (rows with extra trailing columns are tolerated); :func:`is_stsb`
is the one test for that layout, used by every reader that accepts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from espresso_export.core.errors import ValidationError
from espresso_export.data.files import (
    BUILTIN,
    base_suffix,
    builtin_resource,
    jsonl_objects,
    open_text,
    parse_score,
    sniff_delimiter,
    table_rows,
    text_lines,
)
from espresso_export.data.hub_datasets import HubDataset, hub_split

DEFAULT_COLUMNS = ("sentence1", "sentence2", "score")


@dataclass(frozen=True)
class StsPairs:
    name: str
    sentence1: list[str]
    sentence2: list[str]
    scores: list[float]

    def __len__(self) -> int:
        return len(self.scores)


def is_stsb(text: str) -> bool:
    """True for the STS-B layout (judged on the first line): tab-separated, >= 7 columns, a number in column 5."""
    first = text.split("\n", 1)[0].split("\t")
    if len(first) < 7:
        return False
    try:
        float(first[4])
    except ValueError:
        return False
    return True


def read_sts(
    path: str | Path,
    *,
    columns: tuple[str, str, str] = DEFAULT_COLUMNS,
    limit: int | None = None,
) -> StsPairs:
    """Scored sentence pairs from an STS-B file or a csv/tsv/jsonl file with named columns."""
    if str(path) == BUILTIN:
        path = builtin_resource("sts_smoke.tsv")
    path = Path(path)
    text = open_text(path)
    if base_suffix(path) == ".jsonl":
        rows = _sts_jsonl(path, text, columns)
    else:
        delim = sniff_delimiter(path, text)
        header = [c.strip() for c in text.split("\n", 1)[0].split(delim)]
        if all(c in header for c in columns):
            rows = _sts_named(path, text, delim, columns)
        elif delim == "\t":
            rows = stsb_rows(path, text)
        else:
            raise ValidationError(f"{path}:1: header must name the columns {', '.join(columns)}")
    return _pairs(path.name, rows, limit, where=f"{path}:")


def _pairs(name: str, rows: list[tuple[str, str, float]], limit: int | None, *, where: str) -> StsPairs:
    if limit is not None:
        rows = rows[:limit]
    if len(rows) < 2:
        raise ValidationError(f"{where} needs at least 2 scored pairs, found {len(rows)}")
    s1, s2, sc = zip(*rows)
    return check_scores(StsPairs(name=name, sentence1=list(s1), sentence2=list(s2), scores=list(sc)), where)


def spread_subset(pairs: StsPairs, limit: int | None, option: str = "--sts-limit") -> StsPairs:
    """``limit`` pairs taken evenly over the whole set (files are often sorted by genre or score): verify's
    ``--sts-limit`` and training's ``--eval-limit`` (which took the first pairs: STS-B dev's first 500 gave the
    teacher 92.57)."""
    n = len(pairs)
    if limit is None or limit >= n:
        return pairs
    if limit < 2:
        raise ValidationError(f"{option} must be at least 2, got {limit}")
    idx = [i * n // limit for i in range(limit)]
    return StsPairs(name=pairs.name, sentence1=[pairs.sentence1[i] for i in idx],
                    sentence2=[pairs.sentence2[i] for i in idx], scores=[pairs.scores[i] for i in idx])


def check_scores(pairs: StsPairs, where: str) -> StsPairs:
    """Refuse a set whose scores are all equal: Spearman's correlation is undefined on it (not a failed model)."""
    if len(set(pairs.scores)) < 2:
        raise ValidationError(f"{where} every pair has the score {pairs.scores[0]:g}: an STS set needs different "
                              "scores to rank (Spearman's correlation is undefined otherwise)")
    return pairs


def stsb_rows(path: Path, text: str) -> list[tuple[str, str, float]]:
    """STS-B rows: genre, file, year, id, score, sentence1, sentence2[, extra, extra]."""
    rows = []
    for lineno, line in enumerate(text_lines(text), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        where = f"{path}:{lineno}"
        if len(parts) < 7:
            raise ValidationError(f"{where}: expected at least 7 tab-separated columns (STS-B format), found {len(parts)}")
        score = parse_score(parts[4], where)
        s1, s2 = parts[5].strip(), parts[6].strip()
        if not s1 or not s2:
            raise ValidationError(f"{where}: empty sentence")
        rows.append((s1, s2, score))
    return rows


def _sts_named(path: Path, text: str, delim: str, columns) -> list[tuple[str, str, float]]:
    c1, c2, cs = columns
    rows = []
    for lineno, row in enumerate(table_rows(text, delim, header=True), 2):
        if not any((v or "").strip() for v in row.values()):
            continue
        where = f"{path}:{lineno}"
        if row.get(c1) is None or row.get(c2) is None or row.get(cs) is None:
            raise ValidationError(f"{where}: missing a value for {c1}, {c2} or {cs}")
        rows.append((row[c1].strip(), row[c2].strip(), parse_score(row[cs], where)))
    return rows


def _sts_jsonl(path: Path, text: str, columns) -> list[tuple[str, str, float]]:
    c1, c2, cs = columns
    rows = []
    for where, obj in jsonl_objects(path, text):
        missing = [c for c in columns if c not in obj]
        if missing:
            raise ValidationError(f"{where}: missing field(s) {', '.join(missing)}")
        rows.append((str(obj[c1]), str(obj[c2]), parse_score(str(obj[cs]), where)))
    return rows


def read_hub_sts(dataset: HubDataset, columns: tuple[str, str, str] = DEFAULT_COLUMNS) -> StsPairs:
    """Scored pairs from one split of a Hub dataset (default split: test)."""
    dataset = dataset.with_default_split("test")
    names, rows = hub_split(dataset)
    missing = [c for c in columns if c not in names]
    if missing:
        raise ValidationError(f"Hub dataset {dataset} has no column(s) {', '.join(missing)} "
                              f"(columns: {', '.join(names)}); set --sts-columns")
    c1, c2, cs = columns
    out = []
    for i, row in enumerate(rows):
        a, b = str(row[c1] or "").strip(), str(row[c2] or "").strip()
        if not a or not b:
            raise ValidationError(f"Hub dataset {dataset} row {i}: empty sentence")
        out.append((a, b, float(row[cs])))
    return _pairs(str(dataset), out, None, where=f"Hub dataset {dataset}")
