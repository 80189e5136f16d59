"""STS evaluation: Spearman x100 of cosine similarity vs gold scores, on one or several sets.

A set spec is ``builtin`` (the shipped smoke set), a file (STS-B rows or a
csv/tsv/jsonl with named columns, see :func:`espresso_export.data.read_sts`) or
a Hub dataset ``owner/name[:split]`` or ``hf://owner/name[:split]`` (online, needs the ``datasets``
package; see :mod:`espresso_export.data.hub_datasets`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from espresso_export.core.errors import NotFoundError, ValidationError
from espresso_export.core.metrics import cosine_rows
from espresso_export.data import (
    BUILTIN, DEFAULT_COLUMNS, StsPairs, check_scores, hub_dataset, read_hub_sts, read_sts, spread_subset,
)
from espresso_export.verification.embedders import EncodeCache

SMOKE_NOTE = (
    "'builtin' is a smoke set of {n} hand-written pairs shipped with espresso-export: it shows the model still "
    "works offline; it is NOT a benchmark. Report numbers on STS-B or your own data (--sts FILE)."
)


@dataclass(frozen=True)
class StsSet:
    spec: str  # as given by the user
    kind: str  # "builtin", "file" or "hub"
    pairs: StsPairs
    subset_of: int | None = None  # the set's size when --sts-limit kept fewer pairs

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


def load_sts(spec: str | os.PathLike, *, columns: tuple[str, str, str] = DEFAULT_COLUMNS,
             limit: int | None = None) -> StsSet:
    """Read one ``--sts`` spec; ``limit`` keeps that many pairs spread evenly over the set."""
    text = str(spec)
    path = Path(text).expanduser()
    if text == BUILTIN:
        kind, pairs = "builtin", read_sts(BUILTIN)
    elif path.exists():
        kind, pairs = "file", read_sts(path, columns=columns)
    elif (dataset := hub_dataset(text)) is not None:
        kind, pairs = "hub", read_hub_sts(dataset, columns)
    else:
        raise NotFoundError(f"STS set not found: no file {text!r} (use a file, 'builtin', or a Hub dataset id owner/name[:split])")
    subset = spread_subset(pairs, limit)
    if subset is pairs:
        return StsSet(text, kind, pairs)
    return StsSet(text, kind, check_scores(subset, f"{text} (--sts-limit {limit}):"), subset_of=len(pairs))


def sts_cosines(cache: EncodeCache, sts: StsSet) -> np.ndarray:
    """The cosine of each pair's two embeddings."""
    return cosine_rows(cache.encode(sts.pairs.sentence1), cache.encode(sts.pairs.sentence2))


def retention(candidate: float | None, source: float | None) -> float | None:
    """``candidate / source``; None when the source score is not positive (a ratio would mislead), NaN when either
    score is not a finite number (a gate fails on it)."""
    if candidate is None or source is None:
        return None
    if not (math.isfinite(candidate) and math.isfinite(source)):
        return math.nan
    return None if source <= 0 else candidate / source
