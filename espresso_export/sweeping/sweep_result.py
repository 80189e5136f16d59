"""The result of ``sweep``: one :class:`SweepPoint` per (depth, width) cut, the source's numbers, and
its three views (``sweep.json``, ``sweep.csv`` and, in :mod:`espresso_export.sweeping.plots`, the plot).

Kept apart from the measuring code in :mod:`espresso_export.sweeping.sweep` so the plot and anything
that re-reads a ``sweep.json`` need only this module (no torch, no model loading).
"""

from __future__ import annotations

import csv
import io
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from espresso_export import __version__
from espresso_export.core.settings import field_of
from espresso_export.core.types import Head, Select, SweepMetric
from espresso_export.shrinking.shrink_settings import ShrinkSettings

CALIBRATION_SAMPLES = field_of(ShrinkSettings, "calibration_samples").default  # a command says another only
SEED = field_of(ShrinkSettings, "seed").default


@dataclass
class SweepPoint:
    """One cut: the first (or spread) ``layers`` layers and a ``dim``-wide head, scored, timed and sized."""

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
    agreement: dict[str, dict] | None = None  # --metric agreement: per corpus, Agreement.to_dict() (fractions)
    precision: dict[str, dict] = field(default_factory=dict)  # --precision: per precision, "score" (x100 as
    # ``spearman``), "per_set", "retention" (of the source's float32 score) and "bytes_per_vector"

    @property
    def label(self) -> str:
        return f"d{self.dim}" if self.layers == 0 else f"L{self.layers}/d{self.dim}"  # 0 layers: a static model


SCORE_KEYS = {SweepMetric.STS: "spearman", SweepMetric.RETRIEVAL: "ndcg_at_10",
              SweepMetric.AGREEMENT: "agreement_at_10"}
METRIC_NAMES = {SweepMetric.STS: "Spearman", SweepMetric.RETRIEVAL: "nDCG@10", SweepMetric.AGREEMENT: "agreement@10"}


def score_key(metric: SweepMetric) -> str:
    """The JSON and CSV key of a sweep's score: named for what it holds (``spearman``, ``ndcg_at_10`` or
    ``agreement_at_10``)."""
    return SCORE_KEYS[metric]


def score_scale(metric: SweepMetric) -> float:
    """The JSON and CSV hold each score on verify's scale: Spearman x100, nDCG@10 and agreement@10 fractions (the
    points hold all x100, as the table and the plot show them)."""
    return 1.0 if metric is SweepMetric.STS else 0.01


