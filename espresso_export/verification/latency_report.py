"""The latency part of the verify report: one row per batch size, its JSON and its table.

A ratio measured under conditions :meth:`~espresso_export.verification.latency.BatchTiming.reasons` does not
trust is printed with a ``?`` and a footnote naming why, and its JSON row says ``"reliable": false``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from espresso_export.core.formatting import number, rounded
from espresso_export.verification.latency import BatchTiming, LatencyStats, Limits, Ratio

UNRELIABLE = "?"
ROLES = ("candidate", "source")


def ratio(candidate: float | int | None, source: float | int | None) -> float | None:
    if candidate is None or source is None or source == 0:
        return None
    return float(candidate) / float(source)


@dataclass(frozen=True)
class LatencyRow:
    batch_size: int
    candidate: LatencyStats
    source: LatencyStats
    time_ratio: Ratio | None = None  # candidate / source time of the same round, median over rounds, 95% CI
    reasons: tuple[str, ...] = ()  # why the measurement is not to be trusted
    load_average: float | None = None
    cores: int | None = None
    other_cores: float | None = None  # CPU cores other processes kept busy while measuring

    @classmethod
    def of(cls, timing: BatchTiming, limits: Limits = Limits()) -> LatencyRow:
        """Embedder 0 is the candidate, 1 the source."""
        return cls(timing.batch_size, timing.stats(0), timing.stats(1), timing.ratio(0, 1),
                   tuple(timing.reasons(ROLES, limits)), timing.load_average, timing.cores, timing.other_cores)

    @property
    def reliable(self) -> bool:
        return not self.reasons

    @property
    def p50_ratio(self) -> float | None:
        return ratio(self.candidate.p50_ms, self.source.p50_ms)

    @property
    def latency_ratio(self) -> float | None:
        """Candidate / source time of the same round, median over rounds: 1 / the table's speed-up, and what the
        latency gate decides on (a number the table shows)."""
        if self.time_ratio is not None and self.time_ratio.median > 0:
            return self.time_ratio.median
        return ratio(self.candidate.round_ms[2], self.source.round_ms[2])

    @property
    def speedup(self) -> float | None:
        """How many times faster the candidate ran: the paired per-round ratio, else the throughputs' ratio."""
        if self.time_ratio is not None and self.time_ratio.median > 0:
            return 1.0 / self.time_ratio.median
        return ratio(self.candidate.sentences_per_s, self.source.sentences_per_s)

    @property
    def speedup_ci(self) -> tuple[float, float] | None:
        r = self.time_ratio
        return None if r is None or r.low <= 0 else (1.0 / r.high, 1.0 / r.low)

    def to_dict(self) -> dict:
        ci = self.speedup_ci
        return {"batch_size": self.batch_size, "candidate": self.candidate.to_dict(), "source": self.source.to_dict(),
                "latency_ratio": rounded(self.latency_ratio),
                "p50_ratio": rounded(self.p50_ratio), "p95_ratio": rounded(ratio(self.candidate.p95_ms, self.source.p95_ms)),
                "throughput_ratio": rounded(self.speedup),
                "throughput_ratio_ci95": None if ci is None else [rounded(ci[0]), rounded(ci[1])],
                "time_ratio": None if self.time_ratio is None else self.time_ratio.to_dict(),
                "reliable": self.reliable, "reasons": list(self.reasons),
                "load_average": rounded(self.load_average, 2), "other_cores": rounded(self.other_cores, 3),
                "cores": self.cores}


@dataclass
class LatencySetup:
    """How the latency was measured: recorded in the report."""

    threads: int  # what was asked for
    torch_threads: int | None = None  # what torch ran with
    openvino_threads: dict[str, int | None] = field(default_factory=dict)  # per OpenVINO model: its compiled threads
    onnxruntime_threads: dict[str, int | None] = field(default_factory=dict)  # per ONNX model: its session's
    texts: int = 0
    min_rounds: int = 1
    budget_s: float = 0.0
    cpu: dict = field(default_factory=dict)  # :func:`espresso_export.core.cpu.int8_isa`: ratios differ per CPU

    def to_dict(self) -> dict:
        return {"threads": self.threads, "torch_threads": self.torch_threads, "cpu": self.cpu,
                "onnxruntime_threads": self.onnxruntime_threads, "openvino_threads": self.openvino_threads,
                "texts": self.texts, "rounds": self.min_rounds,
                "budget_seconds": self.budget_s}


def latency_dict(rows: Sequence[LatencyRow], setup: LatencySetup) -> dict:
    return {**setup.to_dict(), "reliable": all(r.reliable for r in rows), "warnings": latency_warnings(rows),
            "batches": [r.to_dict() for r in rows]}


def latency_warnings(rows: Sequence[LatencyRow]) -> list[str]:
    return [f"batch {r.batch_size}: " + "; ".join(r.reasons) for r in rows if r.reasons]


def _speedup_cell(row: LatencyRow) -> str:
    return number(row.speedup, ".2f", "x" if row.reliable else "x" + UNRELIABLE)


def _ci_cell(row: LatencyRow) -> str:
    ci = row.speedup_ci
    return "" if ci is None else f"{ci[0]:.2f}-{ci[1]:.2f}"


def latency_title(setup: LatencySetup, rows: Sequence[LatencyRow]) -> str:
    rounds = sorted({r.candidate.rounds for r in rows})
    shown = f"{rounds[0]}" if len(rounds) == 1 else f"{rounds[0]}-{rounds[-1]}"
    threads = f"{setup.torch_threads if setup.torch_threads is not None else setup.threads} torch"
    if setup.onnxruntime_threads:
        threads += ", " + "/".join(str(t) if t is not None else "default" for t in setup.onnxruntime_threads.values())
        threads += " onnxruntime"
    if setup.openvino_threads:
        threads += ", " + "/".join(str(t) for t in setup.openvino_threads.values()) + " OpenVINO"
    cpu = f", CPU: {setup.cpu['model']} ({setup.cpu['isa']})" if setup.cpu.get("model") else ""
    return (f"latency: ms per batch (median and IQR of {shown} rounds of {setup.texts} texts; p95 of single "
            f"batches), threads: {threads}{cpu}")


LATENCY_HEADERS = ("batch", "model", "ms", "IQR", "p95", "sent/s", "speed-up")


def latency_rows(rows: Sequence[LatencyRow]) -> list[tuple[str, ...]]:
    """Two lines per batch size (candidate, source); the speed-up and, under it, its 95% CI."""
    out = []
    for row in rows:
        for role, stats, last in (("candidate", row.candidate, _speedup_cell(row)), ("source", row.source,
                                                                                     _ci_cell(row))):
            _, q1, med, q3, _ = stats.round_ms
            out.append((str(row.batch_size) if role == "candidate" else "", role, f"{med:.1f}",
                        f"{q1:.1f}-{q3:.1f}", f"{stats.p95_ms:.1f}", f"{stats.sentences_per_s:.1f}", last))
    return out


def latency_footnotes(rows: Sequence[LatencyRow]) -> list[str]:
    notes = ["speed-up: candidate vs source time of the same round, median over rounds; under it, its 95% CI"]
    warnings = latency_warnings(rows)
    if warnings:
        notes.append(f"{UNRELIABLE} not reliable, " + " | ".join(warnings) + ". Measure again on an idle machine "
                     "or with a larger --latency-budget.")
    return notes
