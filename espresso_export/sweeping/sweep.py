"""``sweep``: measure every (depth, width) cut of one model, in memory, and map the trade-off.

Cost model: one forward pass over the STS and calibration sentences yields the
pooled state after every layer (:func:`espresso_export.model.embed.encode_layers`),
which is exactly what the model cut to its first L layers outputs. Per depth,
one PCA is fitted on the calibration embeddings at the widest requested
width; narrower heads are its leading components (the same fit). Nothing is
written per point. Latency is measured once per depth on the cut model
(:func:`espresso_export.shrinking.slicing.temporary_cut`, with the widest head attached:
the head's k x d product is a negligible share), the depths and the full
source taking turns batch by batch, all in this process with a fixed thread count.

Layers are selected as ``shrink`` selects them (one declaration, ``select_setting``): ``auto`` (the
default) is ``first`` for ESE-trained models and ``spread`` otherwise. Spread (layers spread over the depth,
always keeping the last) cannot reuse one pass: it runs one encode per depth on the cut model.

The result types (:class:`SweepPoint`, :class:`SweepResult`) live in
:mod:`espresso_export.sweeping.sweep_result`, which the plot reads without this module.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from espresso_export.core.cpu import int8_isa
from espresso_export.core.errors import ValidationError
from espresso_export.core.extras import require
from espresso_export.core.settings import out_of_bounds
from espresso_export.data import input_extras
from espresso_export.core.types import Head, Select, SweepMetric
from espresso_export.model.checkpoint import Checkpoint, DenseLayer, load
from espresso_export.model.embed import apply_post, encode, encode_layers
from espresso_export.model.post import renormalized, with_head
from espresso_export.core.files import atomic_output, check_output, write_text_atomic
from espresso_export.shrinking.heads import fit_pca, truncation
from espresso_export.shrinking.shrink import load_calibration
from espresso_export.core.common_settings import select_setting
from espresso_export.shrinking.slicing import depth_hint, select_layers, temporary_cut
from espresso_export.verification.embedders import Embedder
from espresso_export.sweeping.sweep_metric import load_targets, set_info, set_score, set_texts
from espresso_export.sweeping.sweep_result import SweepPoint, SweepResult, pareto_front
from espresso_export.verification.verify_settings import check_retention_gate

__all__ = ["SWEEP_HEADS", "SweepOptions", "SweepPoint", "SweepResult", "pareto_front", "sweep"]

SWEEP_HEADS = (Head.PCA, Head.TRUNCATE)


@dataclass(frozen=True)
class SweepOptions:
    layers: Sequence[int]  # depths L to try
    dims: Sequence[int]  # widths k to try
    head: Head = Head.PCA
    select: Select = select_setting()  # shrink's default, declared once
    sts: Sequence[str] = ("builtin",)
    sts_columns: tuple[str, str, str] = ("sentence1", "sentence2", "score")
    sts_limit: int | None = None
    metric: SweepMetric = SweepMetric.STS  # what points are scored, plotted and recommended on
    retrieval: Sequence[str] = ()  # BEIR folders or STS specs, scored with metric=retrieval
    relevant_score: float = 4.0  # STS-built retrieval: pairs scored at least this are relevant
    calibration: str | os.PathLike | None = None
    calibration_samples: int = 4096
    target_retention: float = 0.95
    threads: int | None = None
    batch_size: int = 64  # encoding
    latency_batch_size: int = 32
    latency_texts: int = 64
    latency_rounds: int = 3  # fewer: the spread is unknown and the timing is reported as not reliable
    seed: int = 0

    def __post_init__(self) -> None:
        # one value where a list is expected, as the settings classes take it ("x.csv" was read letter by letter)
        for name in ("sts", "retrieval"):
            if isinstance(getattr(self, name), (str, os.PathLike)):
                object.__setattr__(self, name, (os.fspath(getattr(self, name)),))  # frozen
        for name in ("layers", "dims"):
            if isinstance(getattr(self, name), int):
                object.__setattr__(self, name, (getattr(self, name),))


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


def _sts_scores(emb: np.ndarray, texts: _Texts, sets) -> dict[str, float]:
    """Each set's score x100: Spearman on an STS set, nDCG@10 on a retrieval set (``--metric``)."""
    return {s.name: set_score(s, emb, texts.rows) for s in sets}


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
    """One loaded model run at one depth (no weight copies), for :mod:`latency`."""

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


def _check(options: SweepOptions) -> tuple[Head, Select, list[int], list[int]]:
    head, select = Head(options.head), Select(options.select)
    if head not in SWEEP_HEADS:
        raise ValidationError(f"sweep --head must be pca or truncate, got {head.value}")
    check_retention_gate("--target-retention", options.target_retention)
    if SweepMetric(options.metric) is SweepMetric.RETRIEVAL and not options.retrieval:
        raise ValidationError("sweep --metric retrieval needs a --retrieval set")
    if not options.sts:
        raise ValidationError("sweep needs at least one --sts set")
    depths, dims = sorted(set(options.layers)), sorted(set(options.dims))
    if not depths or not dims:
        raise ValidationError("sweep needs at least one depth (--layers) and one width (--dims)")
    return head, select, depths, dims


