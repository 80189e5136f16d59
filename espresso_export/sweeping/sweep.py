"""``sweep``: score and time every (depth, width) cut of one model in memory, and map the trade-off.

Nothing is written per point. With ``first`` layers, one forward pass yields the pooled state after every layer,
which is what each cut to the first L layers outputs; ``spread`` cuts (shrink's choice for models not trained
with ESE) take one pass per depth on the model cut in place. Per depth one PCA is fitted at the widest width;
narrower heads are its leading components. Latency is timed once per depth with the widest head, the depths and
the source taking turns batch by batch, at a fixed thread count. With ``--metric agreement`` the source's ranking
of the corpus is searched once and every point is compared with it; ``--precision`` scores each point's search
again with its vectors stored at each precision (:mod:`espresso_export.sweeping.sweep_precision`). The result
types live in :mod:`espresso_export.sweeping.sweep_result`, which the plot reads without torch. A static model
folder (model2vec's format) has widths only: :mod:`espresso_export.sweeping.sweep_static`.
"""

from __future__ import annotations

import json
import os
import random
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from espresso_export.core.renamed import old_names
from espresso_export.core.cpu import int8_isa
from espresso_export.core.errors import ValidationError
from espresso_export.core.extras import require
from espresso_export.core.files import atomic_output, check_output, write_text_atomic
from espresso_export.core.settings import resolve
from espresso_export.core.types import Head, Select, SweepMetric
from espresso_export.data import input_extras
from espresso_export.model.checkpoint import Checkpoint, DenseLayer, load
from espresso_export.model.embed import apply_post, encode, encode_layers
from espresso_export.model.post import renormalized, with_head
from espresso_export.model.static import is_static_folder
from espresso_export.shrinking.heads import fit_pca, truncation
from espresso_export.shrinking.shrink import load_calibration
from espresso_export.shrinking.slicing import depth_hint, select_layers, temporary_cut
from espresso_export.sweeping.sweep_metric import load_agreement, load_targets, set_info, set_reference, set_texts
from espresso_export.sweeping.sweep_precision import measure, with_retention
from espresso_export.sweeping.sweep_result import SweepPoint, SweepResult, pareto_front
from espresso_export.sweeping.sweep_settings import SWEEP_HEADS, SweepSettings
from espresso_export.verification.embedders import Embedder

__all__ = ["SWEEP_HEADS", "SweepPoint", "SweepResult", "SweepSettings", "pareto_front", "sweep"]


__getattr__ = old_names(__name__, {"SweepOptions": ("SweepSettings", lambda: SweepSettings)})


def _layer_params(ckpt: Checkpoint) -> tuple[int, list[int]]:
    """(parameters outside the layer stack, parameters of each layer)."""
    from espresso_export.model.architectures import get_attr_path

    stack = get_attr_path(ckpt.model, ckpt.arch.layers_path)
    per_layer = [sum(p.numel() for p in layer.parameters()) for layer in stack]
    total = sum(p.numel() for p in ckpt.model.parameters())
    return total - sum(per_layer), per_layer


def _dense_params(modules) -> int:
    return sum(m.weight.numel() + (0 if m.bias is None else m.bias.numel()) for m in modules if isinstance(m, DenseLayer))


