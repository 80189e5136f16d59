"""``verify``: measure a candidate model against its source and apply the gate.

Inputs are read first (a bad file fails before any model loads), then both models are opened and measured in
this one process with the same thread count: STS on every set, retrieval on every set, latency on the same texts.
A model whose vectors hold NaN or inf is measured to the end and fails the gate (exit 3, the report still
written); an error that stops the measurement itself is exit 1.
"""

from __future__ import annotations

import os
import random
import time
import warnings
from collections.abc import Mapping
from typing import Any

from espresso_export.core.cpu import int8_isa
from espresso_export.core.extras import require
from espresso_export.data import BUILTIN, input_extras
from espresso_export.data.files import selected_on, spec_key
from espresso_export.model.threads import default_threads, fixed_threads
from espresso_export.model.vocabulary import count_tokens, coverage, find_pruning, tokenizer_json
from espresso_export.verification.embedders import EncodeCache, open_embedder
from espresso_export.verification.latency import Plan, compare, time_loads
from espresso_export.verification.latency_report import LatencyRow, LatencySetup
from espresso_export.verification.report import RetrievalRow, StsRow, VerifyReport
from espresso_export.verification.retrieval import IndexOptions, evaluate, load_retrieval
from espresso_export.verification.sts import SMOKE_NOTE, StsSet, load_sts, sts_cosines
from espresso_export.verification.corpus_agreement import load_corpus, measure_corpus
from espresso_export.verification.estimate_error import error_line, kind_of_lineage, measured_error
from espresso_export.verification.judging import judge, read_judgments
from espresso_export.verification.vector_measures import retrieval_at, sts_at_widths
from espresso_export.verification.vectors import VectorForms, variants
from espresso_export.verification.vectors_report import VectorReport
from espresso_export.verification.verify_settings import (
    VerifySettings, check_across, check_vectors, legacy_keywords, legacy_options,
)


def __getattr__(name: str):
    if name == "VerifyOptions":  # the old structured options: VerifySettings now, old field names accepted
        return legacy_options
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _sts_row(sts: StsSet, caches: dict[str, EncodeCache]) -> StsRow:
    """Both models' Spearman x100 on ``sts``, with each pair's cosines kept for the retention interval. A model
    whose cosines are not all finite scores NaN: a rank correlation of NaNs would be an arbitrary number."""
    import numpy as np

    from espresso_export.core.metrics import spearman

    gold = np.asarray(sts.pairs.scores, dtype=np.float64)
    cand, src = sts_cosines(caches["candidate"], sts), sts_cosines(caches["source"], sts)
    finite = bool(np.isfinite(cand).all() and np.isfinite(src).all())

    def score(cosines) -> float:
        return 100.0 * spearman(cosines, gold) if np.isfinite(cosines).all() else float("nan")

    return StsRow(sts.name, sts.spec, sts.kind, len(sts.pairs), score(cand), score(src),
                  cosines=(cand, src, gold) if finite else None, subset_of=sts.subset_of)


def _latency_texts(sets, count: int, seed: int) -> list[str]:
    """A fixed sample of the STS sentences: realistic lengths, identical for both models."""
    pool = list(dict.fromkeys(s for sts in sets for s in sts.sentences()))
    if len(pool) > count:
        pool = random.Random(seed).sample(pool, count)
    return pool


def _tokenizer(embedder) -> tuple[Any, bool]:
    """(tokenizer, lower-cases?) of a PyTorch, an ONNX or a static embedder."""
    ckpt, enc = getattr(embedder, "checkpoint", None), getattr(embedder, "encoder", None)
    if ckpt is None and enc is None:  # a static model folder: model2vec's tokenizer
        return embedder.model.tokenizer, False
    return (ckpt.tokenizer, ckpt.do_lower_case) if ckpt is not None else (enc.tokenizer, enc.do_lower_case)


def _pruned_vocabulary(embedders: dict, sts_sets, retrieval_sets) -> dict | None:
    """When the candidate's provenance says its vocabulary was pruned: the share of the verify texts' tokens
    (as the source tokenizes them) that the pruned vocabulary kept. ``None`` for an unpruned candidate."""
    record = find_pruning(_provenance(embedders["candidate"]))
    if record is None:
        return None
    tokenizer, lower = _tokenizer(embedders["source"])
    texts = [t for s in sts_sets for t in s.sentences()] + [t for _, r in retrieval_sets for t in r.queries + r.docs]
    texts = list(dict.fromkeys(texts))
    found = coverage(tokenizer, texts, record, lower=lower)
    if found["computed"]:  # a removed token splits into more pieces: longer inputs, more time per text
        cand_tokenizer, cand_lower = _tokenizer(embedders["candidate"])
        found["candidate_tokens"] = int(count_tokens(tokenizer_json(cand_tokenizer), texts, lower=cand_lower).sum())
    return found