def _check_grid(ckpt: Checkpoint, depths: list[int], dims: list[int]) -> None:
    bad = [d for d in depths if not 1 <= d <= ckpt.depth]
    if bad:
        raise ValidationError(f"--layers {','.join(map(str, bad))}: {depth_hint(ckpt.depth, indices=False)}")
    wide = [d for d in dims if d > ckpt.output_dim]
    if wide:
        raise ValidationError(f"--dims {wide} exceed the embedding width {ckpt.output_dim}")


def _score_points(ckpt: Checkpoint, pooled: dict[int, np.ndarray], texts: _Texts, sets, head: Head,
                  kept: dict[int, list[int]], dims: list[int], target: float):
    """Every (depth, width) point's Spearman and size, the source's scores, and each depth's widest head."""
    n, width, n_sts = ckpt.depth, ckpt.output_dim, len(texts.texts)
    source_per_set = _sts_scores(_apply(ckpt.post, pooled[n][:n_sts]), texts, sets)
    source_score = float(np.mean(list(source_per_set.values())))
    base = renormalized(ckpt.post)  # as shrink's build_head
    outside, per_layer = _layer_params(ckpt)
    points: list[SweepPoint] = []
    widest: dict[int, list] = {}
    for depth, keep in kept.items():
        x = _apply(base, pooled[depth])
        sts_x, cal_x = x[:n_sts], x[n_sts:]
        fit = fit_pca(cal_x, dims[-1]) if head is Head.PCA else None  # narrower heads: its leading components
        widest[depth] = (with_head(base, fit.as_dense()) if fit is not None
                         else with_head(base[:-1], truncation(width, dims[-1])))
        backbone = outside + sum(per_layer[i] for i in keep) + _dense_params(base)
        for k in dims:
            if fit is not None:
                emb, explained = (sts_x - fit.mean) @ fit.components[:k].T, float(fit.explained_variance_ratio[:k].sum())
            else:
                emb, explained = sts_x[:, :k], None
            per_set = _sts_scores(emb, texts, sets)
            score = float(np.mean(list(per_set.values())))
            ret = score / source_score if source_score > 0 else None
            points.append(SweepPoint(
                layers=depth, kept=keep, dim=k, spearman=score, per_set=per_set, retention=ret, sentences_per_s=0.0,
                p50_ms=0.0, params=backbone + k * width + k, bytes_per_vector=4 * k, explained_variance=explained,
                meets_target=ret is not None and ret >= target,
            ))
    source_params = outside + sum(per_layer) + _dense_params(ckpt.post)
    return points, widest, source_per_set, source_params


