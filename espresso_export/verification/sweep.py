"""``sweep``: measure every (depth, width) cut of one model, in memory, and map the trade-off.

Cost model: one forward pass over the STS and calibration sentences yields the
pooled state after every layer (:func:`espresso_export.embed.encode_layers`),
which is exactly what the model cut to its first L layers outputs. Per depth,
one PCA is fitted on the calibration embeddings at the widest requested
width; narrower heads are its leading components (the same fit). Nothing is
written per point. Latency is measured once per depth on the cut model
(:func:`espresso_export.slicing.temporary_cut`, with the widest head attached:
the head's k x d product is a negligible share), the depths and the full
source taking turns batch by batch, all in this process with a fixed thread count.

``--select spread`` (layers spread over the depth, always keeping the last)
cannot reuse one pass: it runs one encode per depth on the cut model.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from espresso_export import __version__
from espresso_export.model.checkpoint import Checkpoint, DenseLayer, Normalize, load
from espresso_export.model.embed import apply_post, encode, encode_layers
from espresso_export.core.errors import ValidationError
from espresso_export.shrinking.heads import fit_pca, truncation
from espresso_export.model.layout import atomic_output, check_output, write_text_atomic
from espresso_export.core.metrics import sts_spearman
from espresso_export.shrinking.shrink import load_calibration
from espresso_export.shrinking.slicing import select_layers, temporary_cut
from espresso_export.core.types import Head, Select
from espresso_export.verification.embedders import Embedder

log = logging.getLogger(__name__)

SWEEP_HEADS = (Head.PCA, Head.TRUNCATE)


@dataclass(frozen=True)
class SweepOptions:
    layers: Sequence[int]  # depths L to try
    dims: Sequence[int]  # widths k to try
    head: Head = Head.PCA
    select: Select = Select.FIRST
    sts: Sequence[str] = ("builtin",)
    sts_columns: tuple[str, str, str] = ("sentence1", "sentence2", "score")
    sts_limit: int | None = None
    calibration: str | os.PathLike | None = None
    calibration_samples: int = 4096
    target_retention: float = 0.95
    threads: int | None = None
    batch_size: int = 64  # encoding
    latency_batch_size: int = 32
    latency_texts: int = 64
    latency_rounds: int = 2
    seed: int = 0


@dataclass
class SweepPoint:
    layers: int
    kept: list[int]  # 0-based layer indices of the cut
    dim: int
    spearman: float  # mean over the STS sets, x100
    per_set: dict[str, float]
    retention: float | None
    sentences_per_s: float
    p50_ms: float
    params: int
    bytes_per_vector: int
    explained_variance: float | None = None
    pareto: bool = False
    meets_target: bool = False

    @property
    def label(self) -> str:
        return f"L{self.layers}/d{self.dim}"


@dataclass
class SweepResult:
    source: str
    source_depth: int
    source_dim: int
    source_spearman: float
    source_per_set: dict[str, float]
    source_sentences_per_s: float
    source_p50_ms: float
    source_params: int
    head: Head
    select: Select
    sts_sets: list[dict]
    calibration: dict | None
    threads: int
    latency: dict
    target_retention: float
    points: list[SweepPoint]
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    output: Path | None = None

    @property
    def smallest(self) -> SweepPoint | None:
        """Fewest parameters (then smallest vectors, then best score) among points meeting the target."""
        ok = [p for p in self.points if p.meets_target]
        return min(ok, key=lambda p: (p.params, p.bytes_per_vector, -p.spearman)) if ok else None

    @property
    def fastest(self) -> SweepPoint | None:
        """Highest throughput (then smallest vectors, then best score) among points meeting the target."""
        ok = [p for p in self.points if p.meets_target]
        return max(ok, key=lambda p: (p.sentences_per_s, -p.bytes_per_vector, p.spearman)) if ok else None

    def shrink_command(self, point: SweepPoint) -> str:
        layers = str(point.layers) if self.select is Select.FIRST else ",".join(map(str, point.kept))
        select = " --select first" if self.select is Select.FIRST else ""
        return (f"espresso-export shrink {self.source} --layers {layers}{select} --dim {point.dim} "
                f"--head {self.head.value} -o OUT")

    def point_dict(self, p: SweepPoint) -> dict:
        d = asdict(p)
        d["speedup"] = round(p.sentences_per_s / self.source_sentences_per_s, 4) if self.source_sentences_per_s else None
        for key in ("spearman", "retention", "sentences_per_s", "p50_ms", "explained_variance"):
            if d[key] is not None:
                d[key] = round(d[key], 4)
        d["per_set"] = {k: round(v, 4) for k, v in p.per_set.items()}
        return d

    def to_dict(self) -> dict:
        pick = {name: (None if p is None else {"layers": p.layers, "dim": p.dim, "kept": p.kept,
                                              "command": self.shrink_command(p)})
                for name, p in (("smallest", self.smallest), ("fastest", self.fastest))}
        return {
            "espresso_version": __version__,
            "source": {"id": self.source, "depth": self.source_depth, "dim": self.source_dim,
                       "spearman": round(self.source_spearman, 4),
                       "per_set": {k: round(v, 4) for k, v in self.source_per_set.items()},
                       "sentences_per_s": round(self.source_sentences_per_s, 4),
                       "p50_ms": round(self.source_p50_ms, 4), "params": self.source_params},
            "head": self.head.value, "select": self.select.value, "sts": self.sts_sets,
            "calibration": self.calibration, "threads": self.threads, "latency": self.latency,
            "target_retention": self.target_retention, "recommended": pick,
            "points": [self.point_dict(p) for p in self.points],
            "timings_seconds": {k: round(v, 2) for k, v in self.timings.items()},
            "notes": self.notes, "output": str(self.output) if self.output else None,
        }

    @classmethod
    def from_dict(cls, d: dict) -> SweepResult:
        """Rebuild a result from its ``sweep.json`` (to re-plot or compare sweeps without re-running them)."""
        src = d["source"]
        fields_ = {f for f in SweepPoint.__dataclass_fields__}
        return cls(
            source=src["id"], source_depth=src["depth"], source_dim=src["dim"], source_spearman=src["spearman"],
            source_per_set=src["per_set"], source_sentences_per_s=src["sentences_per_s"], source_p50_ms=src["p50_ms"],
            source_params=src["params"], head=Head(d["head"]), select=Select(d["select"]), sts_sets=d["sts"],
            calibration=d["calibration"], threads=d["threads"], latency=d["latency"],
            target_retention=d["target_retention"],
            points=[SweepPoint(**{k: v for k, v in p.items() if k in fields_}) for p in d["points"]],
            timings=d.get("timings_seconds", {}), notes=d.get("notes", []),
            output=Path(d["output"]) if d.get("output") else None,
        )

    CSV_COLUMNS = ("layers", "kept", "dim", "spearman", "retention", "sentences_per_s", "speedup", "p50_ms", "params",
                   "bytes_per_vector", "explained_variance", "pareto", "meets_target")

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(self.CSV_COLUMNS)
        for p in self.points:
            d = self.point_dict(p)
            d["kept"] = " ".join(map(str, p.kept))
            writer.writerow(["" if d[c] is None else d[c] for c in self.CSV_COLUMNS])
        return buf.getvalue()


def pareto_front(points: Sequence[SweepPoint]) -> list[SweepPoint]:
    """Points no other point beats on both Spearman and throughput (ties kept)."""
    front = []
    for p in points:
        dominated = any(
            q.spearman >= p.spearman and q.sentences_per_s >= p.sentences_per_s
            and (q.spearman > p.spearman or q.sentences_per_s > p.sentences_per_s)
            for q in points
        )
        if not dominated:
            front.append(p)
    return front


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
    return {s.name: sts_spearman(emb[texts.rows(s.pairs.sentence1)], emb[texts.rows(s.pairs.sentence2)], s.pairs.scores)
            for s in sets}


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
    if select is Select.AUTO:
        raise ValidationError("sweep --select must be first or spread")
    if not 0 < options.target_retention <= 1.5:
        raise ValidationError(f"--target-retention must be a fraction like 0.95, got {options.target_retention}")
    if not options.sts:
        raise ValidationError("sweep needs at least one --sts set")
    depths, dims = sorted(set(options.layers)), sorted(set(options.dims))
    if not depths or not dims:
        raise ValidationError("sweep needs at least one depth (--layers) and one width (--dims)")
    return head, select, depths, dims


def _check_grid(ckpt: Checkpoint, depths: list[int], dims: list[int]) -> None:
    bad = [d for d in depths if d > ckpt.depth]
    if bad:
        raise ValidationError(f"--layers {bad} exceed the model's depth of {ckpt.depth} layers")
    wide = [d for d in dims if d > ckpt.output_dim]
    if wide:
        raise ValidationError(f"--dims {wide} exceed the embedding width {ckpt.output_dim}")


def _score_points(ckpt: Checkpoint, pooled: dict[int, np.ndarray], texts: _Texts, sets, head: Head,
                  kept: dict[int, list[int]], dims: list[int], target: float):
    """Every (depth, width) point's Spearman and size, the source's scores, and each depth's widest head."""
    n, width, n_sts = ckpt.depth, ckpt.output_dim, len(texts.texts)
    source_per_set = _sts_scores(_apply(ckpt.post, pooled[n][:n_sts]), texts, sets)
    source_score = float(np.mean(list(source_per_set.values())))
    base = [m for m in ckpt.post if not isinstance(m, Normalize)] + [Normalize()]  # as shrink's build_head
    outside, per_layer = _layer_params(ckpt)
    points: list[SweepPoint] = []
    widest: dict[int, list] = {}
    for depth, keep in kept.items():
        x = _apply(base, pooled[depth])
        sts_x, cal_x = x[:n_sts], x[n_sts:]
        fit = fit_pca(cal_x, dims[-1]) if head is Head.PCA else None  # narrower heads: its leading components
        widest[depth] = (base + [fit.as_dense(), Normalize()] if fit is not None
                         else base[:-1] + [truncation(width, dims[-1]), Normalize()])
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


