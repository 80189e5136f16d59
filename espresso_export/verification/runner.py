"""``verify``: measure a candidate model against its source and apply the gate.

Inputs are read first (a bad file fails before any model loads), then both
models are opened and measured in this one process with the same thread
count: STS on every set, retrieval on every set, latency on the same texts.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from espresso_export.core.errors import ValidationError
from espresso_export.core.extras import require
from espresso_export.data import BUILTIN, input_extras
from espresso_export.model.vocabulary import coverage, find_pruning
from espresso_export.verification.embedders import EncodeCache, open_embedder
from espresso_export.verification.latency import default_threads, fixed_threads, measure
from espresso_export.verification.report import LatencyRow, RetrievalRow, StsRow, Thresholds, VerifyReport
from espresso_export.verification.retrieval import IndexOptions, evaluate, load_retrieval
from espresso_export.verification.sts import DEFAULT_COLUMNS, SMOKE_NOTE, load_sts, sts_score


@dataclass(frozen=True)
class VerifyOptions:
    sts: Sequence[str] = (BUILTIN,)
    sts_columns: tuple[str, str, str] = DEFAULT_COLUMNS
    sts_limit: int | None = None  # first N pairs of each STS set
    retrieval: Sequence[str] = ()
    retrieval_min_score: float = 4.0  # STS pairs scored at least this are relevant (STS-built retrieval)
    index: IndexOptions = field(default_factory=IndexOptions)
    batch_sizes: Sequence[int] = (1, 32)
    threads: int | None = None  # default: torch's default (physical cores)
    latency_texts: int = 128
    latency_rounds: int = 3
    encode_batch_size: int = 64
    pooling: str | None = None
    trust_remote_code: bool = False
    seed: int = 0


def _latency_texts(sets, count: int, seed: int) -> list[str]:
    """A fixed sample of the STS sentences: realistic lengths, identical for both models."""
    pool = list(dict.fromkeys(s for sts in sets for s in sts.sentences()))
    if len(pool) > count:
        pool = random.Random(seed).sample(pool, count)
    return pool


def _pruned_vocabulary(embedders: dict, sts_sets, retrieval_sets) -> dict | None:
    """When the candidate's provenance says its vocabulary was pruned: the share of the verify texts' tokens
    (as the source tokenizes them) that the pruned vocabulary kept. ``None`` for an unpruned candidate."""

    def parts(e):  # (tokenizer, lower-cases?, provenance) of a PyTorch or an ONNX embedder
        ckpt, enc = getattr(e, "checkpoint", None), getattr(e, "encoder", None)
        if ckpt is not None:
            return ckpt.tokenizer, ckpt.do_lower_case, ckpt.provenance
        return enc.tokenizer, enc.do_lower_case, enc.info.get("provenance")

    record = find_pruning(parts(embedders["candidate"])[2])
    if record is None:
        return None
    tokenizer, lower, _ = parts(embedders["source"])
    texts = [t for s in sts_sets for t in s.sentences()] + [t for _, r in retrieval_sets for t in r.queries + r.docs]
    return coverage(tokenizer, list(dict.fromkeys(texts)), record, lower=lower)


def _extras(options: VerifyOptions, *models) -> list[str]:
    """The optional features this verify run needs (:mod:`espresso_export.core.extras`), known before any work."""
    from espresso_export.runtime import is_export_folder

    needed = input_extras([*options.sts, *options.retrieval], split=True)
    needed += ["retrieval"] if options.retrieval else []
    return needed + ["onnx-runtime" for m in models if is_export_folder(m)]


def verify(
    candidate: str | os.PathLike,
    against: str | os.PathLike,
    *,
    options: VerifyOptions = VerifyOptions(),
    thresholds: Thresholds = Thresholds(),
    progress: bool = False,
    settings=None,
    **kwargs,
) -> VerifyReport:
    """Measure ``candidate`` against its source ``against``; the report carries the gate's verdict.

    The measurements and the gate come either as ``options`` and ``thresholds``, or as one flat
    :class:`~espresso_export.verification.settings.VerifySettings` (``settings=``, what the command and recipes
    use; its fields are also accepted as keyword arguments: ``verify(c, s, sts=["sts-test.csv"],
    min_retention=0.95)``)."""
    if settings is not None or kwargs:
        from espresso_export.core.settings import resolve
        from espresso_export.verification.settings import VerifySettings

        options, thresholds = resolve(VerifySettings, settings, kwargs, call="verify").build()
    start = time.perf_counter()
    require(*_extras(options, candidate, against))
    if not options.sts:
        raise ValidationError("verify needs at least one --sts set")
    if not options.batch_sizes or min(options.batch_sizes) < 1:
        raise ValidationError(f"latency batch sizes must be positive integers, got {list(options.batch_sizes)}")
    if thresholds.min_retrieval_retention is not None and not options.retrieval:
        raise ValidationError("--min-retrieval-retention needs a --retrieval set")
    sts_sets = [load_sts(spec, columns=options.sts_columns, limit=options.sts_limit) for spec in options.sts]
    retrieval_sets = [(spec, load_retrieval(spec, columns=options.sts_columns, min_score=options.retrieval_min_score,
                                            limit=options.sts_limit)) for spec in options.retrieval]
    threads = options.threads or default_threads()
    with fixed_threads(threads):
        embedders = {}
        for role, spec in (("source", against), ("candidate", candidate)):
            embedders[role] = open_embedder(spec, threads=threads, pooling=options.pooling,
                                            trust_remote_code=options.trust_remote_code)
        caches = {role: EncodeCache(e, batch_size=options.encode_batch_size,
                                    progress=f"encoding ({role})" if progress else None)
                  for role, e in embedders.items()}
        sts_rows = [StsRow(s.name, s.spec, s.kind, len(s.pairs), sts_score(caches["candidate"], s),
                           sts_score(caches["source"], s)) for s in sts_sets]
        index = options.index if options.index.threads is not None else replace(options.index, threads=threads)
        retrieval_rows = [RetrievalRow(data.name, spec, index.describe(), evaluate(caches["candidate"], data, index),
                                       evaluate(caches["source"], data, index)) for spec, data in retrieval_sets]
        vocabulary = _pruned_vocabulary(embedders, sts_sets, retrieval_sets)
        texts = _latency_texts(sts_sets, options.latency_texts, options.seed)
        cand_lat, src_lat = measure([embedders["candidate"], embedders["source"]], texts, options.batch_sizes,
                                    rounds=options.latency_rounds, progress="latency" if progress else None)
    notes: list[str] = []
    latency_rows = [LatencyRow(bs, cand_lat[bs], src_lat[bs]) for bs in options.batch_sizes]
    if any(s.smoke for s in sts_sets) or BUILTIN in options.retrieval:
        notes.append(SMOKE_NOTE.format(n=len(load_sts(BUILTIN).pairs)))
    if vocabulary is not None and not vocabulary["computed"]:
        notes.append(f"the candidate's vocabulary was pruned, but its token coverage was not measured: "
                     f"{vocabulary['reason']}")
    for role, emb in embedders.items():
        if emb.details.get("threads_applied") is False:
            notes.append(f"the {role} ONNX runtime did not accept a thread count: its latency used the runtime's default")
    return VerifyReport(
        candidate=embedders["candidate"].info(), source=embedders["source"].info(), threads=threads, sts=sts_rows,
        latency=latency_rows, latency_texts=len(texts), latency_rounds=options.latency_rounds,
        retrieval=retrieval_rows, thresholds=thresholds, notes=notes, seconds=time.perf_counter() - start,
        vocabulary=vocabulary,
    )