@dataclass
class SweepResult:
    """A sweep's points, the source's own numbers and how they were measured; the picks meeting the target."""

    source: str
    source_depth: int
    source_dim: int
    source_spearman: float
    source_per_set: dict[str, float]
    source_sentences_per_s: float
    source_p50_ms: float
    source_params: int
    head: Head
    select: Select  # first or spread: how the layers were selected
    sets: list[dict]  # the sets the points are scored on: STS sets, or retrieval sets with ``metric`` retrieval
    calibration: dict | None
    threads: int
    latency: dict
    target_retention: float
    points: list[SweepPoint]
    metric: SweepMetric = SweepMetric.STS  # ``spearman`` of the points and the source holds this metric's score x100
    # (the JSON and CSV name it :attr:`score_key`)
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    output: Path | None = None
    select_auto: bool = False  # ``select`` is what ``auto`` (shrink's default) picked for this model
    precision: dict | None = None  # --precision: "precisions", the source's scores at each ("source", as a
    # point's ``precision``) and the sentences int8/uint8 ranges were fitted on ("int8_calibration")
    static: bool = False  # a static model (model2vec's format): the points are its table's widths, no layers

    @property
    def selection(self) -> str:
        """How the layers were picked, as the table and the plot name it."""
        return f"{self.select.value} (auto)" if self.select_auto else self.select.value

    @property
    def timing_reliable(self) -> bool:
        """False when the throughput was measured under conditions verify would not trust (``latency.reasons``)."""
        return self.latency.get("reliable", True)

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

    @property
    def metric_name(self) -> str:
        """What ``spearman`` holds: the points are scored on ``metric``."""
        return METRIC_NAMES[self.metric]

    @property
    def metric_label(self) -> str:
        return f"{self.metric_name} x100"

    @property
    def score_key(self) -> str:
        return score_key(self.metric)

    @property
    def sets_key(self) -> str:
        """The JSON key of the sets scored on: ``sts`` or ``retrieval``, like verify's report."""
        return self.metric.value

    def shrink_command(self, point: SweepPoint) -> str:
        """The command that builds ``point``: shrink's cut, or for a static model the export serving that width
        (``OnnxEncoder(OUT, dim=k)``)."""
        if self.static:
            dims = "" if point.dim == self.source_dim else f" --dims {point.dim}"
            return f"espresso-export export {shlex.quote(self.source)}{dims} -o OUT"
        if self.select_auto:  # shrink's own default picks the same layers
            layers, select = str(point.layers), ""
        else:
            layers = str(point.layers) if self.select is Select.FIRST else ",".join(map(str, point.kept))
            select = " --select first" if self.select is Select.FIRST else ""
        cal = self.calibration or {}
        fit = ""  # the PCA fitted as the sweep fitted it, so the command builds the point it measured
        if cal.get("spec"):
            fit += f" --calibration {shlex.quote(str(cal['spec']))}"
        if cal.get("samples") not in (None, CALIBRATION_SAMPLES):
            fit += f" --calibration-samples {cal['samples']}"
        if cal.get("seed") not in (None, SEED):
            fit += f" --seed {cal['seed']}"
        return (f"espresso-export shrink {shlex.quote(self.source)} --layers {layers}{select} --dim {point.dim} "
                f"--head {self.head.value}{fit} -o OUT")

    def point_dict(self, p: SweepPoint) -> dict:
        d = asdict(p)
        # from the speeds as the JSON holds them (4 decimals), so a sweep.json read back gives the same speed-up
        source = round(self.source_sentences_per_s, 4)
        d["speedup"] = round(round(p.sentences_per_s, 4) / source, 4) if source else None
        for key in ("spearman", "retention", "sentences_per_s", "p50_ms", "explained_variance"):
            if d[key] is not None:
                d[key] = round(d[key], 4)
        scale = score_scale(self.metric)
        d["per_set"] = {k: round(scale * v, 6) for k, v in p.per_set.items()}
        d[self.score_key] = round(scale * d.pop("spearman"), 6)
        if d["agreement"] is None:  # new keys appear only when measured: older readers see the same points
            del d["agreement"]
        if p.precision:
            d["precision"] = self._precision_dict(p.precision)
        else:
            del d["precision"]
        return d

    def _precision_dict(self, at: dict[str, dict]) -> dict[str, dict]:
        """Scores at each precision on the JSON's scale, under the sweep's score key."""
        scale = score_scale(self.metric)
        return {name: {self.score_key: round(scale * v["score"], 6),
                       "per_set": {k: round(scale * x, 6) for k, x in v["per_set"].items()},
                       "retention": None if v.get("retention") is None else round(v["retention"], 4),
                       "bytes_per_vector": v["bytes_per_vector"]} for name, v in at.items()}

    @classmethod
    def _precision_from(cls, at: dict[str, dict], key: str, up: float) -> dict[str, dict]:
        """:meth:`_precision_dict` read back (scores x100 again)."""
        return {name: {"score": up * v[key], "per_set": {k: up * x for k, x in v["per_set"].items()},
                       "retention": v.get("retention"), "bytes_per_vector": v["bytes_per_vector"]}
                for name, v in at.items()}

    def to_dict(self) -> dict:
        pick = {name: (None if p is None else {"layers": p.layers, "dim": p.dim, "kept": p.kept,
                                              "command": self.shrink_command(p)})
                for name, p in (("smallest", self.smallest), ("fastest", self.fastest))}
        scale = score_scale(self.metric)
        out = {
            "espresso_version": __version__,
            "source": {"id": self.source, "depth": self.source_depth, "dim": self.source_dim,
                       self.score_key: round(scale * self.source_spearman, 6),
                       "per_set": {k: round(scale * v, 6) for k, v in self.source_per_set.items()},
                       "sentences_per_s": round(self.source_sentences_per_s, 4),
                       "p50_ms": round(self.source_p50_ms, 4), "params": self.source_params},
            "head": self.head.value, "select": self.select.value, "select_auto": self.select_auto,
            self.sets_key: self.sets,
            "calibration": self.calibration, "threads": self.threads, "latency": self.latency,
            "target_retention": self.target_retention, "recommended": pick,
            "metric": self.metric.value, "score_scale": "fraction" if scale < 1 else "x100",
            "points": [self.point_dict(p) for p in self.points],
            "timings_seconds": {k: round(v, 2) for k, v in self.timings.items()},
            "notes": self.notes, "output": str(self.output) if self.output else None,
        }
        if self.static:  # a new key only for a static model
            out["static"] = True
        if self.precision is not None:  # new keys only: a sweep without --precision writes what it always wrote
            out["precision"] = {k: v for k, v in self.precision.items() if k != "source"}
            out["source"]["precision"] = self._precision_dict(self.precision.get("source", {}))
        return out

    @classmethod
    def from_dict(cls, d: dict) -> SweepResult:
        """Rebuild a result from its ``sweep.json`` (to re-plot or compare sweeps without re-running them)."""
        src = d["source"]
        key = score_key(SweepMetric(d.get("metric", "sts")))
        up = 100.0 if d.get("score_scale") == "fraction" else 1.0  # a sweep.json without score_scale holds x100
        fields_ = {f for f in SweepPoint.__dataclass_fields__}

        def point(p: dict) -> SweepPoint:
            return SweepPoint(spearman=up * p.get(key, p.get("spearman")),
                              per_set={k: up * v for k, v in p["per_set"].items()},
                              precision=cls._precision_from(p.get("precision", {}), key, up),
                              **{k: v for k, v in p.items()
                                 if k in fields_ and k not in ("spearman", "per_set", "precision")})

        precision = None if "precision" not in d else {
            **d["precision"], "source": cls._precision_from(src.get("precision", {}), key, up)}

        return cls(
            source=src["id"], source_depth=src["depth"], source_dim=src["dim"],
            source_spearman=up * src.get(key, src.get("spearman")),
            source_per_set={k: up * v for k, v in src["per_set"].items()}, source_sentences_per_s=src["sentences_per_s"], source_p50_ms=src["p50_ms"],
            source_params=src["params"], head=Head(d["head"]), select=Select(d["select"]), select_auto=d.get("select_auto", False),
            sets=d.get(d.get("metric", "sts"), d.get("sts", [])),  # an older sweep.json keeps either kind under "sts"
            calibration=d["calibration"], threads=d["threads"], latency=d["latency"],
            target_retention=d["target_retention"],
            metric=SweepMetric(d.get("metric", "sts")),
            points=[point(p) for p in d["points"]],
            timings=d.get("timings_seconds", {}), notes=d.get("notes", []),
            output=Path(d["output"]) if d.get("output") else None, precision=precision, static=d.get("static", False),
        )

    CSV_COLUMNS = ("layers", "kept", "dim", "spearman", "retention", "sentences_per_s", "speedup", "p50_ms", "params",
                   "bytes_per_vector", "explained_variance", "pareto", "meets_target")

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        columns = [self.score_key if c == "spearman" else c for c in self.CSV_COLUMNS]
        precisions = (self.precision or {}).get("precisions", [])  # then, per precision, score and bytes columns
        writer.writerow(columns + [f"{c}_{p}" for p in precisions for c in (self.score_key, "bytes_per_vector")])
        for p in self.points:
            d = self.point_dict(p)
            d["kept"] = " ".join(map(str, p.kept))
            at = d.get("precision", {})
            writer.writerow(["" if d[c] is None else d[c] for c in columns] +
                            [at[name][c] if name in at else "" for name in precisions
                             for c in (self.score_key, "bytes_per_vector")])
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