def sweep(source: str | os.PathLike | Checkpoint, options: SweepOptions, *, output: str | os.PathLike | None = None,
          overwrite: bool = False, progress: bool = False) -> SweepResult:
    """Measure every (depth, width) point of ``source``; write sweep.json/.csv/.png to ``output`` if given."""
    from espresso_export.verification.latency import default_threads, fixed_threads, measure
    from espresso_export.verification.sts import SMOKE_NOTE, load_sts

    start = time.perf_counter()
    head, select, depths, dims = _check(options)
    if output is not None:
        check_output(output, overwrite=overwrite)
    sets = [load_sts(s, columns=options.sts_columns, limit=options.sts_limit) for s in options.sts]
    cal, cal_label = ([], None) if head is not Head.PCA else \
        load_calibration(options.calibration, options.calibration_samples, options.seed)
    if head is Head.PCA and len(cal) < dims[-1]:
        raise ValidationError(f"calibration has {len(cal)} sentences, fewer than the widest --dims {dims[-1]}; "
                              "a PCA needs at least that many")
    threads = options.threads or default_threads()
    timings: dict[str, float] = {}
    with fixed_threads(threads):
        t = time.perf_counter()
        ckpt = source if isinstance(source, Checkpoint) else load(source)
        timings["load"] = time.perf_counter() - t
        _check_grid(ckpt, depths, dims)
        n = ckpt.depth
        kept = {d: select_layers(n, d, select) for d in depths}
        texts = _Texts(*[s.pairs.sentence1 + s.pairs.sentence2 for s in sets])

        t = time.perf_counter()
        pooled = _pooled_by_depth(ckpt, texts.texts + cal, depths, kept, select, options.batch_size, progress)
        timings["encode"] = time.perf_counter() - t
        t = time.perf_counter()
        points, widest, source_per_set, source_params = _score_points(
            ckpt, pooled, texts, sets, head, kept, dims, options.target_retention)
        timings["heads_and_scores"] = time.perf_counter() - t

        t = time.perf_counter()
        sample = texts.texts if len(texts.texts) <= options.latency_texts else \
            random.Random(options.seed).sample(texts.texts, options.latency_texts)
        embedders = [_DepthEmbedder.of(ckpt, None if d == n else kept[d], widest[d]) for d in depths]
        embedders.append(_DepthEmbedder.of(ckpt, None, ckpt.post))
        stats = [s[options.latency_batch_size] for s in measure(
            embedders, sample, [options.latency_batch_size], rounds=options.latency_rounds, warmup=1,
            progress="latency (per depth)" if progress else None)]
        timings["latency"] = time.perf_counter() - t
    by_depth = dict(zip(depths, stats))
    for p in points:
        p.sentences_per_s, p.p50_ms = by_depth[p.layers].sentences_per_s, by_depth[p.layers].p50_ms
    for p in pareto_front(points):
        p.pareto = True

    notes = []
    if any(s.smoke for s in sets):
        notes.append(SMOKE_NOTE.format(n=len(load_sts("builtin").pairs)))
    if select is Select.FIRST and not ckpt.ese_trained and depths[0] < n:
        notes.append("this model is not ESE-trained: its first-L cuts usually score below spread cuts "
                     "(try --select spread)")
    result = SweepResult(
        source=ckpt.source, source_depth=n, source_dim=ckpt.output_dim,
        source_spearman=float(np.mean(list(source_per_set.values()))), source_per_set=source_per_set,
        source_sentences_per_s=stats[-1].sentences_per_s, source_p50_ms=stats[-1].p50_ms,
        source_params=source_params, head=head, select=select,
        sts_sets=[{"name": s.name, "spec": s.spec, "kind": s.kind, "pairs": len(s.pairs), "smoke_set": s.smoke}
                  for s in sets],
        calibration=None if head is not Head.PCA else {"source": cal_label, "size": len(cal)},
        threads=threads, latency={"batch_size": options.latency_batch_size, "texts": len(sample),
                                  "rounds": options.latency_rounds, "measured": "once per depth, widest head"},
        target_retention=options.target_retention, points=points, notes=notes,
    )
    timings["total"] = time.perf_counter() - start
    result.timings = timings
    if output is not None:
        _write(result, output, overwrite)
    return result


def _write(result: SweepResult, output: str | os.PathLike, overwrite: bool) -> None:
    from espresso_export.verification.plots import plot_sweep

    with atomic_output(output, overwrite=overwrite) as tmp:
        result.output = Path(output).expanduser().resolve()
        write_text_atomic(tmp / "sweep.csv", result.to_csv())
        write_text_atomic(tmp / "sweep.json", json.dumps(result.to_dict(), indent=2) + "\n")
        plot_sweep(result, tmp / "sweep.png")
