"""verify's latency measurement: a noisy clock is flagged, a quiet one is not; the table at 80 columns."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from espresso_export.verification.embedders import Embedder, open_embedder
from espresso_export.model.threads import fixed_threads
from espresso_export.verification.latency import BatchTiming, Plan, median_ci, time_batch_size
from espresso_export.verification.latency_report import LatencyRow, LatencySetup, latency_dict
from espresso_export.core.types import WithinNoise

DATA = Path(__file__).parents[1] / "data"
TEXTS = ["a short one", "a somewhat longer sentence to embed", "three words here", "and the last of four"]


class StepClock:
    """A clock that advances by the next step on every reading: what a timed call measures is that step."""

    def __init__(self, steps) -> None:
        self.steps, self.now = iter(steps), 0.0

    def __call__(self) -> float:
        self.now += next(self.steps)
        return self.now


def quiet_steps():
    while True:
        yield 0.010


def noisy_steps(seed: int = 0):
    rng = np.random.default_rng(seed)
    while True:  # log-normal jitter and a 30x spike now and then: another process taking the core
        yield 0.010 * rng.lognormal(0.0, 0.6) * (30.0 if rng.random() < 0.08 else 1.0)


@pytest.fixture(scope="module")
def two_models(tiny_bert):
    with fixed_threads(1):
        yield [open_embedder(tiny_bert, threads=1), open_embedder(tiny_bert, threads=1)]


def timed(models, steps, *, load=0.0, budget=1.0, cpu=lambda: None) -> BatchTiming:
    """``cpu=lambda: None``: no CPU-time probe (as off Linux), so the fake clock and load decide."""
    with fixed_threads(1):
        return time_batch_size(models, TEXTS, 2, Plan(min_rounds=3, budget_s=budget, warmup=1, max_rounds=12),
                               clock=StepClock(steps), load=lambda: load, cores=2, cpu=cpu)


def test_noisy_clock_is_flagged_in_the_row_and_the_json(two_models):
    timing = timed(two_models, noisy_steps())
    assert timing.rounds > 3  # the ratio's CI stayed loose: rounds were added until the budget ran out
    row = LatencyRow.of(timing)
    assert not row.reliable
    assert any("spread" in r for r in row.reasons) and any("p95/p50 of repeated batches" in r for r in row.reasons)
    data = latency_dict([row], LatencySetup(threads=1, torch_threads=1, texts=len(TEXTS), min_rounds=3, budget_s=1))
    assert data["reliable"] is False and data["batches"][0]["reliable"] is False
    assert data["warnings"] and data["warnings"][0].startswith("batch 2: ")
    assert data["batches"][0]["reasons"] == list(row.reasons)


def test_quiet_clock_gives_no_warning_and_stops_early(two_models):
    timing = timed(two_models, quiet_steps())
    assert timing.rounds == 3  # the CI is tight at once: no more rounds than asked
    row = LatencyRow.of(timing)
    assert row.reliable and row.reasons == ()
    assert row.speedup == pytest.approx(1.0) and row.speedup_ci == pytest.approx((1.0, 1.0))
    assert row.candidate.p50_ms == pytest.approx(10.0) and row.candidate.spread == pytest.approx(0.0)


def test_load_average_above_the_cores_is_flagged_where_cpu_times_are_unknown(two_models):
    row = LatencyRow.of(timed(two_models, quiet_steps(), load=3.5))
    assert row.reasons == ("1-min load average 3.5 above 2 cores (other processes compete)",)


def test_other_processes_cpu_decides_not_the_load_average(two_models):
    """A high load average left by this process's own work (a recipe's training step just before verify) is no
    reason to distrust it; other processes' CPU time while measuring is."""
    def probe(machine_after, own_after):
        readings = iter([(100.0, 10.0), (100.0 + machine_after, 10.0 + own_after)])
        return lambda: next(readings)

    # the machine was busy only with this process: the load average (3.5) is not held against the measurement
    quiet = LatencyRow.of(timed(two_models, quiet_steps(), load=3.5, cpu=probe(0.30, 0.30)))
    assert quiet.reliable and quiet.other_cores == pytest.approx(0.0)
    busy = LatencyRow.of(timed(two_models, quiet_steps(), load=0.0, cpu=probe(0.50, 0.30)))
    assert busy.other_cores > 0.25
    assert busy.reasons == (f"other processes kept {busy.other_cores:.2f} of 2 cores busy while measuring "
                            "(above 0.25)",)
    assert busy.to_dict()["other_cores"] == pytest.approx(busy.other_cores, abs=1e-3)