def _apply(modules, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return apply_post(torch.from_numpy(np.ascontiguousarray(x)), modules).numpy()


class _Texts:
    """Distinct texts and their row numbers, so STS pairs index into one embedding matrix."""

    def __init__(self, *groups: Sequence[str]) -> None:
        self.texts = list(dict.fromkeys(t for g in groups for t in g))
        self.row = {t: i for i, t in enumerate(self.texts)}

    def rows(self, texts: Sequence[str]) -> np.ndarray:
        return np.fromiter((self.row[t] for t in texts), dtype=np.int64, count=len(texts))


def _pooled_by_depth(ckpt: Checkpoint, texts: list[str], depths: Sequence[int], kept: dict[int, list[int]],
                     select: Select, batch_size: int, progress: bool) -> dict[int, np.ndarray]:
    """Pooled states (before any post module) of the model cut to each depth."""
    n = ckpt.depth
    if select is Select.FIRST:
        return encode_layers(ckpt, texts, sorted(set(depths) | {n}), batch_size=batch_size,
                             progress="encoding (all layers, one pass)" if progress else None)
    out = {n: encode(ckpt, texts, batch_size=batch_size, post=False,
                     progress="encoding (full model)" if progress else None)}
    for depth in depths:
        if depth == n:
            continue
        with temporary_cut(ckpt.model, ckpt.arch, kept[depth]):
            out[depth] = encode(ckpt, texts, batch_size=batch_size, post=False,
                                progress=f"encoding ({depth} layers)" if progress else None)
    return out


@dataclass
class _DepthEmbedder(Embedder):
    """One loaded model run at one depth (no weight copies), timed by
    :mod:`espresso_export.verification.latency`."""

    view: Checkpoint | None = None  # the source checkpoint with this point's post modules
    keep: list[int] | None = None  # layers of the cut; None = the full model

    @classmethod
    def of(cls, ckpt: Checkpoint, keep: list[int] | None, post) -> _DepthEmbedder:
        view = replace(ckpt, post=list(post))
        label = "all" if keep is None else len(keep)
        return cls(spec=f"{ckpt.source}[{label} layers]", kind="pytorch", dim=view.output_dim, n_params=None,
                   disk_bytes=None, load_seconds=0.0, view=view, keep=keep)

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        if self.keep is None:
            return encode(self.view, texts, batch_size=batch_size)
        with temporary_cut(self.view.model, self.view.arch, self.keep):
            return encode(self.view, texts, batch_size=batch_size)


def _check_grid(ckpt: Checkpoint, depths: list[int], dims: list[int]) -> None:
    """Refuse depths and widths this model does not have (known only once it is loaded)."""
    bad = [d for d in depths if not 1 <= d <= ckpt.depth]
    if bad:
        raise ValidationError(f"--layers {','.join(map(str, bad))}: {depth_hint(ckpt.depth, indices=False)}")
    wide = [d for d in dims if d > ckpt.output_dim]
    if wide:
        raise ValidationError(f"--dims {wide} exceed the embedding width {ckpt.output_dim}")


def _narrowed(x: np.ndarray, fit, k: int) -> tuple[np.ndarray, float | None]:
    """A depth's embeddings at width ``k``: the PCA's leading ``k`` components (and the variance they explain), or
    the first ``k`` dims."""
    if fit is None:
        return x[:, :k], None
    return (x - fit.mean) @ fit.components[:k].T, float(fit.explained_variance_ratio[:k].sum())


def _score_points(ckpt: Checkpoint, pooled: dict[int, np.ndarray], texts: _Texts, sets, kept: dict[int, list[int]],
                  dims: list[int], settings: SweepSettings):
    """Every (depth, width) point's score and size, the source's :class:`Measure`, and each depth's widest head.
    The source's rankings of agreement sets are searched here, once, before any point is compared with them."""
    n, width, n_sts, precisions = ckpt.depth, ckpt.output_dim, len(texts.texts), settings.precision
    source_x = _apply(ckpt.post, pooled[n])
    set_reference(sets, source_x[:n_sts], texts.rows)
    source = measure(sets, source_x[:n_sts], texts.rows, source_x[n_sts:], precisions)
    source.at_precision = with_retention(source.at_precision, source.score)
    base = renormalized(ckpt.post)  # as shrink's build_head
    outside, per_layer = _layer_params(ckpt)
    points: list[SweepPoint] = []
    widest: dict[int, list] = {}
    for depth, keep in kept.items():
        x = _apply(base, pooled[depth])
        fit = fit_pca(x[n_sts:], dims[-1]) if settings.head is Head.PCA else None  # narrower: leading components
        widest[depth] = (with_head(base, fit.as_dense()) if fit is not None
                         else with_head(base[:-1], truncation(width, dims[-1])))
        backbone = outside + sum(per_layer[i] for i in keep) + _dense_params(base)
        for k in dims:
            emb, explained = _narrowed(x, fit, k)
            m = measure(sets, emb[:n_sts], texts.rows, emb[n_sts:], precisions)
            ret = m.score / source.score if source.score > 0 else None
            points.append(SweepPoint(
                layers=depth, kept=keep, dim=k, spearman=m.score, per_set=m.per_set, retention=ret,
                sentences_per_s=0.0, p50_ms=0.0, params=backbone + k * width + k, bytes_per_vector=4 * k,
                explained_variance=explained, meets_target=ret is not None and ret >= settings.target_retention,
                agreement=m.agreement or None, precision=with_retention(m.at_precision, source.score),
            ))
    source_params = outside + sum(per_layer) + _dense_params(ckpt.post)
    return points, widest, source, source_params


@contextmanager
def _timed(timings: dict[str, float], key: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - start


def _inputs(settings: SweepSettings, dims: list[int]):
    """The STS, retrieval or agreement sets, and the calibration sentences a PCA head is fitted on and int8/uint8
    ranges are fitted on (none for a truncate head without those precisions)."""
    from espresso_export.runtime.precision import SCALAR
    from espresso_export.verification.sts import DEFAULT_COLUMNS, load_sts

    columns = tuple(settings.sts_columns) if settings.sts_columns else DEFAULT_COLUMNS
    if settings.metric is SweepMetric.RETRIEVAL:
        sets = load_targets(settings.retrieval, columns=columns, min_score=settings.relevant_score,
                            limit=settings.sts_limit)
    elif settings.metric is SweepMetric.AGREEMENT:
        queries = settings.queries or [None] * len(settings.corpus)
        sets = [load_agreement(c, queries=q, method=settings.agreement_from, limit=settings.corpus_queries,
                               seed=settings.seed) for c, q in zip(settings.corpus, queries)]
    else:
        sets = [load_sts(s, columns=columns, limit=settings.sts_limit) for s in settings.sts]
    if settings.head is not Head.PCA:
        if not any(p in SCALAR for p in settings.precision or ()):
            return sets, [], None
        cal, cal_label = load_calibration(settings.calibration, settings.calibration_samples, settings.seed)
        return sets, cal, cal_label
    cal, cal_label = load_calibration(settings.calibration, settings.calibration_samples, settings.seed)
    if len(cal) <= dims[-1]:
        raise ValidationError(f"calibration has {len(cal)} sentences, not more than the widest --dims {dims[-1]}; "
                              "a PCA head of k dims needs at least k + 1")
    return sets, cal, cal_label


def _latency(ckpt: Checkpoint, texts: list[str], depths: list[int], kept: dict[int, list[int]],
             widest: dict[int, list], settings: SweepSettings, progress: bool):
    """(one LatencyStats per depth then one for the full source, the timing's record for sweep.json)."""
    from espresso_export.verification.latency import Plan, compare

    sample = texts if len(texts) <= settings.latency_texts else \
        random.Random(settings.seed).sample(texts, settings.latency_texts)
    embedders = [_DepthEmbedder.of(ckpt, None if d == ckpt.depth else kept[d], widest[d]) for d in depths]
    embedders.append(_DepthEmbedder.of(ckpt, None, ckpt.post))
    bs = settings.latency_batch_size
    timing = compare(embedders, sample, [bs], Plan(min_rounds=settings.latency_rounds, warmup=1,
                                                   max_rounds=settings.latency_rounds),
                     progress="latency (per depth)" if progress else None)[bs]
    reasons = timing.reasons([f"L{d}" for d in depths] + ["source"])  # as verify judges its own timing
    record = {"batch_size": bs, "texts": len(sample), "rounds": settings.latency_rounds,
              "measured": "once per depth, widest head", "cpu": int8_isa(), "reliable": not reasons, "reasons": reasons,
              "other_cores": None if timing.other_cores is None else round(timing.other_cores, 3),
              "load_average": timing.load_average, "cores": timing.cores}
    return [timing.stats(e) for e in range(len(embedders))], record


def _notes(sets, select: Select, ckpt: Checkpoint, depths: list[int]) -> list[str]:
    """What the reader of the table should know: a smoke set is no benchmark; first-L cuts of a model not
    trained with ESE usually lose to spread cuts."""
    from espresso_export.verification.sts import SMOKE_NOTE, load_sts

    notes = []
    if any(s.smoke for s in sets):
        notes.append(SMOKE_NOTE.format(n=len(load_sts("builtin").pairs)))
    if select is Select.FIRST and not ckpt.ese_trained and depths[0] < ckpt.depth:  # only when asked for
        notes.append("this model is not ESE-trained: its first-L cuts usually score below spread cuts "
                     "(try --select spread)")
    return notes


def _call_form(output: Any, settings: Any, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``(output, settings)`` as a call gave them: by position (``sweep(model, OUT, settings)``), by name, or in the
    earlier forms ``sweep(model, settings, output=OUT)`` and ``options=``, which still work with a
    DeprecationWarning (so both are positional-only in the signature: ``output=`` arrives in ``kwargs``)."""
    if isinstance(output, SweepSettings) and settings is None:
        warnings.warn("sweep(model, settings, output=OUT) is now sweep(model, OUT, settings)", DeprecationWarning,
                      stacklevel=3)
        output, settings = None, output
    if "options" in kwargs:
        warnings.warn("sweep(options=...) is now sweep(settings=...)", DeprecationWarning, stacklevel=3)
        kwargs.setdefault("settings", kwargs.pop("options"))
    given = {"output": output, "settings": settings}
    for name in given:
        if name in kwargs:
            if given[name] is not None:
                raise TypeError(f"sweep() got multiple values for argument {name!r}")
            given[name] = kwargs.pop(name)
    return given["output"], given["settings"]


def sweep(model: str | os.PathLike | Checkpoint, output: str | os.PathLike | None = None,
          settings: SweepSettings | None = None, /, *, overwrite: bool = False, progress: bool = False,
          **kwargs) -> SweepResult:
    """Score and time every (depth, width) point of ``model``; write sweep.json/.csv/.png to ``output`` if given
    (``None``: only the returned result). ``settings`` or its fields as keywords
    (``sweep("minilm", layers=[2, 3], dims=[64, 128])``), as shrink and verify take theirs; ``output=`` and
    ``settings=`` may be given by name too."""
    from espresso_export.model.threads import default_threads, fixed_threads

    output, settings = _call_form(output, settings, kwargs)
    settings = resolve(SweepSettings, settings, kwargs, call="sweep")
    static = not isinstance(model, Checkpoint) and is_static_folder(model)
    settings = settings.for_model(static)  # the axes a static model has: its widths (and precisions)
    start = time.perf_counter()
    depths, dims = sorted(set(settings.layers)), sorted(set(settings.dims))
    inputs = [settings.calibration, *settings.corpus, *settings.queries]
    if output is not None:
        check_output(output, overwrite=overwrite, inputs=[model, list(settings.sts), *inputs])
        require("plot")  # now, not after the measuring: sweep.png is drawn last
    require(*input_extras([*settings.sts], split=True), *input_extras(inputs))
    if settings.metric is SweepMetric.AGREEMENT or settings.precision:
        require("retrieval")  # faiss searches the corpus
    sets, cal, cal_label = _inputs(settings, dims)
    threads = settings.threads or default_threads()
    timings: dict[str, float] = {}
    if static:
        from espresso_export.sweeping.sweep_static import sweep_static

        with fixed_threads(threads):
            result = sweep_static(model, settings, dims, sets, cal, cal_label, threads, timings, progress)
        return _finished(result, timings, start, output, overwrite)
    with fixed_threads(threads):
        with _timed(timings, "load"):
            ckpt = model if isinstance(model, Checkpoint) else load(model)
        _check_grid(ckpt, depths, dims)
        select = settings.select
        if select is Select.AUTO:  # as shrink resolves it for this model
            select = Select.FIRST if ckpt.ese_trained else Select.SPREAD
        kept = {d: select_layers(ckpt.depth, d, select) for d in depths}
        texts = _Texts(*[set_texts(s) for s in sets])
        with _timed(timings, "encode"):
            pooled = _pooled_by_depth(ckpt, texts.texts + cal, depths, kept, select, settings.batch_size, progress)
        with _timed(timings, "heads_and_scores"):
            points, widest, source, source_params = _score_points(ckpt, pooled, texts, sets, kept, dims, settings)
        with _timed(timings, "latency"):
            stats, timing = _latency(ckpt, texts.texts, depths, kept, widest, settings, progress)
    by_depth = dict(zip(depths, stats))
    for p in points:
        p.sentences_per_s, p.p50_ms = by_depth[p.layers].sentences_per_s, by_depth[p.layers].p50_ms
    for p in pareto_front(points):
        p.pareto = True
    result = _result(ckpt, settings, select, sets, depths, points, (source, source_params, stats[-1]),
                     timing, threads, _calibration(settings, cal_label, cal))
    if settings.precision:
        result.precision = {"precisions": list(settings.precision), "source": source.at_precision,
                            "int8_calibration": None if not cal else {"source": cal_label, "size": len(cal)}}
    return _finished(result, timings, start, output, overwrite)


def _calibration(settings: SweepSettings, label: str, cal: list[str]) -> dict[str, Any] | None:
    """What the PCA heads were fitted on (None without a PCA head)."""
    return None if settings.head is not Head.PCA else {
        "source": label, "size": len(cal), "spec": None if settings.calibration is None else str(settings.calibration),
        "samples": settings.calibration_samples, "seed": settings.seed}


def _finished(result: SweepResult, timings: dict[str, float], start: float, output, overwrite: bool) -> SweepResult:
    """The result with its timings, written to ``output`` if given."""
    timings["total"] = time.perf_counter() - start
    result.timings = timings
    if output is not None:
        _write(result, output, overwrite)
    return result


def _result(ckpt: Checkpoint, settings: SweepSettings, select: Select, sets, depths: list[int],
            points: list[SweepPoint], source: tuple, latency: dict[str, Any], threads: int,
            calibration: dict[str, Any] | None) -> SweepResult:
    """The :class:`SweepResult` of the measured points (``source``: the full model's scores per set, parameters
    and latency); its notes open with a warning when the timing is not to be trusted."""
    found, params, stats = source
    result = SweepResult(
        source=ckpt.source, source_depth=ckpt.depth, source_dim=ckpt.output_dim,
        source_spearman=found.score, source_per_set=found.per_set,
        source_sentences_per_s=stats.sentences_per_s, source_p50_ms=stats.p50_ms, source_params=params,
        head=settings.head, select=select, select_auto=settings.select is Select.AUTO,
        sets=[set_info(s) for s in sets], metric=settings.metric, calibration=calibration, threads=threads,
        latency=latency, target_retention=settings.target_retention, points=points,
        notes=_notes(sets, select, ckpt, depths),
    )
    if not latency["reliable"]:
        result.notes.insert(0, f"throughput NOT reliable ({'; '.join(latency['reasons'])}): the sent/s, speed-ups "
                               f"and the fastest pick may be off; run again on a quiet machine")
    return result


def _write(result: SweepResult, output: str | os.PathLike, overwrite: bool) -> None:
    from espresso_export.sweeping.plots import plot_sweep

    with atomic_output(output, overwrite=overwrite, inputs=[result.source]) as tmp:
        result.output = Path(output).expanduser().resolve()
        try:  # the measurements are the result; a plot that cannot be drawn must not take them down with it
            plot_sweep(result, tmp / "sweep.png")
        except Exception as e:  # matplotlib raises assorted errors (backends, fonts, a broken install)
            result.notes.append(f"sweep.png not written ({e.__class__.__name__}: {e}); the data is in sweep.json")
        write_text_atomic(tmp / "sweep.csv", result.to_csv())
        write_text_atomic(tmp / "sweep.json", json.dumps(result.to_dict(), indent=2) + "\n")
