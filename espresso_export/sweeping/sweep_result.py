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

    @property
    def label(self) -> str:
        return f"L{self.layers}/d{self.dim}"


def score_key(metric: SweepMetric) -> str:
    """The JSON and CSV key of a sweep's score: named for what it holds (``spearman`` or ``ndcg_at_10``)."""
    return "ndcg_at_10" if metric is SweepMetric.RETRIEVAL else "spearman"


def score_scale(metric: SweepMetric) -> float:
    """The JSON and CSV hold each score on verify's scale: Spearman x100, nDCG@10 a fraction (the points hold both
    x100, as the table and the plot show them)."""
    return 0.01 if metric is SweepMetric.RETRIEVAL else 1.0


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
        return "nDCG@10" if self.metric is SweepMetric.RETRIEVAL else "Spearman"

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
        d["speedup"] = round(p.sentences_per_s / self.source_sentences_per_s, 4) if self.source_sentences_per_s else None
        for key in ("spearman", "retention", "sentences_per_s", "p50_ms", "explained_variance"):
            if d[key] is not None:
                d[key] = round(d[key], 4)
        scale = score_scale(self.metric)
        d["per_set"] = {k: round(scale * v, 6) for k, v in p.per_set.items()}
        d[self.score_key] = round(scale * d.pop("spearman"), 6)
        return d

    def to_dict(self) -> dict:
        pick = {name: (None if p is None else {"layers": p.layers, "dim": p.dim, "kept": p.kept,
                                              "command": self.shrink_command(p)})
                for name, p in (("smallest", self.smallest), ("fastest", self.fastest))}
        scale = score_scale(self.metric)
        return {
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
                              **{k: v for k, v in p.items() if k in fields_ and k not in ("spearman", "per_set")})

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
            output=Path(d["output"]) if d.get("output") else None,
        )

    CSV_COLUMNS = ("layers", "kept", "dim", "spearman", "retention", "sentences_per_s", "speedup", "p50_ms", "params",
                   "bytes_per_vector", "explained_variance", "pareto", "meets_target")

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        columns = [self.score_key if c == "spearman" else c for c in self.CSV_COLUMNS]
        writer.writerow(columns)
        for p in self.points:
            d = self.point_dict(p)
            d["kept"] = " ".join(map(str, p.kept))
            writer.writerow(["" if d[c] is None else d[c] for c in columns])
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