def test_cpu_seconds_reads_the_machine_and_this_process():
    import sys

    from espresso_export.verification.latency import cpu_seconds

    got = cpu_seconds()
    if not sys.platform.startswith("linux"):
        assert got is None
        return
    machine, own = got
    assert machine > 0 and own > 0 and machine >= own * 0.5


def test_too_few_rounds_is_flagged(two_models):
    with fixed_threads(1):
        timing = time_batch_size(two_models, TEXTS, 4, Plan(min_rounds=1, warmup=0), clock=StepClock(quiet_steps()),
                                 load=lambda: None, cores=2, cpu=lambda: None)
    assert timing.rounds == 1
    assert LatencyRow.of(timing).reasons == ("1 round(s): too few to know the spread (needs 3)",)


def test_median_ci_is_the_binomial_order_statistic_interval():
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)  # fewer than 6 values: min and max
    values = list(range(1, 21))  # n = 20: the 95% interval is the 6th to the 15th value
    assert median_ci(values) == (6, 15)


def _timing(batch_size: int, cand_ms: list[float], src_ms: list[float], load: float) -> BatchTiming:
    seconds = np.array([[[c / 1000.0] * 4 for c in cand_ms], [[s / 1000.0] * 4 for s in src_ms]])
    return BatchTiming(batch_size, seconds, load, 2, 2)


def fixed_report():
    """A report with fixed numbers: one reliable batch size, one measured under load."""
    from espresso_export.verification.report import StsRow, Thresholds, VerifyReport

    model = {"kind": "pytorch", "path": None, "load_seconds_runs": [0.1, 0.1, 0.1]}
    cand = {**model, "spec": "minilm-L3-d128", "dim": 128, "n_params": 12_345_678, "disk_bytes": 49_000_000,
            "bytes_per_vector": 512, "load_seconds": 0.11}
    src = {**model, "spec": "sentence-transformers/all-MiniLM-L6-v2", "dim": 384, "n_params": 22_713_216, "disk_bytes": 91_000_000,
           "bytes_per_vector": 1536, "load_seconds": 0.16}
    rows = [LatencyRow.of(_timing(1, [4.1, 4.2, 4.3, 4.2, 4.2], [20.1, 20.5, 20.3, 20.2, 20.4], 0.4)),
            LatencyRow.of(_timing(32, [40.0, 90.0, 42.0, 41.0, 140.0], [200.0, 210.0, 600.0, 205.0, 199.0], 3.2))]
    setup = LatencySetup(threads=2, torch_threads=2, texts=128, min_rounds=3, budget_s=20.0)
    sts = [StsRow("sts-test.csv", "sts-test.csv", "file", 1379, 69.72, 82.03)]
    return VerifyReport(candidate=cand, source=src, threads=2, sts=sts, latency=rows, latency_setup=setup,
                        retrieval=[], thresholds=Thresholds(min_sts_retention=0.8), notes=[],
                        source_cache={"used": True, "folder": "/c", "reused_texts": 1379 * 2, "encoded_texts": 0})


def test_verify_tables_fit_80_columns_as_stored():
    from rich.console import Console

    out = io.StringIO()
    fixed_report().print(Console(file=out, width=80, color_system=None, legacy_windows=False))
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text == (DATA / "verify_tables_80.txt").read_text(encoding="utf-8")


def test_unreliable_ratio_is_marked_in_table_markdown_and_json():
    report = fixed_report()
    data = report.to_dict()["latency"]
    assert [b["reliable"] for b in data["batches"]] == [True, False] and data["reliable"] is False
    assert "1-min load average 3.2 above 2 cores" in data["warnings"][0]
    markdown = report.to_markdown()
    assert "x? |" in markdown and "? not reliable, batch 32: " in markdown
    assert report.to_dict()["source_cache"]["reused_texts"] == 2758


