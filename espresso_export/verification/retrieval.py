"""Retrieval quality with faiss: nDCG@10, recall@100, MRR@10, recall@10, index memory and query time.

Embeddings are L2-normalised, so inner product is cosine similarity (a dot-product model is ranked by its raw
dot product, as its users rank). The
index is exact (``flat``, the default) or inverted lists (``ivf`` with
``nlist`` k-means cells of which ``nprobe`` are searched). A set is a BEIR
folder (:func:`espresso_export.data.read_retrieval`) or is built from an STS
file (:func:`espresso_export.data.retrieval_from_sts`). The ranking metrics are BEIR's
(:func:`espresso_export.core.metrics.ranking_scores`): nDCG@10 on the graded judgements, the headline number and
the gate's, since MRR@10 and recall@10 saturate first on sets with one easy answer per query.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from espresso_export.core.vectors import l2_normalised
from espresso_export.data import RetrievalSet, read_retrieval, retrieval_from_sts
from espresso_export.data.files import BUILTIN
from espresso_export.data.hub_datasets import hub_dataset
from espresso_export.core.errors import NotFoundError, ValidationError
from espresso_export.core.metrics import RANKING_SCORES, scores_of
from espresso_export.core.extras import require
from espresso_export.core.types import IndexKind
from espresso_export.verification.embedders import EncodeCache
from espresso_export.verification.sts import DEFAULT_COLUMNS, load_sts
from espresso_export.verification.verify_settings import declared_default

TOP_K = 100  # retrieved per query: recall@100 needs the first 100


@dataclass(frozen=True)
class IndexOptions:
    """The faiss index a retrieval set is searched with; the defaults are :class:`VerifySettings`'."""

    kind: IndexKind = declared_default("index")
    nlist: int = declared_default("nlist")
    nprobe: int = declared_default("nprobe")
    threads: int | None = None
    repeats: int = 5  # query timing: median of this many searches of all queries

    def describe(self) -> str:
        if self.kind is IndexKind.IVF:
            return f"ivf (nlist {self.nlist}, nprobe {self.nprobe})"
        return "flat"


@dataclass(frozen=True)
class RetrievalScores:
    mrr_at_10: float
    recall_at_10: float
    ndcg_at_10: float
    recall_at_100: float
    index_bytes: int
    build_seconds: float
    query_ms_per_query: float
    queries: int
    docs: int
    dim: int
    # each evaluated query's scores, columns as core.metrics.RANKING_SCORES: the retention intervals' input
    per_query: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        """The scores for the JSON report (a score that is not a finite number as null: JSON has no NaN)."""
        return {k: (round(v, 6) if math.isfinite(v) else None) if isinstance(v, float) else v
                for k, v in asdict(self).items() if k != "per_query"}

    def column(self, name: str) -> np.ndarray | None:
        """Every evaluated query's ``name`` score (``ndcg_at_10``, ...), or None when not kept."""
        return None if self.per_query is None else self.per_query[:, RANKING_SCORES.index(name)]


def load_retrieval(spec: str | os.PathLike, *, columns: tuple[str, str, str] = DEFAULT_COLUMNS,
                   min_score: float = declared_default("relevant_score"), limit: int | None = None) -> RetrievalSet:
    """A BEIR folder, or an STS spec turned into queries (sentence1) and a corpus (sentence2)."""
    path = Path(str(spec)).expanduser()
    if path.is_dir():
        return read_retrieval(path)
    if not path.exists() and str(spec) != BUILTIN and hub_dataset(str(spec)) is None:
        raise NotFoundError(f"retrieval set not found: no folder or file {str(spec)!r} (use a BEIR folder, an STS "
                            "file, 'builtin', or a Hub dataset id owner/name[:split])")
    sts = load_sts(spec, columns=columns, limit=limit)
    return replace(retrieval_from_sts(sts.pairs, min_score=min_score), name=f"{sts.name} (as retrieval)")


def build_index(docs: np.ndarray, options: IndexOptions):
    require("retrieval")
    import faiss

    n, d = docs.shape
    if options.kind is IndexKind.FLAT:
        index = faiss.IndexFlatIP(d)
    else:
        if options.nlist < 1 or options.nlist > n:
            raise ValidationError(f"--nlist must be between 1 and the corpus size {n}, got {options.nlist}")
        if options.nprobe < 1 or options.nprobe > options.nlist:
            raise ValidationError(f"--nprobe must be between 1 and --nlist {options.nlist}, got {options.nprobe}")
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFFlat(quantizer, d, options.nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.min_points_per_centroid = 1  # small corpora: train anyway, without faiss's warning
        index.train(docs)
        index.nprobe = options.nprobe
    index.add(docs)
    return index


def index_bytes(index) -> int:
    """Memory an index needs: the size of its serialised form (vectors, lists, quantizer)."""
    import faiss

    return int(faiss.serialize_index(index).nbytes)


def search(query_emb: np.ndarray, doc_emb: np.ndarray, options: IndexOptions, k: int = TOP_K, *,
           similarity: str = "cosine"):
    """``(ranked corpus positions, index bytes, build seconds, median seconds to search all queries)``, ranked by
    the model's similarity: cosine, or the raw dot product for a dot-product model (whose lengths count)."""
    require("retrieval")
    import faiss

    if options.threads is not None:
        faiss.omp_set_num_threads(options.threads)
    if similarity == "dot":
        queries, docs = (np.ascontiguousarray(x, dtype=np.float32) for x in (query_emb, doc_emb))
    else:
        queries, docs = l2_normalised(query_emb), l2_normalised(doc_emb)
    start = time.perf_counter()
    index = build_index(docs, options)
    build = time.perf_counter() - start
    k = min(k, docs.shape[0])
    ranked = None
    timings = []
    for _ in range(max(1, options.repeats)):
        start = time.perf_counter()
        _, ranked = index.search(queries, k)
        timings.append(time.perf_counter() - start)
    return ranked, index_bytes(index), build, float(np.median(timings))


def evaluate(cache: EncodeCache, data: RetrievalSet, options: IndexOptions = IndexOptions()) -> RetrievalScores:
    """Encode the evaluated queries and the corpus with ``cache``'s model and score the ranking."""
    positions = data.evaluated_queries
    query_emb = cache.encode([data.queries[i] for i in positions], role="query")  # the model's prompts, if any
    doc_emb = cache.encode(data.docs, role="document")
    ranked, nbytes, build, seconds = search(query_emb, doc_emb, options, similarity=cache.embedder.usage.similarity)
    per_query = data.per_query_scores(ranked, positions)
    return RetrievalScores(
        **scores_of(per_query), per_query=per_query, index_bytes=nbytes, build_seconds=build,
        query_ms_per_query=1000.0 * seconds / max(1, len(positions)), queries=len(positions), docs=len(data.docs),
        dim=int(doc_emb.shape[1]),
    )


def missed(scores: RetrievalScores) -> int | None:
    """How many evaluated queries find no relevant document in the top 10 (nDCG@10 of 0); None when not kept."""
    column = scores.column("ndcg_at_10")
    return None if column is None else int((column == 0).sum())


def labels_note(source: RetrievalScores) -> str | None:
    """A warning when the source itself finds nothing relevant for most of the queries. Labels whose query or
    document ids do not match the texts (shifted or permuted) look like this, and a retention of near-zero scores
    measures little."""
    n = missed(source)
    if n is None or 2 * n <= source.queries:
        return None
    return (f"the source finds no relevant document in its top 10 for {n} of {source.queries} queries: check that "
            "the labels' query and document ids match the texts (a retention of near-zero scores measures little)")
