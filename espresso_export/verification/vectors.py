"""The candidate's vectors in the forms a user may store them: a precision (float32, int8, uint8, binary,
ubinary) at a width (the full output, or its leading dimensions renormalised), searched with faiss
(:func:`espresso_export.runtime.precision.search_at`).

int8/uint8 need per-dimension ranges shared by documents and queries. An export folder that stores them for the
width (``export.json`` ``vector_calibration``) is measured with those, as its users' vectors are made; any
other candidate gets ranges fitted once per width on the calibration sentences' vectors. The report says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.vectors import l2_normalised
from espresso_export.runtime.precision import (
    BINARY,
    SCALAR,
    CalibrationRanges,
    PrecisionSearch,
    bytes_per_vector,
    search_at,
    truncate,
)
from espresso_export.verification.embedders import EncodeCache


@dataclass(frozen=True)
class Variant:
    """One stored form of the candidate's vectors."""

    precision: str
    dim: int
    rescore: int = 0  # binary: K x top-k by Hamming distance, re-ranked with the float query

    @property
    def label(self) -> str:
        return f"{self.precision} {self.dim}-d" + (f" +rescore {self.rescore}x" if self.rescore else "")

    @property
    def bytes_per_vector(self) -> int:
        return bytes_per_vector(self.precision, self.dim)

    def to_dict(self) -> dict:
        return {"precision": self.precision, "dim": self.dim, "rescore": self.rescore,
                "bytes_per_vector": self.bytes_per_vector}


def variants(precisions, dims, full: int, rescore: int) -> list[Variant]:
    """float32 at the full width first (the candidate as measured everywhere else), then every precision at
    every width; a binary precision with ``rescore`` both without and with rescoring."""
    for d in dims:
        if d > full:
            raise ValidationError(f"--dims {d} is wider than the candidate's {full}-d vectors")
    out = [Variant("float32", full)]
    for dim in dict.fromkeys([full, *dims]):
        for p in dict.fromkeys(["float32", *precisions]):
            out.append(Variant(p, dim))
            if p in BINARY and rescore:
                out.append(Variant(p, dim, rescore))
    return list(dict.fromkeys(out))


def unit(x: np.ndarray, similarity: str = "cosine") -> np.ndarray:
    """Rows as the model's users compare them: unit length for cosine, as they are for a dot-product model."""
    return np.ascontiguousarray(x, dtype=np.float32) if similarity == "dot" else l2_normalised(x)


def at_width(x: np.ndarray, dim: int) -> np.ndarray:
    """The first ``dim`` dimensions renormalised; the full width is the vectors as they are."""
    return x if dim == x.shape[1] else truncate(x, dim)


def export_ranges(path: Path | None) -> dict[int, CalibrationRanges]:
    """The int8 ranges an export folder stores per width (``export.json`` ``vector_calibration``); none for a
    checkpoint or an export without them."""
    import json

    if path is None or not (Path(path) / "export.json").is_file():
        return {}
    try:
        stored = json.loads((Path(path) / "export.json").read_text(encoding="utf-8")).get("vector_calibration")
    except (OSError, ValueError):
        return {}
    if not isinstance(stored, dict):
        return {}
    return {int(width): CalibrationRanges.from_dict(obj) for width, obj in stored.items() if str(width).isdigit()}


class VectorForms:
    """Searches with the candidate's vectors at each :class:`Variant`, the int8 ranges found or fitted once per
    width."""

    def __init__(self, cache: EncodeCache, *, calibration: str | None, samples: int, seed: int) -> None:
        self.cache = cache
        self.calibration, self.samples, self.seed = calibration, samples, seed
        self.similarity = cache.embedder.usage.similarity
        self.stored = export_ranges(cache.embedder.path if cache.embedder.kind != "pytorch" else None)
        self._ranges: dict[int, CalibrationRanges] = {}
        self.origins: dict[int, str] = {}  # width -> where its ranges came from
        self._calibration_vectors: np.ndarray | None = None

    def ranges(self, dim: int) -> CalibrationRanges:
        if dim not in self._ranges:
            if dim in self.stored:
                self._ranges[dim] = self.stored[dim]
                self.origins[dim] = "export.json (vector_calibration)"
            else:
                self._ranges[dim] = CalibrationRanges.fit(at_width(self._calibrated(), dim))
                self.origins[dim] = (f"fitted on {self._ranges[dim].samples} calibration sentences "
                                     f"({self.calibration or 'builtin'})")
        return self._ranges[dim]

    def _calibrated(self) -> np.ndarray:
        if self._calibration_vectors is None:
            from espresso_export.shrinking.shrink import load_calibration

            sentences, _ = load_calibration(self.calibration, self.samples, self.seed)
            self._calibration_vectors = unit(self.cache.encode(sentences), self.similarity)
        return self._calibration_vectors

    def search(self, queries: np.ndarray, docs: np.ndarray, k: int, variant: Variant, *,
               exclude=None) -> PrecisionSearch:
        """``queries`` and ``docs`` (the candidate's vectors at their full width, as the model's users compare
        them) stored as ``variant`` and searched: the best ``k`` of each query."""
        q, d = at_width(queries, variant.dim), at_width(docs, variant.dim)
        ranges = self.ranges(variant.dim) if variant.precision in SCALAR else None
        return search_at(q, d, k, precision=variant.precision, ranges=ranges,
                         rescore_factor=variant.rescore, exclude=exclude)

    def ranges_info(self) -> dict[str, str]:
        return {str(dim): origin for dim, origin in sorted(self.origins.items(), reverse=True)}