class CacheWorld:
    """Stand-in for a CPU's caches: a call is slow (30 ms, not 10) when another model ran last. The clock moves
    by the last call's time at its next reading."""

    def __init__(self) -> None:
        self.last, self.pending, self.now = None, 0.0, 0.0

    def clock(self) -> float:
        self.now, self.pending = self.now + self.pending, 0.0
        return self.now


@dataclass
class CacheSensitive(Embedder):
    world: CacheWorld | None = None

    def encode(self, texts, batch_size=32):
        self.world.pending = 0.010 if self.world.last is self else 0.030
        self.world.last = self
        return np.zeros((len(texts), self.dim), dtype=np.float32)


def test_each_model_is_timed_after_its_own_batch_not_after_the_other_models():
    """Two equal models whose calls slow down after the other's (cold caches; a runtime's threads still
    spinning): each timed call must follow one of the model's own, so they measure equal, at their warm speed."""
    world = CacheWorld()
    models = [CacheSensitive(spec=n, kind="pytorch", dim=2, n_params=None, disk_bytes=None, load_seconds=0.0,
                             world=world) for n in ("candidate", "source")]
    timing = time_batch_size(models, TEXTS, 1, Plan(min_rounds=3, warmup=1, max_rounds=3), clock=world.clock,
                             load=lambda: 0.0, cores=2, cpu=lambda: None)
    row = LatencyRow.of(timing)
    assert row.candidate.p50_ms == pytest.approx(10.0) and row.source.p50_ms == pytest.approx(10.0)
    assert row.speedup == pytest.approx(1.0) and row.reliable


@pytest.mark.parametrize("policy", list(WithinNoise))
def test_the_latency_gate_says_when_its_timing_is_not_to_be_trusted(policy):
    """A walk-through's verify beside two busy processes: the latency table said "?" with a ratio CI of
    0.49-3.5, yet its gate row read "0.5566 pass" with no mark, no interval and no ``reliable`` in the JSON.
    The check now carries the interval and the mark; ``--within-noise`` decides it (fail: a busy runner cannot
    pass; pass: nor fail it); on the value it passes, marked."""
    from espresso_export.verification.latency import BatchTiming
    from espresso_export.verification.latency_report import LatencyRow, LatencySetup
    from espresso_export.verification.report import Thresholds, VerifyReport

    per_round = np.array([0.5, 0.45, 0.9, 0.3, 0.55])  # candidate / source, per round: the median 0.5 passes 0.6
    seconds = np.stack([np.repeat(per_round[:, None], 4, axis=1) * 0.01, np.full((5, 4), 0.01)])
    busy = BatchTiming(1, seconds, load_average=3.1, cores=2, threads=1, other_cores=1.4)
    row = LatencyRow.of(busy)
    assert not row.reliable and row.time_ratio.low <= 0.6 < row.time_ratio.high
    info = {"spec": "m", "kind": "onnx", "n_params": 1, "disk_bytes": 1, "bytes_per_vector": 4, "dim": 1,
            "load_seconds": 0.1}
    report = VerifyReport(candidate=info, source=info, threads=1, sts=[], latency=[row],
                          latency_setup=LatencySetup(threads=1), retrieval=[],
                          thresholds=Thresholds(max_latency_ratio=0.6, within_noise=policy))
    (check,) = report.checks
    assert check.passed is (policy is not WithinNoise.FAIL) and check.within_noise and not check.reliable
    assert "timing NOT reliable" in check.describe() and "within the timing's noise" in check.describe()
    gate = report.sections()[-1]
    assert gate.rows[0][2].startswith(f"{row.latency_ratio:.4f}? [")
    assert any(f.startswith("? timing NOT reliable (see the latency table): latency ratio at batch 1") and
               f"--within-noise {policy.value}" in f for f in gate.footnotes)
    as_json = report.to_dict()["gate"]["checks"][0]
    assert as_json["reliable"] is False and as_json["ci95"] == [round(row.time_ratio.low, 4),
                                                                round(row.time_ratio.high, 4)]
    assert as_json["decided_by"] == ("value" if policy is WithinNoise.VALUE else "interval")