@contextmanager
def _timed(timings: dict[str, float], key: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - start


def _inputs(options: SweepOptions, head: Head, dims: list[int]):
    """The STS sets, and the calibration sentences a PCA head is fitted on (none for truncate)."""
    from espresso_export.verification.sts import load_sts

    if SweepMetric(options.metric) is SweepMetric.RETRIEVAL:
        sets = load_targets(options.retrieval, columns=options.sts_columns, min_score=options.relevant_score,
                            limit=options.sts_limit)
    else:
        sets = [load_sts(s, columns=options.sts_columns, limit=options.sts_limit) for s in options.sts]
    cal, cal_label = ([], None) if head is not Head.PCA else \
        load_calibration(options.calibration, options.calibration_samples, options.seed)
    if head is Head.PCA and len(cal) < dims[-1]:
        raise ValidationError(f"calibration has {len(cal)} sentences, fewer than the widest --dims {dims[-1]}; "
                              "a PCA needs at least that many")
    return sets, cal, cal_label


def _latency(ckpt: Checkpoint, texts: list[str], depths: list[int], kept: dict[int, list[int]],
             widest: dict[int, list], options: SweepOptions, progress: bool):
    """(the timed sample, one LatencyStats per depth then one for the full source, the timing's record)."""
    from espresso_export.verification.latency import Plan, compare

    sample = texts if len(texts) <= options.latency_texts else \
        random.Random(options.seed).sample(texts, options.latency_texts)
    embedders = [_DepthEmbedder.of(ckpt, None if d == ckpt.depth else kept[d], widest[d]) for d in depths]
    embedders.append(_DepthEmbedder.of(ckpt, None, ckpt.post))
    bs = options.latency_batch_size
    timing = compare(embedders, sample, [bs], Plan(min_rounds=options.latency_rounds, warmup=1,
                                                   max_rounds=options.latency_rounds),
                     progress="latency (per depth)" if progress else None)[bs]
    reasons = timing.reasons([f"L{d}" for d in depths] + ["source"])  # as verify judges its own timing
    record = {"reliable": not reasons, "reasons": reasons,
              "other_cores": None if timing.other_cores is None else round(timing.other_cores, 3),
              "load_average": timing.load_average, "cores": timing.cores}
    return sample, [timing.stats(e) for e in range(len(embedders))], record


def _notes(sets, select: Select, ckpt: Checkpoint, depths: list[int]) -> list[str]:
    from espresso_export.verification.sts import SMOKE_NOTE, load_sts

    notes = []
    if any(s.smoke for s in sets):
        notes.append(SMOKE_NOTE.format(n=len(load_sts("builtin").pairs)))
    if select is Select.FIRST and not ckpt.ese_trained and depths[0] < ckpt.depth:  # only when asked for
        notes.append("this model is not ESE-trained: its first-L cuts usually score below spread cuts "
                     "(try --select spread)")
    return notes


def sweep(source: str | os.PathLike | Checkpoint, options: SweepOptions | None = None, *,
          output: str | os.PathLike | None = None, overwrite: bool = False, progress: bool = False,
          **kwargs) -> SweepResult:
    """Measure every (depth, width) point of ``source``; write sweep.json/.csv/.png to ``output`` if given.
    ``options`` or its fields as keywords (``sweep("minilm", layers=[2, 3], dims=[64, 128])``), as shrink and
    verify take theirs."""
    from espresso_export.core.settings import resolve
    from espresso_export.verification.latency import default_threads, fixed_threads

    options = resolve(SweepOptions, options, kwargs, call="sweep")

    start = time.perf_counter()
    head, select, depths, dims = _check(options)
    if output is not None:
        check_output(output, overwrite=overwrite, inputs=[source, list(options.sts or ()), options.calibration])
        require("plot")  # now, not after the measuring: sweep.png is drawn last
    require(*input_extras([*options.sts], split=True), *input_extras([options.calibration]))
    sets, cal, cal_label = _inputs(options, head, dims)
    if options.threads is not None and (problem := out_of_bounds(options.threads, 1, None, cpus=True)):
        raise ValidationError(f"--threads {problem}")
    threads = options.threads or default_threads()
    timings: dict[str, float] = {}
    with fixed_threads(threads):
        with _timed(timings, "load"):
            ckpt = source if isinstance(source, Checkpoint) else load(source)
        _check_grid(ckpt, depths, dims)
        select_auto = select is Select.AUTO
        if select_auto:  # as shrink resolves it for this model
            select = Select.FIRST if ckpt.ese_trained else Select.SPREAD
        kept = {d: select_layers(ckpt.depth, d, select) for d in depths}
        texts = _Texts(*[set_texts(s) for s in sets])
        with _timed(timings, "encode"):
            pooled = _pooled_by_depth(ckpt, texts.texts + cal, depths, kept, select, options.batch_size, progress)
        with _timed(timings, "heads_and_scores"):
            points, widest, source_per_set, source_params = _score_points(
                ckpt, pooled, texts, sets, head, kept, dims, options.target_retention)
        with _timed(timings, "latency"):
            sample, stats, timing = _latency(ckpt, texts.texts, depths, kept, widest, options, progress)
    by_depth = dict(zip(depths, stats))
    for p in points:
        p.sentences_per_s, p.p50_ms = by_depth[p.layers].sentences_per_s, by_depth[p.layers].p50_ms
    for p in pareto_front(points):
        p.pareto = True
    result = SweepResult(
        source=ckpt.source, source_depth=ckpt.depth, source_dim=ckpt.output_dim,
        source_spearman=float(np.mean(list(source_per_set.values()))), source_per_set=source_per_set,
        source_sentences_per_s=stats[-1].sentences_per_s, source_p50_ms=stats[-1].p50_ms,
        source_params=source_params, head=head, select=select, select_auto=select_auto,
        sets=[set_info(s) for s in sets], metric=SweepMetric(options.metric),
        calibration=None if head is not Head.PCA else {"source": cal_label, "size": len(cal),
                                                       "spec": None if options.calibration is None
                                                       else str(options.calibration),
                                                       "samples": options.calibration_samples, "seed": options.seed},
        threads=threads, latency={"batch_size": options.latency_batch_size, "texts": len(sample),
                                  "rounds": options.latency_rounds, "measured": "once per depth, widest head",
                                  "cpu": int8_isa(), **timing},
        target_retention=options.target_retention, points=points, notes=_notes(sets, select, ckpt, depths),
    )
    if not timing["reliable"]:
        result.notes.insert(0, f"throughput NOT reliable ({'; '.join(timing['reasons'])}): the sent/s, speed-ups "
                               f"and the fastest pick may be off; run again on a quiet machine")
    timings["total"] = time.perf_counter() - start
    result.timings = timings
    if output is not None:
        _write(result, output, overwrite)
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