def _open(candidate, against, settings: VerifySettings, threads: int) -> dict:
    return {role: _open_one(spec, settings, threads) for role, spec in (("source", against), ("candidate", candidate))}


def _cache_store(settings: VerifySettings):
    """The folder the source's vectors are kept in, or ``None``: caching off, or a folder this process cannot
    write (then a one-line warning, and the measurement runs without the cache)."""
    from pathlib import Path

    from espresso_export.core.console import err_console
    from espresso_export.model.cache import default_cache_dir

    if not settings.cache:
        return None
    store = (Path(settings.cache_dir).expanduser() if settings.cache_dir else default_cache_dir()) / "verify"
    try:
        store.mkdir(parents=True, exist_ok=True)
        writable = os.access(store, os.W_OK | os.X_OK)
    except OSError:
        writable = False
    if not writable:
        err_console().print(f"warning: the cache folder {store} is not writable: the source's vectors are not "
                            "cached (set $ESPRESSO_CACHE to a writable folder, or --no-cache)", highlight=False,
                            markup=False, soft_wrap=True)
        return None
    return store


def _caches(embedders: dict, settings: VerifySettings, progress: bool) -> dict[str, EncodeCache]:
    """In-memory caches for both; the source's vectors are also kept on disk (``settings.cache``)."""
    store = _cache_store(settings)
    return {role: EncodeCache(e, batch_size=settings.batch_size, progress=f"encoding ({role})" if progress else None,
                              store=store if role == "source" else None)
            for role, e in embedders.items()}


def _latency(embedders: dict, texts: list[str], settings: VerifySettings, threads: int,
             progress: bool) -> tuple[list[LatencyRow], LatencySetup]:
    """Candidate and source timed side by side at every batch size (:mod:`.latency`); none: no latency."""
    if not settings.batch_sizes:
        return [], LatencySetup(threads=threads, cpu=int8_isa())
    plan = Plan(min_rounds=settings.latency_rounds, budget_s=settings.latency_budget)
    timings = compare([embedders["candidate"], embedders["source"]], texts, settings.batch_sizes, plan,
                      progress="latency (batch sizes timed)" if progress else None)
    rows = [LatencyRow.of(t) for t in timings.values()]
    ort = {role: e.details.get("intra_op_threads") for role, e in embedders.items() if e.kind == "onnx"}
    ov = {role: e.details.get("inference_num_threads") for role, e in embedders.items() if e.kind == "openvino"}
    setup = LatencySetup(threads=threads, torch_threads=next(iter(timings.values())).threads,
                         onnxruntime_threads=ort, openvino_threads=ov, texts=len(texts),
                         min_rounds=settings.latency_rounds, budget_s=settings.latency_budget, cpu=int8_isa())
    return rows, setup


