"""Output-vector precision: float32, int8, uint8, binary, ubinary; nested widths; search at each precision.

The precision names and the numbers they produce are sentence-transformers' ``quantize_embeddings``: int8/uint8
are 256 buckets per dimension between a calibration minimum and maximum (``floor((x - min) / step)``, ``step =
(max - min) / 255``, clipped; int8 is the uint8 code minus 128), binary/ubinary are the signs packed 8 to a byte
(binary as int8 with the -128 offset). So vectors made here load into its ``semantic_search_faiss``, faiss and
vector databases, and theirs into ours. It is written out here, not imported: the runtime is torch-free
(sentence-transformers imports torch), and the code is a few lines of numpy.

int8 ranges are fitted once on calibration embeddings (:meth:`CalibrationRanges.fit`) and stored with the export
(:meth:`~CalibrationRanges.to_dict`), so documents and queries are quantised alike; ranges fitted on each batch
would put the same text in different buckets from call to call.

Search uses faiss's own indexes: exact inner product (``IndexFlatIP``) for float32, the 8-bit scalar quantiser
(``IndexScalarQuantizer``, ``QT_8bit``) for int8/uint8, Hamming distance (``IndexBinaryFlat``) for binary.
The scalar quantiser is given the stored ranges and the stored codes as they are (its 8-bit codes are the same
buckets), so the index holds what a vector database would, 1 byte a dimension; a float query is scored against
each bucket's centre, which ranks as sentence-transformers' dequantised rescoring does (the half-bucket offset adds
the same constant to every document of a query). Binary search can be rescored: ``rescore`` x ``k`` candidates by
Hamming distance, re-ranked by the float query's inner product with the documents' bits (as
sentence-transformers does) or with their int8/float vectors when given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.extras import require
from espresso_export.core.vectors import l2_normalised

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
SCALAR = ("int8", "uint8")
BINARY = ("binary", "ubinary")
SEARCH_BATCH = 1024  # queries searched at once: the score matrix stays batch x corpus
RESCORE_FLOATS = 8_000_000  # document values gathered at once for rescoring (32 MB)


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValidationError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    return precision


def bytes_per_vector(precision: str, dim: int) -> int:
    """Bytes one ``dim``-wide vector takes at ``precision`` (binary: the bits rounded up to whole bytes)."""
    check_precision(precision)
    if precision == "float32":
        return 4 * dim
    return dim if precision in SCALAR else (dim + 7) // 8


def truncate(embeddings: np.ndarray, dim: int) -> np.ndarray:
    """The first ``dim`` dimensions, renormalised to unit length: a nested width of a PCA head (whose leading
    components are the PCA fitted at that width) or of a Matryoshka-trained model."""
    x = np.asarray(embeddings, dtype=np.float32)
    if x.ndim != 2 or not 1 <= dim <= x.shape[1]:
        raise ValidationError(f"cannot truncate {x.shape[-1]}-d vectors to {dim} dims (1 to {x.shape[-1]})")
    return l2_normalised(x[:, :dim])


@dataclass(frozen=True)
class CalibrationRanges:
    """Per-dimension minimum and maximum of calibration embeddings: the int8/uint8 buckets (``(2, dim)``)."""

    ranges: np.ndarray  # float32, row 0 the minima, row 1 the maxima
    samples: int = 0  # embeddings they were fitted on (0: not known)

    @classmethod
    def fit(cls, embeddings: np.ndarray) -> CalibrationRanges:
        x = np.asarray(embeddings)
        if x.ndim != 2 or x.shape[0] < 2:
            raise ValidationError("int8 calibration needs at least 2 embeddings (a matrix of rows)")
        return cls(np.vstack((x.min(axis=0), x.max(axis=0))).astype(np.float32), int(x.shape[0]))

    @property
    def dim(self) -> int:
        return int(self.ranges.shape[1])

    def to_dict(self) -> dict:
        """JSON-ready: float32 values written as Python floats, which read back to the same float32 bits."""
        return {"ranges": [[float(v) for v in row] for row in self.ranges], "samples": self.samples}

    @classmethod
    def from_dict(cls, obj: dict) -> CalibrationRanges:
        try:
            ranges = np.asarray(obj["ranges"], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as e:
            raise ValidationError(f"int8 calibration ranges are malformed: {e}") from e
        if ranges.ndim != 2 or ranges.shape[0] != 2 or not np.isfinite(ranges).all():
            raise ValidationError("int8 calibration ranges must be two finite rows (minima, maxima)")
        return cls(ranges, int(obj.get("samples", 0)))


def _ranges_for(precision: str, ranges, dim: int) -> np.ndarray:
    if ranges is None:
        raise ValidationError(f"{precision} needs calibration ranges (CalibrationRanges.fit on calibration "
                              "embeddings), so that documents and queries share buckets")
    r = ranges.ranges if isinstance(ranges, CalibrationRanges) else np.asarray(ranges, dtype=np.float32)
    if r.shape != (2, dim):
        raise ValidationError(f"calibration ranges are for {r.shape[-1]} dims, the vectors have {dim}")
    return r


def _steps(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts = r[0, :]
    steps = (r[1, :] - starts) / 255
    return starts, np.where(steps == 0, 1, steps)


def quantize(embeddings: np.ndarray, precision: str, ranges: CalibrationRanges | np.ndarray | None = None):
    """``embeddings`` (float, ``(n, dim)``) at ``precision``, as sentence-transformers' ``quantize_embeddings``
    with the same ``ranges`` computes them (int8/uint8 need them; the other precisions ignore them)."""
    check_precision(precision)
    x = np.asarray(embeddings)
    if x.dtype in (np.int8, np.uint8):
        raise ValidationError("embeddings to quantise must be floats, not int8/uint8 codes")
    if precision == "float32":
        return x.astype(np.float32)
    if precision in SCALAR:
        starts, steps = _steps(_ranges_for(precision, ranges, x.shape[-1]))
        codes = np.clip(np.floor((x - starts) / steps), 0, 255)
        return codes.astype(np.uint8) if precision == "uint8" else (codes - 128).astype(np.int8)
    packed = np.packbits(x > 0, axis=-1)
    return packed if precision == "ubinary" else (packed - 128).astype(np.int8)


def dequantize(codes: np.ndarray, precision: str, ranges: CalibrationRanges | np.ndarray | None = None,
               dim: int | None = None) -> np.ndarray:
    """Float vectors back from codes: int8/uint8 at each bucket's lower edge (as sentence-transformers
    dequantises for rescoring); binary as 0/1 bits, the first ``dim`` of them (packing pads to whole bytes)."""
    check_precision(precision)
    c = np.asarray(codes)
    if precision == "float32":
        return c.astype(np.float32)
    if precision in SCALAR:
        starts, steps = _steps(_ranges_for(precision, ranges, c.shape[-1]))
        values = c.astype(np.float64) + (128 if precision == "int8" else 0)
        return (values * steps + starts).astype(np.float32)
    bits = np.unpackbits(_ubinary(c, precision), axis=-1)
    return bits[..., : (dim or bits.shape[-1])].astype(np.float32)


def _ubinary(codes: np.ndarray, precision: str) -> np.ndarray:
    """Packed bits as uint8 (binary's int8 codes undo their -128 offset)."""
    c = np.ascontiguousarray(codes)
    return c if precision == "ubinary" else (c.view(np.uint8) ^ 0x80)


def build_index(codes: np.ndarray, precision: str, ranges: CalibrationRanges | np.ndarray | None = None):
    """A faiss index holding documents stored at ``precision`` (``codes``: :func:`quantize`'s output)."""
    require("retrieval")
    import faiss

    check_precision(precision)
    c = np.ascontiguousarray(codes)
    if precision == "float32":
        index = faiss.IndexFlatIP(c.shape[1])
        index.add(c.astype(np.float32))
    elif precision in SCALAR:
        r = _ranges_for(precision, ranges, c.shape[1])
        index = faiss.IndexScalarQuantizer(c.shape[1], faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
        # QT_8bit's trained parameters: the minima, then the widths; its codes are the uint8 buckets
        faiss.copy_array_to_vector(np.concatenate([r[0], r[1] - r[0]]).astype(np.float32), index.sq.trained)
        index.is_trained = True
        uint8 = c.view(np.uint8) ^ 0x80 if precision == "int8" else c
        index.add_sa_codes(np.ascontiguousarray(uint8))
    else:
        index = faiss.IndexBinaryFlat(8 * c.shape[1])
        index.add(np.ascontiguousarray(_ubinary(c, precision)))
    return index


def _query_form(queries: np.ndarray, precision: str, ranges) -> np.ndarray:
    """What the index is searched with: float queries as they are (binary: their signs packed); queries
    already quantised to ``precision`` dequantised (int8/uint8) or as their bits (binary)."""
    q = np.asarray(queries)
    quantised = q.dtype in (np.int8, np.uint8)
    if precision in BINARY:
        return _ubinary(q, precision) if quantised else quantize(q, "ubinary")
    if quantised:
        return dequantize(q, precision, ranges)
    return np.ascontiguousarray(q, dtype=np.float32)


def _drop(ranked: np.ndarray, exclude: np.ndarray | None, k: int) -> np.ndarray:
    """Each row without its excluded position (the query's own passage), cut to ``k``; -1 pads."""
    if exclude is None:
        return ranked[:, :k]
    out = np.full((len(ranked), k), -1, dtype=np.int64)
    for i, (row, own) in enumerate(zip(ranked, exclude)):
        kept = row[(row != own) & (row >= 0)][:k]
        out[i, : len(kept)] = kept
    return out


def rescore(queries: np.ndarray, candidates: np.ndarray, docs: np.ndarray, k: int) -> np.ndarray:
    """The ``candidates`` (positions, -1 for none) of each query re-ranked by the float query's inner product
    with ``docs`` (float rows: bits, dequantised int8 or float32 vectors), the best ``k`` kept. The gathered
    rows go a few queries at a time (at most ``RESCORE_FLOATS`` floats): memory stays bounded."""
    q = np.asarray(queries, dtype=np.float32)
    d = np.asarray(docs, dtype=np.float32)
    if d.shape[1] != q.shape[1]:
        raise ValidationError(f"rescoring needs {q.shape[1]}-d document rows, got {d.shape[1]}-d")
    step = max(1, RESCORE_FLOATS // max(1, candidates.shape[1] * q.shape[1]))
    scores = np.empty(candidates.shape, dtype=np.float64)
    for i in range(0, len(q), step):
        part = candidates[i:i + step]
        scores[i:i + step] = np.einsum("ij,ikj->ik", q[i:i + step], d[np.where(part >= 0, part, 0)])
    scores[candidates < 0] = -np.inf
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(candidates, order, axis=1)


def search(index, queries: np.ndarray, k: int, *, precision: str = "float32",
           ranges: CalibrationRanges | np.ndarray | None = None, rescore_factor: int = 0,
           rescore_docs: np.ndarray | None = None, exclude=None, batch_size: int = SEARCH_BATCH) -> np.ndarray:
    """``(queries, k)`` document positions, best first (-1 pads), from :func:`build_index`'s ``index``.

    ``queries`` are floats (or codes at ``precision``). ``rescore_factor`` > 0 (binary): ``rescore_factor`` x
    ``k`` candidates by Hamming distance, re-ranked by the float query against ``rescore_docs`` (float rows
    of every document; default: the documents' bits). ``exclude[i]``: a position dropped from query i's
    results (its own passage; -1 for none). Queries go in batches of ``batch_size``: memory stays bounded.
    """
    check_precision(precision)
    q_all = np.asarray(queries)
    excl = None if exclude is None else np.asarray(exclude, dtype=np.int64)
    rescoring = rescore_factor > 0 and precision in BINARY and q_all.dtype not in (np.int8, np.uint8)
    wanted = min(k * (rescore_factor if rescoring else 1) + (0 if excl is None else 1), index.ntotal)
    if rescoring and rescore_docs is None:
        rescore_docs = _index_bits(index)[:, : q_all.shape[1]]
    out = []
    for start in range(0, len(q_all), batch_size):
        q = q_all[start:start + batch_size]
        _, ranked = index.search(_query_form(q, precision, ranges), wanted)
        if rescoring:
            ranked = rescore(q, ranked, rescore_docs, wanted)
        out.append(_drop(ranked.astype(np.int64), None if excl is None else excl[start:start + batch_size], k))
    if not out:
        return np.zeros((0, k), dtype=np.int64)
    result = np.concatenate(out)
    if result.shape[1] < k:
        result = np.pad(result, ((0, 0), (0, k - result.shape[1])), constant_values=-1)
    return result


def _index_bits(index) -> np.ndarray:
    """Every document's bits (0/1 floats) from a binary index: sentence-transformers' default rescoring rows."""
    import faiss

    packed = faiss.vector_to_array(index.xb).reshape(index.ntotal, index.code_size)
    return np.unpackbits(packed, axis=-1).astype(np.float32)


def index_bytes(index) -> int:
    """Memory the index needs: its serialised size (the codes and the quantiser's parameters)."""
    import faiss

    if isinstance(index, faiss.IndexBinary):
        return int(faiss.serialize_index_binary(index).nbytes)
    return int(faiss.serialize_index(index).nbytes)


RESCORE_ROWS = ("bits", "int8", "float32")


@dataclass(frozen=True)
class PrecisionSearch:
    """One search of float documents stored at a precision: the rankings and what the index costs."""

    ranked: np.ndarray  # (queries, k) document positions, best first, -1 pads
    precision: str
    dim: int
    bytes_per_vector: int
    index_bytes: int


def search_at(queries: np.ndarray, docs: np.ndarray, k: int, *, precision: str = "float32",
              ranges: CalibrationRanges | np.ndarray | None = None, rescore_factor: int = 0,
              rescore_with: str = "bits", exclude=None) -> PrecisionSearch:
    """Float ``docs`` quantised to ``precision`` and indexed, float ``queries`` searched (see :func:`search`).

    Binary with ``rescore_factor`` > 0 re-ranks against ``rescore_with``: the documents' ``bits`` (what a
    binary-only store holds), their ``int8`` codes (``ranges`` needed) or their ``float32`` vectors."""
    if rescore_with not in RESCORE_ROWS:
        raise ValidationError(f"unknown rescoring rows {rescore_with!r}: use one of {', '.join(RESCORE_ROWS)}")
    docs = np.asarray(docs, dtype=np.float32)
    index = build_index(quantize(docs, precision, ranges), precision, ranges)
    rows = None
    if rescore_factor > 0 and precision in BINARY and rescore_with != "bits":
        rows = docs if rescore_with == "float32" else dequantize(quantize(docs, "int8", ranges), "int8", ranges)
    ranked = search(index, queries, k, precision=precision, ranges=ranges, rescore_factor=rescore_factor,
                    rescore_docs=rows, exclude=exclude)
    return PrecisionSearch(ranked, precision, int(docs.shape[1]), bytes_per_vector(precision, docs.shape[1]),
                           index_bytes(index))
