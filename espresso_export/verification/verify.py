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

from espresso_export.core.cpu import int8_isa
from espresso_export.core.extras import require
from espresso_export.data import BUILTIN, input_extras
from espresso_export.data.files import selected_on, spec_key
from espresso_export.model.vocabulary import count_tokens, coverage, find_pruning, tokenizer_json
from espresso_export.verification.embedders import EncodeCache, open_embedder
from espresso_export.verification.latency import Plan, compare, default_threads, fixed_threads, time_loads
from espresso_export.verification.latency_report import LatencyRow, LatencySetup
from espresso_export.verification.report import RetrievalRow, StsRow, Thresholds, VerifyReport
from espresso_export.verification.retrieval import IndexOptions, evaluate, load_retrieval
from espresso_export.verification.verify_settings import check_across
from espresso_export.verification.sts import DEFAULT_COLUMNS, SMOKE_NOTE, StsSet, load_sts, sts_cosines


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
    latency_rounds: int = 3  # at least this many rounds per batch size
    latency_budget: float = 20.0  # then more, up to this many seconds per batch size, until the ratio is tight
    cache: bool = True  # keep and reuse the source's embeddings under the cache root
    cache_dir: str | os.PathLike | None = None  # default: $ESPRESSO_CACHE or ~/.cache/espresso-export
    encode_batch_size: int = 64
    pooling: str | None = None
    trust_remote_code: bool = False
    seed: int = 0


def _sts_row(sts: StsSet, caches: dict[str, EncodeCache]) -> StsRow:
    """Both models' Spearman x100 on ``sts``, with each pair's cosines kept for the retention interval."""
    import numpy as np

    from espresso_export.core.metrics import spearman

    gold = np.asarray(sts.pairs.scores, dtype=np.float64)
    cand, src = sts_cosines(caches["candidate"], sts), sts_cosines(caches["source"], sts)
    return StsRow(sts.name, sts.spec, sts.kind, len(sts.pairs), 100.0 * spearman(cand, gold),
                  100.0 * spearman(src, gold), cosines=(cand, src, gold), subset_of=sts.subset_of)


def _latency_texts(sets, count: int, seed: int) -> list[str]:
    """A fixed sample of the STS sentences: realistic lengths, identical for both models."""
    pool = list(dict.fromkeys(s for sts in sets for s in sts.sentences()))
    if len(pool) > count:
        pool = random.Random(seed).sample(pool, count)
    return pool


def _pruned_vocabulary(embedders: dict, sts_sets, retrieval_sets) -> dict | None:
    """When the candidate's provenance says its vocabulary was pruned: the share of the verify texts' tokens
    (as the source tokenizes them) that the pruned vocabulary kept. ``None`` for an unpruned candidate."""

    def parts(e):  # (tokenizer, lower-cases?) of a PyTorch or an ONNX embedder
        ckpt, enc = getattr(e, "checkpoint", None), getattr(e, "encoder", None)
        return (ckpt.tokenizer, ckpt.do_lower_case) if ckpt is not None else (enc.tokenizer, enc.do_lower_case)

    record = find_pruning(_provenance(embedders["candidate"]))
    if record is None:
        return None
    tokenizer, lower = parts(embedders["source"])
    texts = [t for s in sts_sets for t in s.sentences()] + [t for _, r in retrieval_sets for t in r.queries + r.docs]
    texts = list(dict.fromkeys(texts))
    found = coverage(tokenizer, texts, record, lower=lower)
    if found["computed"]:  # a removed token splits into more pieces: longer inputs, more time per text
        cand_tokenizer, cand_lower = parts(embedders["candidate"])
        found["candidate_tokens"] = int(count_tokens(tokenizer_json(cand_tokenizer), texts, lower=cand_lower).sum())
    return found


def _open(candidate, against, options: VerifyOptions, threads: int) -> dict:
    return {role: _open_one(spec, options, threads) for role, spec in (("source", against), ("candidate", candidate))}


def _caches(embedders: dict, options: VerifyOptions, progress: bool) -> dict[str, EncodeCache]:
    """In-memory caches for both; the source's vectors are also kept on disk (``options.cache``)."""
    from pathlib import Path

    from espresso_export.model.cache import default_cache_dir

    root = Path(options.cache_dir).expanduser() if options.cache_dir else default_cache_dir()
    return {role: EncodeCache(e, batch_size=options.encode_batch_size,
                              progress=f"encoding ({role})" if progress else None,
                              store=root / "verify" if role == "source" and options.cache else None)
            for role, e in embedders.items()}


def _latency(embedders: dict, texts: list[str], options: VerifyOptions, threads: int,
             progress: bool) -> tuple[list[LatencyRow], LatencySetup]:
    """Candidate and source timed side by side at every batch size (:mod:`.latency`); none: no latency."""
    if not options.batch_sizes:
        return [], LatencySetup(threads=threads, cpu=int8_isa())
    plan = Plan(min_rounds=options.latency_rounds, budget_s=options.latency_budget)
    timings = compare([embedders["candidate"], embedders["source"]], texts, options.batch_sizes, plan,
                      progress="latency (batch sizes timed)" if progress else None)
    rows = [LatencyRow.of(t) for t in timings.values()]
    ort = {role: e.details.get("intra_op_threads") for role, e in embedders.items() if e.kind == "onnx"}
    ov = {role: e.details.get("inference_num_threads") for role, e in embedders.items() if e.kind == "openvino"}
    setup = LatencySetup(threads=threads, torch_threads=next(iter(timings.values())).threads,
                         onnxruntime_threads=ort, openvino_threads=ov, texts=len(texts),
                         min_rounds=options.latency_rounds, budget_s=options.latency_budget, cpu=int8_isa())
    return rows, setup