def _time_loads(embedders: dict, candidate, against, settings: VerifySettings, threads: int) -> None:
    """Replace each first (cold, biased) load time by the median of 3 loads taken in turns, after both were
    loaded once: the first load of a process pays imports and disk reads the second does not."""
    specs = {"candidate": candidate, "source": against}
    roles = list(embedders)
    runs = time_loads([lambda role=role: _open_one(specs[role], settings, threads) for role in roles])
    for role, seconds in zip(roles, runs):
        embedders[role].load_seconds = sorted(seconds)[len(seconds) // 2]
        embedders[role].details["load_seconds_runs"] = [round(x, 4) for x in seconds]


def _open_one(spec, settings: VerifySettings, threads: int):
    return open_embedder(spec, threads=threads, pooling=settings.pooling,
                         trust_remote_code=settings.trust_remote_code)


def _notes(embedders: dict, sts_sets, settings: VerifySettings, vocabulary, latency_rows) -> list[str]:
    """What a reader of the report must know to read its numbers right."""
    notes: list[str] = []
    if any(s.smoke for s in sts_sets) or BUILTIN in settings.retrieval:
        notes.append(SMOKE_NOTE.format(n=len(load_sts(BUILTIN).pairs)))
    if vocabulary is not None and not vocabulary["computed"]:
        notes.append(f"the candidate's vocabulary was pruned, but its token coverage was not measured: "
                     f"{vocabulary['reason']}")
    for role, emb in embedders.items():
        if emb.details.get("threads_applied") is False:
            notes.append(f"the {role} ONNX runtime did not accept a thread count: its latency used the runtime's default")
    if settings.max_latency_ratio is not None and not all(r.reliable for r in latency_rows):
        notes.append("the latency gate was applied to a measurement marked unreliable (see the latency table)")
    chose = selected_on(_provenance(embedders["candidate"]))
    for spec in [*settings.sts, *settings.retrieval]:
        if spec_key(spec) in chose:
            notes.append(f"{spec} also chose the candidate's kept checkpoint (its training's --eval-sts / "
                         "--eval-retrieval): its retention there is optimistic; report on a set training never saw")
    return notes


def _window_notes(embedders: dict, corpora) -> list[str]:
    """Each corpus whose documents the source's window cuts, when enough of them to say
    (:mod:`espresso_export.model.window`)."""
    from espresso_export.model.window import window_cut

    source = embedders["source"]
    ckpt, enc = getattr(source, "checkpoint", None), getattr(source, "encoder", None)
    window = ckpt.max_seq_length if ckpt is not None else enc.max_seq_length if enc is not None else None
    if window is None or not corpora:  # a static model reads every token
        return []
    tokenizer, lower = _tokenizer(source)
    cuts = [(data.name, window_cut(tokenizer, window, data.documents, lower=lower)) for data in corpora]
    return [cut.line(f"the documents of {name}") for name, cut in cuts if cut is not None and cut.worth_saying]


def _provenance(embedder) -> dict | None:
    ckpt, enc = getattr(embedder, "checkpoint", None), getattr(embedder, "encoder", None)
    if ckpt is None and enc is None:  # a static model folder: its espresso.json
        return getattr(embedder, "provenance", None)
    return ckpt.provenance if ckpt is not None else enc.info.get("provenance") if enc is not None else None


def _extras(settings: VerifySettings, *models) -> list[str]:
    """The optional features this verify run needs (:mod:`espresso_export.core.extras`), known before any work."""
    from espresso_export.runtime import is_export_folder

    needed = input_extras([*settings.sts, *settings.retrieval], split=True) + input_extras(
        [*settings.corpus, *settings.queries, settings.calibration])
    needed += ["retrieval"] if settings.retrieval or settings.corpus else []
    return needed + ["onnx-runtime" for m in models if is_export_folder(m)]


def _resolve(settings: VerifySettings | None, kwargs: Mapping[str, Any]) -> VerifySettings:
    """The settings of one call; the old API's ``options=`` and field names still work, with a DeprecationWarning."""
    from espresso_export.core.settings import resolve

    kwargs = dict(kwargs)
    options = kwargs.pop("options", None)
    if options is not None:
        warnings.warn("verify(): options= is now settings= (a VerifySettings); the old name will be removed in 1.0",
                      DeprecationWarning, stacklevel=3)
        settings = settings if settings is not None else options
    return resolve(VerifySettings, settings, legacy_keywords(kwargs), call="verify")


def verify(
    candidate: str | os.PathLike,
    against: str | os.PathLike,
    settings: VerifySettings | None = None,
    *,
    progress: bool = False,
    **kwargs,
) -> VerifyReport:
    """Measure ``candidate`` against its source ``against``; the report carries the gate's verdict.

    ``settings`` is a :class:`~espresso_export.verification.verify_settings.VerifySettings`; its fields are also
    accepted as keyword arguments (``verify(c, s, sts=["sts-test.csv"], min_sts_retention=0.95)``)."""
    settings = _resolve(settings, kwargs)
    start = time.perf_counter()
    require(*_extras(settings, candidate, against))
    check_across(settings.sts, settings.retrieval, settings.batch_sizes, min_sts_retention=settings.min_sts_retention,
                 min_retrieval_retention=settings.min_retrieval_retention,
                 max_latency_ratio=settings.max_latency_ratio)  # a field may have changed since the check on creation
    check_vectors(settings)
    judgments = read_judgments(settings.judgments) if settings.judgments else None
    sts_sets = [load_sts(spec, columns=settings.columns, limit=settings.sts_limit) for spec in settings.sts]
    retrieval_sets = [(spec, load_retrieval(spec, columns=settings.columns, min_score=settings.relevant_score,
                                            limit=settings.sts_limit)) for spec in settings.retrieval]
    corpora = [load_corpus(spec, queries, method=settings.agreement_from, limit=settings.corpus_queries,
                           seed=settings.seed, known_items=settings.known_items, field=settings.corpus_field)
               for spec, queries in zip(settings.corpus, settings.queries or [None] * len(settings.corpus))]
    threads = settings.threads or default_threads()
    with fixed_threads(threads):
        embedders = _open(candidate, against, settings, threads)
        # a --dims wider than the candidate is refused now, not after the measuring
        variants(settings.precision, settings.dims, embedders["candidate"].dim, settings.rescore)
        report = _measure(embedders, sts_sets, retrieval_sets, corpora, settings, threads, progress)
        _time_loads(embedders, candidate, against, settings, threads)
    judge(report, corpora, judgments, settings.write_judging, settings.corpus_field, settings.judge_command,
          settings.judge_per_query)
    report.candidate, report.source = embedders["candidate"].info(), embedders["source"].info()
    report.seconds = time.perf_counter() - start
    return report


def _vectors(caches: dict, sts_sets, retrieval_sets, retrieval_rows, corpora,
             settings: VerifySettings) -> tuple[list, VectorReport | None]:
    """Agreement on every corpus, and with --precision or --dims the labelled sets again per stored form of the
    candidate's vectors (:mod:`.vectors`)."""
    other_forms = bool(settings.precision or settings.dims)
    if not corpora and not other_forms:
        return [], None
    forms = VectorForms(caches["candidate"], calibration=settings.calibration, samples=settings.calibration_samples,
                        seed=settings.seed)
    wanted = variants(settings.precision, settings.dims, caches["candidate"].embedder.dim, settings.rescore)
    rows = [measure_corpus(data, caches, forms, wanted) for data in corpora]
    if not other_forms:
        return rows, None
    labelled = [retrieval_at(caches["candidate"], data, row.source, forms, wanted)
                for (_, data), row in zip(retrieval_sets, retrieval_rows)]
    widths = [r for sts in sts_sets for r in sts_at_widths(caches, sts, settings.dims)] if settings.dims else []
    return rows, VectorReport(labelled, widths, forms.ranges_info())


def _measure(embedders: dict, sts_sets, retrieval_sets, corpora, settings: VerifySettings, threads: int,
             progress: bool) -> VerifyReport:
    """Every measurement on the two open models; the load times and the models' facts are filled in after."""
    caches = _caches(embedders, settings, progress)
    index = IndexOptions(kind=settings.index, nlist=settings.nlist, nprobe=settings.nprobe, threads=threads)
    sts_rows = [_sts_row(s, caches) for s in sts_sets]
    retrieval_rows = [RetrievalRow(data.name, spec, index.describe(), evaluate(caches["candidate"], data, index),
                                   evaluate(caches["source"], data, index)) for spec, data in retrieval_sets]
    agreement, vectors = _vectors(caches, sts_sets, retrieval_sets, retrieval_rows, corpora, settings)
    error = None
    if any(row.known_item is not None for row in agreement):  # what the estimate is worth for this kind of model
        error = measured_error(kind_of_lineage(_provenance(embedders["candidate"])))
    vocabulary = _pruned_vocabulary(embedders, sts_sets, retrieval_sets)
    texts = _latency_texts(sts_sets, settings.latency_texts, settings.seed)
    latency_rows, setup = _latency(embedders, texts, settings, threads, progress)
    return VerifyReport(
        candidate={}, source={}, threads=threads, sts=sts_rows, latency=latency_rows, latency_setup=setup,
        retrieval=retrieval_rows, thresholds=settings.thresholds,
        notes=_notes(embedders, sts_sets, settings, vocabulary, latency_rows) + _window_notes(embedders, corpora)
        + ([error_line(error)] if error else []),
        vocabulary=vocabulary, estimate_error=error,
        source_cache=caches["source"].info(),
        nonfinite={role: c.nonfinite for role, c in caches.items() if c.nonfinite}, agreement=agreement,
        vectors=vectors)
