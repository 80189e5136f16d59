"""STS evaluation: Spearman x100 of cosine similarity vs gold scores, on one or several sets.

A set spec is ``builtin`` (the shipped smoke set), a file (STS-B rows or a
csv/tsv/jsonl with named columns, see :func:`espresso_export.data.read_sts`) or
a Hub dataset id ``owner/name[:split]`` (online, needs the ``datasets`` package).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from espresso_export.data.readers import BUILTIN, StsPairs, read_sts
from espresso_export.core.errors import NotFoundError, OfflineError, ValidationError
from espresso_export.core.metrics import sts_spearman
from espresso_export.verification.embedders import EncodeCache

DEFAULT_COLUMNS = ("sentence1", "sentence2", "score")
SMOKE_NOTE = (
    "'builtin' is a smoke set of {n} hand-written pairs shipped with espresso-export: it shows the model still "
    "works offline; it is NOT a benchmark. Report numbers on STS-B or your own data (--sts FILE)."
)
_FILE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".txt", ".gz")


@dataclass(frozen=True)
class StsSet:
    spec: str  # as given by the user
    kind: str  # "builtin", "file" or "hub"
    pairs: StsPairs

    @property
    def name(self) -> str:
        return "builtin (smoke set)" if self.smoke else self.pairs.name

    @property
    def smoke(self) -> bool:
        return self.kind == "builtin"

    def sentences(self) -> list[str]:
        return list(dict.fromkeys(self.pairs.sentence1 + self.pairs.sentence2))


def parse_columns(text: str | None) -> tuple[str, str, str]:
    """``"s1,s2,label"`` -> the three column names (sentence 1, sentence 2, score)."""
    if not text:
        return DEFAULT_COLUMNS
    names = tuple(c.strip() for c in text.split(","))
    if len(names) != 3 or not all(names):
        raise ValidationError(f"--sts-columns needs three comma-separated names (sentence1,sentence2,score), got {text!r}")
    return names  # type: ignore[return-value]


def _looks_like_hub_id(spec: str) -> bool:
    name = spec.split(":", 1)[0]
    return (
        name.count("/") == 1
        and not name.startswith((".", "/", "~"))
        and not name.lower().endswith(_FILE_SUFFIXES)
        and all(part for part in name.split("/"))
    )


def load_sts(spec: str | os.PathLike, *, columns: tuple[str, str, str] = DEFAULT_COLUMNS,
             limit: int | None = None) -> StsSet:
    """Read one ``--sts`` spec; ``limit`` keeps that many pairs spread evenly over the set."""
    text = str(spec)
    path = Path(text).expanduser()
    if text == BUILTIN:
        kind, pairs = "builtin", read_sts(BUILTIN)
    elif path.exists():
        kind, pairs = "file", read_sts(path, columns=columns)
    elif _looks_like_hub_id(text):
        kind, pairs = "hub", _read_hub(text, columns)
    else:
        raise NotFoundError(f"STS set not found: no file {text!r} (use a file, 'builtin', or a Hub dataset id owner/name[:split])")
    return StsSet(text, kind, spread_subset(pairs, limit))


def spread_subset(pairs: StsPairs, limit: int | None) -> StsPairs:
    """``limit`` pairs taken evenly over the whole set (files are often sorted by genre or score)."""
    n = len(pairs)
    if limit is None or limit >= n:
        return pairs
    if limit < 2:
        raise ValidationError(f"--sts-limit must be at least 2, got {limit}")
    idx = [i * n // limit for i in range(limit)]
    return StsPairs(name=pairs.name, sentence1=[pairs.sentence1[i] for i in idx],
                    sentence2=[pairs.sentence2[i] for i in idx], scores=[pairs.scores[i] for i in idx])


def _read_hub(spec: str, columns: tuple[str, str, str]) -> StsPairs:
    name, _, split = spec.partition(":")
    split = split or "test"
    try:
        import datasets
    except ImportError as e:
        raise ValidationError(
            f"--sts {spec!r} is not a local file; reading a Hub dataset needs the `datasets` package "
            "(pip install datasets) and network access. Or download the set and pass the file."
        ) from e
    try:
        ds = datasets.load_dataset(name, split=split)
    except ConnectionError as e:
        raise OfflineError(f"cannot download the Hub dataset {name!r}: the Hub is unreachable (offline?)") from e
    except (FileNotFoundError, ValueError, OSError) as e:
        raise NotFoundError(f"cannot load the Hub dataset {name!r} (split {split!r}): {str(e).splitlines()[0]}") from e
    missing = [c for c in columns if c not in ds.column_names]
    if missing:
        raise ValidationError(f"Hub dataset {name}:{split} has no column(s) {', '.join(missing)} "
                              f"(columns: {', '.join(ds.column_names)}); set --sts-columns")
    c1, c2, cs = columns
    s1, s2, scores = [], [], []
    for i, row in enumerate(ds):
        a, b = str(row[c1] or "").strip(), str(row[c2] or "").strip()
        if not a or not b:
            raise ValidationError(f"Hub dataset {name}:{split} row {i}: empty sentence")
        s1.append(a)
        s2.append(b)
        scores.append(float(row[cs]))
    if len(scores) < 2:
        raise ValidationError(f"Hub dataset {name}:{split} needs at least 2 scored pairs, found {len(scores)}")
    return StsPairs(name=f"{name}:{split}", sentence1=s1, sentence2=s2, scores=scores)


def sts_score(cache: EncodeCache, sts: StsSet) -> float:
    """Spearman x100 between the cosine of each pair's embeddings and the gold scores."""
    emb1 = cache.encode(sts.pairs.sentence1)
    emb2 = cache.encode(sts.pairs.sentence2)
    return sts_spearman(emb1, emb2, sts.pairs.scores)


def retention(candidate: float | None, source: float | None) -> float | None:
    """``candidate / source``; None when the source score is not positive (a ratio would mislead)."""
    if candidate is None or source is None or source <= 0:
        return None
    return candidate / source
