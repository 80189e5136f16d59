"""``sweep`` of a static model folder (model2vec's format, :mod:`espresso_export.model.static`): its widths.

A static model has no layers to cut and no head to fit: its narrower models are its table's first columns (the
table was reduced by a PCA, so they lead), which is what ``export --dims`` declares and ``OnnxEncoder(...,
dim=k)`` serves. Each width's vectors are the full vectors' first ``k`` dims, renormalised: exactly what the table
cut to ``k`` columns encodes (a mean, then a normalisation). They are scored on the same sets as a transformer's
points (STS, retrieval, agreement with the full table's ranking of a corpus) and at each ``--precision``; the
model is timed once, with its full table (a narrower table reads the same tokens), and that speed is every
point's. The full table is the sweep's source.
"""

from __future__ import annotations

import random
from pathlib import Path

from espresso_export.core.cpu import int8_isa
from espresso_export.core.errors import ValidationError
from espresso_export.core.types import Select
from espresso_export.core.vectors import l2_normalised
from espresso_export.sweeping.sweep_metric import set_info, set_reference
from espresso_export.sweeping.sweep_precision import measure, with_retention
from espresso_export.sweeping.sweep_result import SweepPoint, SweepResult, pareto_front
from espresso_export.sweeping.sweep_settings import SweepSettings


def _timed(embedder, texts: list[str], settings: SweepSettings, progress: bool):
    """(the static model's LatencyStats, the timing's record for sweep.json), judged as verify judges its own."""
    from espresso_export.verification.latency import Plan, compare

    sample = texts if len(texts) <= settings.latency_texts else \
        random.Random(settings.seed).sample(texts, settings.latency_texts)
    bs = settings.latency_batch_size
    timing = compare([embedder], sample, [bs], Plan(min_rounds=settings.latency_rounds, warmup=1,
                                                    max_rounds=settings.latency_rounds),
                     progress="latency (the table)" if progress else None)[bs]
    reasons = timing.reasons(["static model"])
    record = {"batch_size": bs, "texts": len(sample), "rounds": settings.latency_rounds,
              "measured": "once, with the full table (a narrower table reads the same tokens)", "cpu": int8_isa(),
              "reliable": not reasons, "reasons": reasons,
              "other_cores": None if timing.other_cores is None else round(timing.other_cores, 3),
              "load_average": timing.load_average, "cores": timing.cores}
    return timing.stats(0), record


def sweep_static(folder: str | Path, settings: SweepSettings, dims: list[int], sets, cal: list[str],
                 cal_label: str | None, threads: int, timings: dict[str, float], progress: bool) -> SweepResult:
    """Score every width of the static model in ``folder`` and time it (see the module's docstring)."""
    import time

    from espresso_export.sweeping.sweep import _notes, _Texts
    from espresso_export.sweeping.sweep_metric import set_texts
    from espresso_export.verification.embedders import open_static

    start = time.perf_counter()
    embedder = open_static(Path(folder).expanduser().resolve(), str(folder))
    timings["load"] = time.perf_counter() - start
    width, tokens = embedder.dim, int(embedder.details["tokens"])
    wide = [d for d in dims if d > width]
    if wide:
        raise ValidationError(f"--dims {wide} exceed the static model's width {width}")
    texts = _Texts(*[set_texts(s) for s in sets])
    n_sts = len(texts.texts)
    start = time.perf_counter()
    x = embedder.encode(texts.texts + list(cal), batch_size=settings.batch_size)
    timings["encode"] = time.perf_counter() - start
    start = time.perf_counter()
    precisions = settings.precision
    set_reference(sets, x[:n_sts], texts.rows)
    source = measure(sets, x[:n_sts], texts.rows, x[n_sts:], precisions)
    source.at_precision = with_retention(source.at_precision, source.score)
    points = []
    for k in dims:
        emb = l2_normalised(x[:, :k])  # the table cut to k columns: the same mean, normalised again
        m = measure(sets, emb[:n_sts], texts.rows, emb[n_sts:], precisions)
        ret = m.score / source.score if source.score > 0 else None
        points.append(SweepPoint(
            layers=0, kept=[], dim=k, spearman=m.score, per_set=m.per_set, retention=ret, sentences_per_s=0.0,
            p50_ms=0.0, params=tokens * k, bytes_per_vector=4 * k,
            meets_target=ret is not None and ret >= settings.target_retention, agreement=m.agreement or None,
            precision=with_retention(m.at_precision, source.score)))
    timings["heads_and_scores"] = time.perf_counter() - start
    start = time.perf_counter()
    stats, latency = _timed(embedder, texts.texts, settings, progress)
    timings["latency"] = time.perf_counter() - start
    for p in points:
        p.sentences_per_s, p.p50_ms = stats.sentences_per_s, stats.p50_ms
    for p in pareto_front(points):
        p.pareto = True
    result = SweepResult(
        source=str(folder), source_depth=0, source_dim=width, source_spearman=source.score,
        source_per_set=source.per_set, source_sentences_per_s=stats.sentences_per_s, source_p50_ms=stats.p50_ms,
        source_params=tokens * width, head=settings.head, select=Select.AUTO, sets=[set_info(s) for s in sets],
        metric=settings.metric, calibration=None, threads=threads, latency=latency,
        target_retention=settings.target_retention, points=points, notes=_notes(sets, Select.AUTO, None, []),
        static=True)
    result.notes.append("a static model: its widths are its table's first columns (export --dims serves them); it "
                        "has no layers to cut, and one speed, timed with the full table")
    if not latency["reliable"]:
        result.notes.insert(0, f"throughput NOT reliable ({'; '.join(latency['reasons'])}): the sent/s may be off; "
                               "run again on a quiet machine")
    if precisions:
        result.precision = {"precisions": list(precisions), "source": source.at_precision,
                            "int8_calibration": None if not cal else {"source": cal_label, "size": len(cal)}}
    return result