def _time_loads(embedders: dict, candidate, against, options: VerifyOptions, threads: int) -> None:
    """Replace each first (cold, biased) load time by the median of 3 loads taken in turns, after both were
    loaded once: the first load of a process pays imports and disk reads the second does not."""
    specs = {"candidate": candidate, "source": against}
    roles = list(embedders)
    runs = time_loads([lambda role=role: _open_one(specs[role], options, threads) for role in roles])
    for role, seconds in zip(roles, runs):
        embedders[role].load_seconds = sorted(seconds)[len(seconds) // 2]
        embedders[role].details["load_seconds_runs"] = [round(x, 4) for x in seconds]


def _open_one(spec, options: VerifyOptions, threads: int):
    return open_embedder(spec, threads=threads, pooling=options.pooling, trust_remote_code=options.trust_remote_code)


def _notes(embedders: dict, sts_sets, options: VerifyOptions, vocabulary, latency_rows, thresholds) -> list[str]:
    notes: list[str] = []
    if any(s.smoke for s in sts_sets) or BUILTIN in options.retrieval:
        notes.append(SMOKE_NOTE.format(n=len(load_sts(BUILTIN).pairs)))
    if vocabulary is not None and not vocabulary["computed"]:
        notes.append(f"the candidate's vocabulary was pruned, but its token coverage was not measured: "
                     f"{vocabulary['reason']}")
    for role, emb in embedders.items():
        if emb.details.get("threads_applied") is False:
            notes.append(f"the {role} ONNX runtime did not accept a thread count: its latency used the runtime's default")
    if thresholds.max_latency_ratio is not None and not all(r.reliable for r in latency_rows):
        notes.append("the latency gate was applied to a measurement marked unreliable (see the latency table)")
    chose = selected_on(_provenance(embedders["candidate"]))
    for spec in [*options.sts, *options.retrieval]:
        if spec_key(spec) in chose:
            notes.append(f"{spec} also chose the candidate's kept checkpoint (its training's --eval-sts / "
                         "--eval-retrieval): its retention there is optimistic; report on a set training never saw")
    return notes


def _provenance(embedder) -> dict | None:
    ckpt, enc = getattr(embedder, "checkpoint", None), getattr(embedder, "encoder", None)
    return ckpt.provenance if ckpt is not None else enc.info.get("provenance") if enc is not None else None


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
    :class:`~espresso_export.verification.verify_settings.VerifySettings` (``settings=``, what the command and recipes
    use; its fields are also accepted as keyword arguments: ``verify(c, s, sts=["sts-test.csv"],
    min_retention=0.95)``)."""
    if settings is not None or kwargs:
        from espresso_export.core.settings import resolve
        from espresso_export.verification.verify_settings import VerifySettings

        options, thresholds = resolve(VerifySettings, settings, kwargs, call="verify").build()
    start = time.perf_counter()
    require(*_extras(options, candidate, against))
    check_across(options.sts, options.retrieval, options.batch_sizes,
                 min_retrieval_retention=thresholds.min_retrieval_retention,
                 max_latency_ratio=thresholds.max_latency_ratio, min_retention=thresholds.min_retention)
    sts_sets = [load_sts(spec, columns=options.sts_columns, limit=options.sts_limit) for spec in options.sts]
    retrieval_sets = [(spec, load_retrieval(spec, columns=options.sts_columns, min_score=options.retrieval_min_score,
                                            limit=options.sts_limit)) for spec in options.retrieval]
    threads = options.threads or default_threads()
    with fixed_threads(threads):
        embedders = _open(candidate, against, options, threads)
        caches = _caches(embedders, options, progress)
        sts_rows = [_sts_row(s, caches) for s in sts_sets]
        index = options.index if options.index.threads is not None else replace(options.index, threads=threads)
        retrieval_rows = [RetrievalRow(data.name, spec, index.describe(), evaluate(caches["candidate"], data, index),
                                       evaluate(caches["source"], data, index)) for spec, data in retrieval_sets]
        vocabulary = _pruned_vocabulary(embedders, sts_sets, retrieval_sets)
        texts = _latency_texts(sts_sets, options.latency_texts, options.seed)
        latency_rows, setup = _latency(embedders, texts, options, threads, progress)
        _time_loads(embedders, candidate, against, options, threads)
    notes = _notes(embedders, sts_sets, options, vocabulary, latency_rows, thresholds)
    return VerifyReport(
        candidate=embedders["candidate"].info(), source=embedders["source"].info(), threads=threads, sts=sts_rows,
        latency=latency_rows, latency_setup=setup, retrieval=retrieval_rows, thresholds=thresholds, notes=notes,
        seconds=time.perf_counter() - start, vocabulary=vocabulary, source_cache=caches["source"].info(),
    )

